"""Montezuma throughput: raw EnvPool against the full OPIQ agent, same pool size, side by side.

* ``raw``: random actions through EnvPool's XLA interface in a compiled ``lax.scan`` (the ceiling:
  the emulators and nothing else);
* ``agent``: the whole OPIQ training step of ``opiq_jax.atari`` (acting on Q+, counting, frame
  replay, MMC, one update of batch 32 every 4 steps per run), one environment per run, learning
  while the emulators step (the default);
* ``agent_strict``: the same without that overlap (step, store, then train);
* ``agent_no_updates``: the strict agent that never updates (acting, counting and storing only), so that
  the gap between raw and the agent splits into the agent's per-step work and the learner's updates.

Both use the same pool sizes and the same number of steps after a warm-up chunk (compilation
excluded, reported apart). Writes ``montezuma_bench.json`` and ``montezuma_bench.md`` into ``--out``.
Run: ``python -m experiments.bench.montezuma_bench --pool-sizes 4 16 --steps 4000``.

``time_plain`` times the plain baseline on the same pool (``opiq_jax.benchmark.plain_atari``: a straightforward
vmapped JAX DQN with counts, one dispatch per step) for ``experiments.bench.throughput_table``; this script's table
does not show it.

``--envs-per-run E`` times the agent as ``pool_size / E`` runs of E environments each (the layout of
``opiq-jax train --envs-per-run E``: the same replay ratio, so the same number of updates per environment step,
but E / train_every updates in sequence per scan step instead of one batched over E times as many runs).

``--devices N`` (N > 1) times raw EnvPool and the agent at each pool size (the total number of environments) on
one device and again split over the first N local devices, a pool per device with the host's emulator threads
shared out among the pools (as ``opiq-jax train`` does on a host with several GPUs).

Reaches inside: the trainer, built around raw EnvPool pools, to time the agent against the emulators alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import tyro

from opiq_jax.benchmark.throughput import bench_experiment, timed_call
from opiq_jax.common.config import stack_hparams
from opiq_jax.registry.environments import static_for_env
from opiq_jax.runs.experiment import run_keys_for


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
    devices: int = 1
    """Also time each pool size split over this many local devices (a pool per device); 1: one device only."""
    strict: bool = True
    """Also time the agent without the overlap of emulators and learning, and without any update."""
    envs_per_run: int = 1
    """Environments per run for the agent: pool_size / envs_per_run runs (each pool size must divide)."""


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
    ((handle, key), _), compile_and_first, _ = timed_call(lambda: run(handle, jax.random.key(0)))
    _, seconds, compiles = timed_call(lambda: run(handle, key))
    return dict(pool_size=pool_size, devices=1, kind="raw", env_steps_per_second=steps * pool_size / seconds,
                first_call_seconds=compile_and_first, compiles_timed=compiles)


def device_pools(pool_size: int, devices: int):
    """``pool_size`` Montezuma environments as a pool per device over the first ``devices`` local devices."""
    from opiq_jax.runs.devices import devices_mesh
    from opiq_jax.envs.atari import DevicePools, threads_per_pool
    from opiq_jax.envs.montezuma import MontezumaPool

    per = pool_size // devices
    threads = threads_per_pool(devices, per)
    pools = [MontezumaPool(num_envs=per, seed=d * per, num_threads=threads) for d in range(devices)]
    return DevicePools(pools, devices_mesh(jax.local_devices()[:devices]))


def time_raw_devices(pool_size: int, steps: int, devices: int) -> dict:
    """Raw EnvPool, random actions, a pool per device, each device's scan stepping its own pool."""
    from jax.sharding import PartitionSpec

    pools = device_pools(pool_size, devices)
    handle, _ = pools.reset()
    keys = jax.device_put(jax.random.split(jax.random.key(0), devices), pools.by_device)

    def local(handle, key):
        def body(carry, _):
            handle, key = carry
            key, k = jax.random.split(key)
            handle, out = pools.step(handle, jax.random.randint(k, (pools.envs_per_device,), 0, pools.num_actions))
            return (handle, key), out.reward.sum()

        (handle, key), r = jax.lax.scan(body, (handle, key[0]), None, length=steps)
        return handle, key[None], r.sum()[None]

    spec = PartitionSpec("runs")
    run = jax.jit(jax.shard_map(local, mesh=pools.mesh, in_specs=(spec, spec), out_specs=(spec, spec, spec),
                                check_vma=False))  # the pool call is opaque to the varying-axes check
    (handle, keys, _), compile_and_first, _ = timed_call(lambda: run(handle, keys))
    _, seconds, compiles = timed_call(lambda: run(handle, keys))
    return dict(pool_size=pool_size, devices=devices, kind="raw", env_steps_per_second=steps * pool_size / seconds,
                first_call_seconds=compile_and_first, compiles_timed=compiles)


NEVER = 10**9
"""A ``train_every`` no timed chunk reaches: the agent acts, counts and stores, and never updates."""


def agent_kind(overlap: bool, updates: bool) -> str:
    return "agent" if overlap else "agent_strict" if updates else "agent_no_updates"


def agent_and_state(static, pool_size: int, envs_per_run: int = 1, devices: int = 1) -> tuple[Any, Any, Any]:
    """The OPIQ agent's trainer around ``pool_size`` Montezuma environments (one pool, or one per device), its first
    state (sharded over the devices when several, as ``opiq-jax train`` places it) and the resolved configuration."""
    from opiq_jax.runs.devices import shard_over_devices
    from opiq_jax.envs.montezuma import MontezumaPool
    from opiq_jax.agent.trainer import make_train

    num_runs = pool_size // envs_per_run
    experiment = bench_experiment(static, num_runs)
    pool = MontezumaPool(num_envs=pool_size, seed=0) if devices == 1 else device_pools(pool_size, devices)
    trainer = make_train(experiment.static, pool)
    state = jax.jit(trainer.init)(*run_keys_for(experiment), stack_hparams(experiment.hparams()), pool.reset())
    return trainer, shard_over_devices(state, num_runs) if devices > 1 else state, experiment.static


def time_agent(pool_size: int, steps: int, buffer_size: int, overlap: bool = True, devices: int = 1,
               envs_per_run: int = 1, updates: bool = True, overrides: dict | None = None) -> dict:
    """The OPIQ agent on ``pool_size`` environments: its second chunk of ``steps`` steps per environment timed.

    The chunk is the program ``opiq-jax train`` runs, compiled as :func:`opiq_jax.runs.compiled.compile_chunk` compiles
    it: ahead of the first call (not through its cache, which would keep every timed pool alive). Jitted and called
    instead, it compiled again on its second call on one device (the first state, fresh from ``init``, is not
    committed to a device; the chunk's output is), and that compile was timed: from 521c61c to 576da19 every
    one-device agent rate of this script and of the throughput table's Montezuma row held one. ``compiles_timed``
    counts the compiles in the timed chunk. ``overrides``: further static options (``count_features="cfn"``: the
    learned count instead of the frame feature), applied to the timed program and to the paper-replay state size."""
    from opiq_jax.benchmark.throughput import program_bytes
    from opiq_jax.runs.compiled import chunk_program
    from opiq_jax.runs.memory import state_bytes_per_run

    per_run = steps * envs_per_run  # each of the pool's environments steps ``steps`` times per chunk
    overrides = overrides or {}
    static = static_for_env("montezuma", total_steps=2 * per_run, log_every=per_run, buffer_size=buffer_size,
                            overlap=overlap, envs_per_run=envs_per_run,
                            **({} if updates else {"train_every": NEVER}), **overrides)
    trainer, state, static = agent_and_state(static, pool_size, envs_per_run, devices)

    def compile_and_call():
        chunk = chunk_program(trainer.train_chunk, state).lower(state).compile()
        return chunk, chunk(state)

    (chunk, (state, _)), compile_and_first, _ = timed_call(compile_and_call)
    needs = program_bytes(chunk)
    _, seconds, compiles = timed_call(lambda: chunk(state))
    device = jax.local_devices()[0]
    peak = (device.memory_stats() or {}).get("peak_bytes_in_use") if hasattr(device, "memory_stats") else None
    return dict(pool_size=pool_size, devices=devices, kind=agent_kind(overlap, updates),
                runs=pool_size // envs_per_run, envs_per_run=envs_per_run,
                env_steps_per_second=steps * pool_size / seconds,
                first_call_seconds=compile_and_first, compiles_timed=compiles, peak_device_bytes=peak,
                program_bytes=needs, state_bytes_per_run=state_bytes_per_run(static), buffer_size=buffer_size,
                paper_state_bytes_per_run=state_bytes_per_run(static_for_env("montezuma", **overrides)))


def time_plain(pool_size: int, steps: int, buffer_size: int) -> dict:
    """The plain baseline (``opiq_jax.benchmark.plain_atari``: a straightforward vmapped JAX DQN with counts, one
    dispatch per step) on one pool of ``pool_size`` environments, one run each: ``steps`` timed steps after a
    warm-up of as many (at least a batch and one, so that the timed steps learn; the first call compiles)."""
    from opiq_jax.benchmark.plain_atari import make_plain_atari, run_plain_atari, state_bytes_per_run
    from opiq_jax.envs.montezuma import MontezumaPool

    static = static_for_env("montezuma", buffer_size=buffer_size)
    experiment = bench_experiment(static, pool_size)
    pool = MontezumaPool(num_envs=pool_size, seed=0)
    plain = make_plain_atari(static, pool)
    run_keys, _ = run_keys_for(experiment)
    state = plain.init(run_keys, stack_hparams(experiment.hparams()), pool.reset())
    state, compile_and_first, _ = timed_call(lambda: plain.step(state))
    state = jax.block_until_ready(run_plain_atari(plain, state, max(steps, static.batch_size + 1) - 1))
    updates_before = int(state.runs.updates[0])
    state, seconds, compiles = timed_call(lambda: run_plain_atari(plain, state, steps))
    return dict(pool_size=pool_size, devices=1, kind="plain", runs=pool_size,
                env_steps_per_second=steps * pool_size / seconds, first_call_seconds=compile_and_first,
                compiles_timed=compiles,
                buffer_size=buffer_size, state_bytes_per_run=state_bytes_per_run(state),
                updates_timed_per_run=int(state.runs.updates[0]) - updates_before, count_slots=plain.count_slots)


def rates_by_layout(rows: list[dict]) -> dict[tuple[int, int], dict[str, float]]:
    """Each (environments, devices) layout's rates by kind, in the order timed."""
    layouts: dict[tuple[int, int], dict[str, float]] = {}
    for r in rows:
        layouts.setdefault((r["pool_size"], r["devices"]), {})[r["kind"]] = r["env_steps_per_second"]
    return layouts


def ratio_cell(rate: dict[str, float], kind: str) -> str:
    return f"{rate[kind]:,.0f} | {rate[kind] / rate['raw']:.0%}" if kind in rate else "not timed | "


def time_split(rate: dict[str, float]) -> dict[str, float] | None:
    """Microseconds per environment step of the strict agent, split: the emulators (raw EnvPool, which includes
    EnvPool's copies of the frames to the device), the agent's per-step work (acting, counting, storing), the
    learner's updates; and how much of it the overlap hides."""
    if not {"agent_strict", "agent_no_updates"} <= rate.keys():
        return None
    us = {kind: 1e6 / value for kind, value in rate.items()}
    return dict(emulators=us["raw"], per_step_work=us["agent_no_updates"] - us["raw"],
                updates=us["agent_strict"] - us["agent_no_updates"], strict_total=us["agent_strict"],
                hidden_by_overlap=us["agent_strict"] - us["agent"])


def split_lines(layouts: dict) -> list[str]:
    """The table of :func:`time_split` for the layouts that timed its parts (none: no table)."""
    rows = []
    for (size, devices), rate in layouts.items():
        if (split := time_split(rate)) is None:
            continue
        cell = lambda k: f"{split[k]:.2f} ({split[k] / split['strict_total']:.0%})"  # noqa: E731
        rows.append(f"| {size} | {devices} | {cell('emulators')} | {cell('per_step_work')} | {cell('updates')} | "
                    f"{cell('hidden_by_overlap')} |")
    if not rows:
        return []
    return ["", "Where a step's time goes (microseconds per environment step; shares of the agent without overlap):",
            "",
            "| environments | devices | emulators | acting, counting, storing | updates | hidden by the overlap |",
            "|---|---|---|---|---|---|", *rows]


def table(rows: list[dict], device: str) -> str:
    agent = next(r for r in rows if r["kind"] == "agent")
    layout = (f"{agent['runs']} runs x {agent['envs_per_run']} environments" if agent["envs_per_run"] > 1
              else "one per run")
    lines = [f"Montezuma throughput on {device} (environment steps per second, compiles excluded unless noted below; "
             f"a pool per device when split; environments: {layout}).", "",
             "| environments | devices | raw EnvPool | OPIQ agent | agent / raw | agent without overlap | its ratio "
             "| agent without updates | its ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    layouts = rates_by_layout(rows)
    for (size, devices), rate in layouts.items():
        lines.append(f"| {size} | {devices} | {rate['raw']:,.0f} | {ratio_cell(rate, 'agent')} | "
                     f"{ratio_cell(rate, 'agent_strict')} | {ratio_cell(rate, 'agent_no_updates')} |")
    lines += split_lines(layouts)
    lines += ["", f"Device state per run: {agent['paper_state_bytes_per_run'] / 2**30:.2f} GiB with the paper's "
              f"1M-frame replay ({agent['state_bytes_per_run'] / 2**20:.0f} MiB at the {agent['buffer_size']:,}-frame "
              "replay timed here)."]
    compiled = [r for r in rows if r.get("compiles_timed")]
    if compiled:  # a rate with a compile in its window is too low: say which
        lines += ["", "XLA compiles inside a timed window (those rates include them and are too low): " + "; ".join(
            f"{r['kind']} at {r['pool_size']} on {r['devices']} device(s): {r['compiles_timed']}" for r in compiled)
                  + "."]
    return "\n".join(lines)


def time_size(size: int, args: Args, devices: int) -> list[dict]:
    """Raw EnvPool and the agent (with and without overlap, and without updates) at ``size`` environments on
    ``devices`` devices."""
    raw = time_raw(size, args.steps) if devices == 1 else time_raw_devices(size, args.steps, devices)
    timed = lambda **kw: time_agent(size, args.steps, args.buffer_size, devices=devices,  # noqa: E731
                                    envs_per_run=args.envs_per_run, **kw)
    rows = [raw, timed()]
    if args.strict:
        rows += [timed(overlap=False), timed(overlap=False, updates=False)]
    print(*rows, sep="\n", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if args.devices not in (1, jax.local_device_count()):
        raise SystemExit(f"--devices is 1 or every local device ({jax.local_device_count()}), got {args.devices}")
    if any(size % args.devices for size in args.pool_sizes):
        raise SystemExit(f"every pool size must divide over {args.devices} devices, got {args.pool_sizes}")
    if any(size % args.envs_per_run or (size // args.envs_per_run) % args.devices for size in args.pool_sizes):
        raise SystemExit(f"every pool size must be whole runs of {args.envs_per_run} environments that divide over "
                         f"{args.devices} devices, got {args.pool_sizes}")
    rows = []
    for size in args.pool_sizes:
        rows += time_size(size, args, 1)
        if args.devices > 1:
            rows += time_size(size, args, args.devices)
    device = (f"{jax.local_device_count()} x {jax.devices()[0].device_kind}" if args.devices > 1
              else jax.devices()[0].device_kind)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "montezuma_bench.json").write_text(json.dumps(dict(device=device,
                                                                   settings=vars(args) | {"out": str(args.out)},
                                                                   rows=rows), indent=1))
    text = table(rows, device)
    (args.out / "montezuma_bench.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
