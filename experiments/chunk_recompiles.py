"""Which of the Montezuma agent's chunk calls compile: the chunk jitted and called (as ``montezuma_bench.time_agent``
built it from 521c61c to 576da19) against the chunk compiled ahead (as ``opiq-jax train`` and ``time_agent`` now
build it), on one device and split over every local device (a pool per device).

``montezuma_bench`` times the second call of the chunk. A compile in that call is timed with it: this script counts
the XLA compiles of each of the first ``--calls`` calls through the timers' own ``timed_call``, and so says which of
that script's committed rates held one. The rates themselves need a GPU; the counts do not (a CPU with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` stands in for two devices). Needs EnvPool.

Writes ``chunk_recompiles.json``, ``chunk_recompiles.md`` and ``run_info.json`` into ``--out``.

Reaches inside: the trainer and its chunk program, built around raw EnvPool pools as ``montezuma_bench`` builds them.
Run: ``XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu python -m experiments.chunk_recompiles
--out results/chunk-recompiles``.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import tyro

from experiments.montezuma_bench import agent_and_state
from opiq_jax.benchmark.throughput import timed_call
from opiq_jax.registry.environments import static_for_env
from opiq_jax.runs.compiled import chunk_program
from opiq_jax.store.files import atomic_write_text


@dataclass
class Args:
    pool_size: int = 4
    """Environments (one run each); must divide over the local devices."""
    steps: int = 20
    """Steps per environment in each chunk."""
    calls: int = 3
    """Chunk calls counted."""
    out: Path = Path("results/chunk-recompiles")


BUILDS = ("jitted", "compiled ahead")


def chunk_and_state(pool_size: int, steps: int, devices: int):
    """The agent's trainer around a pool of ``pool_size`` (one pool, or one per device) and its first state, placed as
    ``time_agent`` places it."""
    static = static_for_env("montezuma", total_steps=10 * steps, log_every=steps, buffer_size=500)
    trainer, state, _ = agent_and_state(static, pool_size, devices=devices)
    return trainer, state


def compiles_per_call(build: str, pool_size: int, steps: int, devices: int, calls: int) -> list[int]:
    """XLA compiles made by each of ``calls`` chunk calls (the ahead-of-time compile is not a call's)."""
    trainer, state = chunk_and_state(pool_size, steps, devices)
    chunk = chunk_program(trainer.train_chunk, state)
    if build == "compiled ahead":
        chunk = chunk.lower(state).compile()
    counts = []
    for _ in range(calls):
        (state, _), _, made = timed_call(lambda: chunk(state))
        counts.append(made)
    return counts


def markdown(rows: list[dict], device: str, command: str) -> str:
    lines = [f"XLA compiles made by each call of the Montezuma agent's chunk on {device} (`montezuma_bench` times "
             "call 2).", "", f"`{command}`", "", "| chunk | devices | compiles per call (1, 2, ...) |", "|---|---|---|"]
    lines += [f"| {r['build']} | {r['devices']} | {', '.join(map(str, r['compiles_per_call']))} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    started = time.perf_counter()
    device_counts = sorted({1, jax.local_device_count()})
    if any(args.pool_size % d for d in device_counts):
        raise SystemExit(f"--pool-size must divide over {device_counts[-1]} devices, got {args.pool_size}")
    rows = [dict(build=build, devices=d, compiles_per_call=compiles_per_call(build, args.pool_size, args.steps, d,
                                                                              args.calls))
            for d in device_counts for build in BUILDS]
    device = f"{jax.local_device_count()} x {jax.devices()[0].device_kind}"
    command = "python -m experiments.chunk_recompiles " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    info = dict(device=device, jax=jax.__version__, cpu=platform.processor() or platform.machine(), command=command,
                options=json.loads(json.dumps(asdict(args), default=str)), seconds=round(time.perf_counter() - started, 1))
    # atomic: a killed run leaves the previous files or none, never half of one
    atomic_write_text(args.out / "chunk_recompiles.json", json.dumps(dict(info, rows=rows), indent=1) + "\n")
    atomic_write_text(args.out / "chunk_recompiles.md", markdown(rows, device, command))
    atomic_write_text(args.out / "run_info.json", json.dumps(info, indent=1) + "\n")
    print(markdown(rows, device, command))


if __name__ == "__main__":
    main()
