"""Scaling over the local devices: the same runs on one device, then sharded over all of them.

The runs axis is split over the devices with ``jax.sharding`` (``devices.shard_over_devices``), and
each device runs the chunk on its own runs (``compiled.chunk_program``): runs never communicate, so the
step needs no collective. For each number of runs this times the compiled trainer's chunk on device 0
alone and split over every local device, after a warm-up that fills the replay past one batch, and
reports the ratio. ``--partitioners per-device gspmd`` also times the program that leaves the split to
XLA's partitioner (the trainer's before this script's revision), and each row counts the collectives
(all-gathers and the like) in the compiled program: a custom call such as the maze's Pallas
convolutions cannot be partitioned, so XLA gathers its inputs onto every device.
Writes ``scaling.json`` and ``scaling.md`` into ``--out``.

Run on a machine with several GPUs: ``python -m experiments.bench.multi_gpu_scaling --env chain --runs 1024 2048``.

Reaches inside: the compiled chunk and the runs' placement, to time one device against the runs split over all of
them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import tyro

from opiq_jax.benchmark.throughput import bench_experiment, is_out_of_memory, run_until_learning, timed_repeats
from opiq_jax.common.config import stack_hparams
from opiq_jax.registry.environments import static_for_env
from opiq_jax.runs.compiled import chunk_program, compiled_trainer
from opiq_jax.runs.devices import shard_over_devices
from opiq_jax.runs.experiment import run_keys_for

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")


@dataclass
class Args:
    env: Literal["chain", "maze"] = "chain"
    """Environment (the paper's settings, exact counts)."""
    runs: tuple[int, ...] = (512, 2048)
    """Numbers of runs to time (each must divide by the device count)."""
    steps: int = 1000
    """Steps per timed chunk."""
    repeats: int = 2
    """Timed chunks per configuration; the fastest counts."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The networks' compute precision (``StaticConfig.precision``)."""
    partitioners: tuple[Literal["per-device", "gspmd"], ...] = ("per-device",)
    """How the split program is made: each device on its own runs (the trainer's), or XLA's partitioner."""
    out: Path = Path("results/scaling")
    """Where the table goes."""

    def validate(self, num_devices: int) -> None:
        if min(self.steps, self.repeats, *self.runs) < 1:
            raise SystemExit("multi_gpu_scaling: error: --runs, --steps and --repeats must be >= 1")
        uneven = [r for r in self.runs if r % num_devices]
        if uneven:
            raise SystemExit(f"multi_gpu_scaling: error: --runs {uneven} do not divide over the {num_devices} "
                             "local devices")


def rate(num_runs: int, steps: int, seconds: list[float]) -> float:
    """Environment steps per second of ``num_runs`` runs taking ``steps`` steps each, from the fastest timed chunk."""
    return num_runs * steps / min(seconds)


def scaling_row(num_runs: int, one_device: float, all_devices: float, partitioner: str = "per-device",
                collectives: int = 0) -> dict:
    """One row of the table: both rates, the speed-up of splitting over every device, and how it was split."""
    return dict(runs=num_runs, one_device=one_device, all_devices=all_devices, speedup=all_devices / one_device,
                partitioner=partitioner, collectives=collectives)


def count_collectives(hlo_text: str) -> int:
    """Collective operations (all-gather, all-reduce, ...) in a compiled program's HLO text."""
    return sum(line.count(f" {name}(") + line.count(f" {name}-start(") for line in hlo_text.splitlines()
               for name in COLLECTIVES)


def gspmd_program(train_chunk, state):
    """``train_chunk`` jitted for ``state``'s placement with the split left to XLA's partitioner (the trainer's
    before it ran each device on its own runs: ``opiq_jax.runs.compiled.chunk_program``)."""
    shardings = jax.tree.map(lambda x: x.sharding, state)
    return jax.jit(train_chunk, donate_argnums=0, out_shardings=(shardings, jax.tree.leaves(shardings.runs)[0]))


def steps_per_second(static, num_runs: int, sharded: bool, repeats: int,
                     partitioner: str = "per-device") -> tuple[float, int, list[float]]:
    """The fastest timed chunk's env steps per second, the collectives in the compiled chunk, and every timed chunk's
    seconds (kept in the results, so that each rate can be checked against its timings)."""
    experiment = bench_experiment(static, num_runs)
    trainer, init, _ = compiled_trainer(static)
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    if sharded:
        state = shard_over_devices(state, num_runs, say=None)
    program = gspmd_program if partitioner == "gspmd" else chunk_program
    train_chunk = program(trainer.train_chunk, state).lower(state).compile()
    collectives = count_collectives(train_chunk.as_text())
    state = run_until_learning(train_chunk, state, static)
    _, seconds, _ = timed_repeats(lambda s: train_chunk(s)[0], state, repeats)  # a compiled chunk cannot recompile
    return rate(num_runs, static.log_every, seconds), collectives, list(seconds)


def best_single_device(static, num_runs: int, repeats: int,
                       measured: dict[int, tuple[float, list[float]]]) -> tuple[int, tuple[float, list[float]]]:
    """``(runs, (rate, seconds))`` of one device: at ``num_runs``, or, where they do not fit, at the most runs measured
    that did."""
    try:
        rate_, _, seconds = steps_per_second(static, num_runs, sharded=False, repeats=repeats)
        measured[num_runs] = rate_, seconds
        return num_runs, measured[num_runs]
    except Exception as error:  # noqa: BLE001 - only running out of device memory is expected here
        if not is_out_of_memory(error) or not measured:
            raise
        largest = max(measured)
        print(f"{num_runs} runs do not fit on one device; comparing with its {largest} runs", flush=True)
        return largest, measured[largest]


def one_device_note(row: dict) -> str:
    return ("" if row["one_device_runs"] == row["runs"]
            else f" (at {row['one_device_runs']} runs: {row['runs']} do not fit)")


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    started = time.perf_counter()
    devices = jax.local_devices()
    args.validate(len(devices))
    static = static_for_env(args.env, total_steps=args.steps * 10, log_every=args.steps, count_features="exact",
                            precision=args.precision)
    rows, one_device = [], {}
    for num_runs in args.runs:
        one_runs, (one, one_seconds) = best_single_device(static, num_runs, args.repeats, one_device)
        for partitioner in args.partitioners:
            many, collectives, many_seconds = steps_per_second(static, num_runs, sharded=True, repeats=args.repeats,
                                                               partitioner=partitioner)
            rows.append(dict(scaling_row(num_runs, one, many, partitioner, collectives), one_device_runs=one_runs,
                             one_device_seconds=one_seconds, all_devices_seconds=many_seconds))
            print(rows[-1], flush=True)
    kind = devices[0].device_kind
    lines = [f"{args.env}, {args.precision}: environment steps per second on 1 and on {len(devices)} x {kind} "
             "(runs split).", "",
             f"| runs | 1 device | {len(devices)} devices | speed-up | split by | collectives in the chunk |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['runs']} | {r['one_device']:,.0f}{one_device_note(r)} | {r['all_devices']:,.0f} | "
              f"{r['speedup']:.2f}x | {r['partitioner']} | {r['collectives']} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    options = dict(env=args.env, runs=list(args.runs), steps=args.steps, repeats=args.repeats, precision=args.precision,
                   partitioners=list(args.partitioners))
    (args.out / "scaling.json").write_text(json.dumps(dict(
        device=kind, devices=len(devices), env=args.env, precision=args.precision, options=options, rows=rows,
        wall_seconds=time.perf_counter() - started), indent=1))
    (args.out / "scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return dict(devices=len(devices), rows=rows)


if __name__ == "__main__":
    main()
