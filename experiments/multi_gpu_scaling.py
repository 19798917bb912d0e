"""Scaling over the local devices: the same runs on one device, then sharded over all of them.

The runs axis is split over the devices with ``jax.sharding`` (``runner.shard_over_devices``): runs
never communicate, so each device trains its share with no collective in the step. For each
number of runs this times the compiled trainer's chunk on device 0 alone and sharded over every
local device, after a warm-up that fills the replay past one batch, and reports the ratio.
Writes ``scaling.json`` and ``scaling.md`` into ``--out``.

Run on a machine with several GPUs: ``python -m experiments.multi_gpu_scaling --env chain --runs 1024 2048``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import tyro

from opiq_jax.config import stack_hparams
from opiq_jax.environments import method_hparams, static_for_env
from opiq_jax.runner import Experiment, RunSpec, compiled_trainer, run_keys_for, shard_over_devices


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
    out: Path = Path("results/scaling")
    """Where the table goes."""

    def validate(self, num_devices: int) -> None:
        if min(self.steps, self.repeats, *self.runs) < 1:
            raise SystemExit("multi_gpu_scaling: error: --runs, --steps and --repeats must be >= 1")
        uneven = [r for r in self.runs if r % num_devices]
        if uneven:
            raise SystemExit(f"multi_gpu_scaling: error: --runs {uneven} do not divide over the {num_devices} local devices")


def rate(num_runs: int, steps: int, seconds: list[float]) -> float:
    """Environment steps per second of ``num_runs`` runs taking ``steps`` steps each, from the fastest timed chunk."""
    return num_runs * steps / min(seconds)


def scaling_row(num_runs: int, one_device: float, all_devices: float) -> dict:
    """One row of the table: both rates and the speed-up of sharding over every device."""
    return dict(runs=num_runs, one_device=one_device, all_devices=all_devices, speedup=all_devices / one_device)


def steps_per_second(static, num_runs: int, sharded: bool, repeats: int) -> float:
    hp = method_hparams(static.env, "opiq")
    experiment = Experiment(static, tuple(RunSpec("opiq", "bench", s, hp) for s in range(num_runs)))
    _, init, train_chunk = compiled_trainer(static)
    state = init(*run_keys_for(experiment), stack_hparams([hp] * num_runs))
    if sharded:
        state = shard_over_devices(state, num_runs, say=None)
    while int(state.step) < static.batch_size + 1:  # compile, then fill the replay past one batch
        state, _ = train_chunk(state)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        state, metrics = jax.block_until_ready(train_chunk(state))
        seconds.append(time.perf_counter() - started)
    return rate(num_runs, static.log_every, seconds)


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    devices = jax.local_devices()
    args.validate(len(devices))
    static = static_for_env(args.env, total_steps=args.steps * 10, log_every=args.steps, count_features="exact",
                            precision=args.precision)
    rows = []
    for num_runs in args.runs:
        one = steps_per_second(static, num_runs, sharded=False, repeats=args.repeats)
        many = steps_per_second(static, num_runs, sharded=True, repeats=args.repeats)
        rows.append(scaling_row(num_runs, one, many))
        print(rows[-1], flush=True)
    kind = devices[0].device_kind
    lines = [f"{args.env}, {args.precision}: environment steps per second on 1 and on {len(devices)} x {kind} (runs sharded).", "",
             f"| runs | 1 device | {len(devices)} devices | speed-up |", "|---|---|---|---|"]
    lines += [f"| {r['runs']} | {r['one_device']:,.0f} | {r['all_devices']:,.0f} | {r['speedup']:.2f}x |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(dict(device=kind, devices=len(devices), env=args.env, precision=args.precision, rows=rows), indent=1))
    (args.out / "scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return dict(devices=len(devices), rows=rows)


if __name__ == "__main__":
    main()
