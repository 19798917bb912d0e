"""Montezuma throughput: raw EnvPool against the full OPIQ agent, same pool size, side by side.

* ``raw``: random actions through EnvPool's XLA interface in a compiled ``lax.scan`` (the ceiling:
  the emulators and nothing else);
* ``agent``: the whole OPIQ training step of ``opiq_jax.atari`` (acting on Q+, counting, frame
  replay, MMC, one update of batch 32 every 4 steps per run), one environment per run, learning
  while the emulators step (the default);
* ``agent_strict``: the same without that overlap (step, store, then train).

Both use the same pool sizes and the same number of steps after a warm-up chunk (compilation
excluded, reported apart). Writes ``montezuma_bench.json`` and ``montezuma_bench.md`` into ``--out``.
Run: ``python -m experiments.montezuma_bench --pool-sizes 4 16 --steps 4000``.

Reaches inside: the trainer, built around raw EnvPool pools, to time the agent against the emulators alone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import tyro

from opiq_jax.config import stack_hparams
from opiq_jax.environments import static_for_env
from opiq_jax.methods import method_hparams
from opiq_jax.experiment import Experiment, RunSpec, run_keys_for


@dataclass
class Args:
    pool_sizes: tuple[int, ...] = (4, 16)
    """Environments per pool (= runs for the agent)."""
    steps: int = 4_000
    """Timed agent steps per pool environment (after one warm-up chunk of the same length)."""
    buffer_size: int = 100_000
    """Replay frames per run for the agent (memory only; the step's work does not depend on it)."""
    out: Path = Path("results/montezuma-bench")
    """Where the table goes."""


def time_raw(pool_size: int, steps: int) -> dict:
    from opiq_jax.envs.montezuma import MontezumaPool

    pool = MontezumaPool(num_envs=pool_size, seed=0)
    handle, _ = pool.reset()

    def body(carry, _):
        handle, key = carry
        key, k = jax.random.split(key)
        handle, out = pool.step(handle, jax.random.randint(k, (pool_size,), 0, pool.num_actions))
        return (handle, key), out.reward.sum()

    run = jax.jit(lambda h, k: jax.lax.scan(body, (h, k), None, length=steps))
    started = time.perf_counter()
    (handle, key), r = run(handle, jax.random.key(0))
    jax.block_until_ready(r)
    compile_and_first = time.perf_counter() - started
    started = time.perf_counter()
    (handle, key), r = run(handle, key)
    jax.block_until_ready(r)
    seconds = time.perf_counter() - started
    return dict(pool_size=pool_size, kind="raw", env_steps_per_second=steps * pool_size / seconds,
                first_call_seconds=compile_and_first)


def time_agent(pool_size: int, steps: int, buffer_size: int, overlap: bool = True) -> dict:
    from opiq_jax.envs.montezuma import MontezumaPool
    from opiq_jax.memory import state_bytes_per_run
    from opiq_jax.trainer import make_train

    static = static_for_env("montezuma", total_steps=2 * steps, log_every=steps, buffer_size=buffer_size,
                            overlap=overlap)
    runs = tuple(RunSpec("opiq", "paper", s, method_hparams("montezuma", "opiq")) for s in range(pool_size))
    experiment = Experiment(static, runs)
    static = experiment.static
    pool = MontezumaPool(num_envs=pool_size, seed=0)
    trainer = make_train(static, pool)
    state = jax.jit(trainer.init)(*run_keys_for(experiment), stack_hparams(experiment.hparams()), pool.reset())
    chunk = jax.jit(trainer.train_chunk, donate_argnums=0)
    started = time.perf_counter()
    state, metrics = chunk(state)
    jax.block_until_ready(metrics)
    compile_and_first = time.perf_counter() - started
    started = time.perf_counter()
    state, metrics = chunk(state)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - started
    device = jax.local_devices()[0]
    peak = (device.memory_stats() or {}).get("peak_bytes_in_use") if hasattr(device, "memory_stats") else None
    return dict(pool_size=pool_size, kind="agent" if overlap else "agent_strict", env_steps_per_second=steps * pool_size / seconds,
                first_call_seconds=compile_and_first, peak_device_bytes=peak,
                state_bytes_per_run=state_bytes_per_run(static), buffer_size=buffer_size,
                paper_state_bytes_per_run=state_bytes_per_run(static_for_env("montezuma")))


def table(rows: list[dict], device: str) -> str:
    lines = [f"Montezuma throughput on {device} (environment steps per second, compile excluded).", "",
             "| pool size | raw EnvPool | OPIQ agent | agent / raw | agent without overlap | its ratio |",
             "|---|---|---|---|---|---|"]
    for size in dict.fromkeys(r["pool_size"] for r in rows):
        raw = next(r for r in rows if r["pool_size"] == size and r["kind"] == "raw")
        agent = next(r for r in rows if r["pool_size"] == size and r["kind"] == "agent")
        strict = next(r for r in rows if r["pool_size"] == size and r["kind"] == "agent_strict")
        rate = {k: r["env_steps_per_second"] for k, r in (("raw", raw), ("agent", agent), ("strict", strict))}
        lines.append(f"| {size} | {rate['raw']:,.0f} | {rate['agent']:,.0f} | {rate['agent'] / rate['raw']:.0%} | "
                     f"{rate['strict']:,.0f} | {rate['strict'] / rate['raw']:.0%} |")
    agent = next(r for r in rows if r["kind"] == "agent")
    lines += ["", f"Device state per run: {agent['paper_state_bytes_per_run'] / 2**30:.2f} GiB with the paper's 1M-frame "
              f"replay ({agent['state_bytes_per_run'] / 2**20:.0f} MiB at the {agent['buffer_size']:,}-frame replay timed here)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    rows = []
    for size in args.pool_sizes:
        rows.append(time_raw(size, args.steps))
        rows.append(time_agent(size, args.steps, args.buffer_size))
        rows.append(time_agent(size, args.steps, args.buffer_size, overlap=False))
        print(*rows[-3:], sep="\n", flush=True)
    device = jax.devices()[0].device_kind
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "montezuma_bench.json").write_text(json.dumps(dict(device=device, rows=rows), indent=1))
    text = table(rows, device)
    (args.out / "montezuma_bench.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
