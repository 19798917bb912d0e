"""A training run bounded by a machine's lease: ``opiq-jax train`` watched chunk by chunk, stopped without its
final checkpoint when the time is up or the last chunk's metrics are written.

Why: at the paper's 1M-frame replay, a 4-GPU Montezuma run writes frames faster than a checkpoint can save
them (each would be the whole rings, about 7 GB per run), and a lent machine's replay cannot be carried to the
next one anyway. So this driver keeps what can be kept, the metrics (appended by the trainer after every
chunk) and the configuration, and spends no time on checkpoints: ``--checkpoint-every`` is set past the
budget, and the trainer is killed once its last chunk's rows are in (before the final checkpoint) or when the
budget ends. It writes ``timeboxed.json`` beside the metrics: the command, the devices, the wall-clock, when
each chunk's rows appeared (the run's rate, compile excluded), and the code's revision and whether its tree was
clean. The record names no absolute path of the machine: the interpreter is ``python``, and a path argument is
written relative to the working directory, or by its name when it lies outside it.

Run: ``python -m experiments.tools.timeboxed_run --out DIR --budget-seconds 1200 -- --env montezuma --method opiq
dqn_pc --seeds 4 --envs-per-run 32 --steps 5000000 --log-every 40000``. To end it sooner (a lease that ends before
the budget), create ``DIR.stop`` beside the folder: the run stops at the next poll and its record says so.

Reaches inside: opiq_jax.store.files and opiq_jax.store.metrics, for the atomic write and the reading of a metrics
file being appended that the trainer itself uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tyro

from opiq_jax.store.files import CONFIG_FILE, METRICS_FILE, atomic_write_bytes, read_json
from opiq_jax.store.metrics import rows_without_checkpoint
from opiq_jax.reporting import portable, source_revision

POLL_SECONDS = 5.0
"""How often the metrics are read, by default: a chunk's rows are in at most this long before the record has them."""


def stop_file(out: Path) -> Path:
    """``<out>.stop``, beside the results folder (opiq-jax refuses to resume a folder holding files it did not
    write): created, it ends the run at the next poll, for a lease that ends sooner than planned."""
    return out.with_name(out.name + ".stop")


@dataclass
class Args:
    out: Path
    """The results folder (passed to ``opiq-jax train --out``)."""
    budget_seconds: float
    """Stop the trainer (SIGKILL, no checkpoint) this many seconds after it started."""
    poll_seconds: float = POLL_SECONDS
    """Seconds between two reads of the metrics (and of the stop file)."""
    train: tuple[str, ...] = field(default_factory=tuple)
    """``opiq-jax train`` options, given after ``--`` (all but ``--out`` and ``--checkpoint-every``)."""


def trainer_config(out: Path) -> dict | None:
    """The ``config.json`` the trainer wrote into ``out`` at its start (None before, or when it refused to start)."""
    return read_json(out / CONFIG_FILE) if (out / CONFIG_FILE).exists() else None


def chunks_written(out: Path) -> int:
    """The last step every run has rows for (0 before the first chunk), read as a resume reads it: a row the
    trainer is still appending is left out."""
    config = trainer_config(out)
    if config is None:
        return 0
    return rows_without_checkpoint(out / METRICS_FILE, len(config["runs"]), int(config["static"]["log_every"]))[1]


def gpu_names() -> list[str]:
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


def total_steps(train: tuple[str, ...]) -> int | None:
    return int(train[train.index("--steps") + 1]) if "--steps" in train else None


def watch(trainer: subprocess.Popen, args: Args, record: dict) -> None:
    """Polls the metrics until the last chunk's rows are in, the trainer exits, or the budget ends."""
    started, goal = time.monotonic(), total_steps(args.train)
    while True:
        time.sleep(args.poll_seconds)
        step = chunks_written(args.out)
        elapsed = time.monotonic() - started
        if step and (not record["chunks"] or record["chunks"][-1][0] != step):
            record["chunks"].append([step, round(elapsed, 1)])
            print(f"timeboxed: step {step:,} of every run at {elapsed:.0f} s", flush=True)
        done = goal is not None and 0 < goal <= step
        asked, exited = stop_file(args.out).exists(), trainer.poll()
        if done or asked or exited is not None or elapsed >= args.budget_seconds:
            record["stopped"] = "last chunk written" if done else "asked to stop" if asked else (
                f"trainer exited with {exited}" if exited is not None else "budget ended")
            return


def rate(record: dict, runs: int | None) -> float | None:
    """Every run's environment steps per second between the first and the last chunk seen (compile excluded)."""
    chunks = record["chunks"]
    if runs is None or len(chunks) < 2:
        return None
    (first_step, first_s), (last_step, last_s) = chunks[0], chunks[-1]
    return (last_step - first_step) * runs / (last_s - first_s)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = tyro.cli(Args, args=argv[:split])
    args.train = tuple(argv[split + 1:])
    if any(flag in args.train for flag in ("--out", "--checkpoint-every")):
        raise SystemExit("timeboxed_run sets --out and --checkpoint-every itself")
    if not args.poll_seconds > 0:
        raise SystemExit(f"timeboxed_run: --poll-seconds must be above 0, got {args.poll_seconds}")
    command = [sys.executable, "-m", "opiq_jax", "train", *args.train, "--out", str(args.out),
               "--checkpoint-every", str(10 * args.budget_seconds + 3600), "--no-plot", "--no-progress"]
    shown = ["python", *[portable(a) for a in command[1:]]]
    record = dict(command=shown, argv=["python", "-m", "experiments.tools.timeboxed_run", *map(portable, argv)],
                  gpus=gpu_names(), cpu_cores=os.cpu_count(), **source_revision(),
                  started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), chunks=[])
    wall = time.monotonic()
    trainer = subprocess.Popen(command)
    try:
        watch(trainer, args, record)
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGKILL)  # the final checkpoint would write every ring whole: skip it
            trainer.wait()
    config = trainer_config(args.out)
    record |= dict(wall_clock_seconds=round(time.monotonic() - wall, 1), last_step=record["chunks"][-1][0] if
                   record["chunks"] else 0, runs=None if config is None else len(config["runs"]))
    record["env_steps_per_second"] = rate(record, record["runs"])
    args.out.mkdir(parents=True, exist_ok=True)  # a trainer that refused its options made no folder
    atomic_write_bytes(args.out / "timeboxed.json", json.dumps(record, indent=1).encode())
    print(json.dumps({k: v for k, v in record.items() if k != "chunks"}), flush=True)


if __name__ == "__main__":
    main()
