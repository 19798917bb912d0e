"""What checkpoints cost a Montezuma run now: its rate with checkpoints written at once, written while training goes
on, and with none, in one call on one machine.

    python -m experiments.bench.checkpoint_share --out DIR --seeds 2 --envs-per-run 32 --minutes 1.2 \\
        --checkpoint-every 20

trains OPIQ on Montezuma once per mode of ``--modes``, each in a process of its own, for ``--minutes`` of training:

* ``none``: no checkpoint until the last (the interval set past the run);
* ``at-once``: a checkpoint every ``--checkpoint-every`` seconds, written by the loop between two chunks, the way
  every checkpoint was written before :class:`opiq_jax.store.files.BackgroundCheckpoints`;
* ``background``: the same checkpoints, the new frames copied on the device and written from a thread of their own
  while the next chunks train (the default).

The rate of a mode is the environment steps of the chunks after the first over the wall-clock between the first
chunk's end and the last's (compiling and the last checkpoint, the same in every mode, are left out; the
checkpoints between are in). The share of the wall-clock that checkpoints cost is ``1 - rate / rate without``. Also
recorded: the seconds the loop itself spent in each checkpoint (waiting for the one before, copying, or writing),
and the bytes of frame segments the run's folder keeps at its end. Writes ``checkpoint_share.json``,
``checkpoint_share.md``, ``settings.json`` and ``run_info.json`` into ``--out``; the runs' folders go to a scratch
folder and are deleted.

Reaches inside: opiq_jax.host.host_loop (``run_experiment``'s ``background_checkpoints``, which no command line
offers, and its ``checkpoint``, wrapped to time it) and opiq_jax.host.plan.plan_experiment, to build the run as
``opiq-jax train`` does.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro

from opiq_jax.reporting import portable, source_revision
from opiq_jax.store.files import atomic_write_text

MODES = ("none", "at-once", "background")

# One mode in a process of its own: train, then print one line of JSON.
DRIVER = """
import json, sys, time
from pathlib import Path
import jax
import opiq_jax.host.host_loop as loop
from opiq_jax.host.plan import plan_experiment
from opiq_jax.reporting import portable, source_revision
out, mode, settings = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
ends, blocked, inner = [], [], loop.checkpoint
def timed(*args, **kwargs):
    started = time.monotonic()
    inner(*args, **kwargs)
    blocked.append(time.monotonic() - started)
loop.checkpoint = timed
def chunk_ended():
    ends.append(time.monotonic())
    return None
experiment = plan_experiment("montezuma", ["opiq"], settings["seeds"], options=settings["options"])
every = 1e9 if mode == "none" else settings["checkpoint_every"]
loop.run_experiment(experiment, out, progress=False, verbose=False, checkpoint_seconds=every,
                    max_seconds=60.0 * settings["minutes"], should_stop=chunk_ended,
                    background_checkpoints=mode == "background")
segments = sum(p.stat().st_size for p in (out / "frames").glob("seg-*")) if (out / "frames").is_dir() else 0
static = experiment.static
print("RESULT " + json.dumps(dict(chunk_ends=[e - ends[0] for e in ends], checkpoint_seconds=blocked,
                                  steps_per_chunk=static.log_every * len(experiment.runs),
                                  segment_bytes_kept=segments, device=str(jax.devices()[0].device_kind),
                                  devices=jax.device_count())))
"""


@dataclass
class Args:
    out: Path
    """Where checkpoint_share.json, checkpoint_share.md, settings.json and run_info.json go."""
    seeds: int = 2
    envs_per_run: int = 32
    buffer_size: int = 1_000_000
    """Frames per run (the paper's 1M)."""
    log_every: int = 40_000
    """Steps per run between chunks (the loop can checkpoint only between chunks)."""
    minutes: float = 1.2
    checkpoint_every: float = 20.0
    modes: tuple[str, ...] = MODES
    scratch: Path | None = None
    """Folder for the runs' results (default: a temporary folder; a real disk is what counts)."""


def measure(mode: str, args: Args, scratch: Path) -> dict:
    """One mode's chunk times and checkpoints, from a process of its own."""
    settings = dict(seeds=args.seeds, minutes=args.minutes, checkpoint_every=args.checkpoint_every,
                    options=dict(envs_per_run=args.envs_per_run, buffer_size=args.buffer_size,
                                 log_every=args.log_every, steps=100 * args.log_every))
    out = scratch / mode
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", DRIVER, str(out), mode, json.dumps(settings)], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the run failed:\n{done.stderr[-3000:]}")
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    shutil.rmtree(out, ignore_errors=True)
    ends = result["chunk_ends"]
    result.update(mode=mode, wall_clock=time.monotonic() - started, chunks_timed=len(ends) - 1,
                  env_steps_per_second=(len(ends) - 1) * result["steps_per_chunk"] / ends[-1] if ends[-1] else None)
    return result


def table(rows: list[dict]) -> str:
    """The markdown table: per mode the rate, the share against ``none``, and the loop's own checkpoint seconds."""
    base = next((r["env_steps_per_second"] for r in rows if r["mode"] == "none"), None)
    lines = ["| mode | chunks timed | env steps/s | share of the wall-clock lost | checkpoints in the loop (s each) |",
             "|---|---|---|---|---|"]
    for r in rows:
        share = "" if base is None or r["mode"] == "none" else f"{100 * (1 - r['env_steps_per_second'] / base):.1f} %"
        spent = ", ".join(f"{s:.2f}" for s in r["checkpoint_seconds"])
        lines.append(f"| {r['mode']} | {r['chunks_timed']} | {r['env_steps_per_second']:,.0f} | {share} | {spent} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if unknown := [m for m in args.modes if m not in MODES]:
        raise SystemExit(f"--modes: {', '.join(unknown)} unknown; choose from {', '.join(MODES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="checkpoint-share-", dir=args.scratch))
    rows = []
    try:
        for mode in args.modes:  # each mode's row is kept as soon as it is measured
            rows.append(measure(mode, args, scratch))
            atomic_write_text(args.out / "checkpoint_share.json", json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = table(rows)
    atomic_write_text(args.out / "checkpoint_share.md", text + "\n")
    info = dict(command=["python", "-m", "experiments.bench.checkpoint_share", *map(portable, argv or sys.argv[1:])],
                settings={k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()},
                device=f"{rows[0]['devices']} x {rows[0]['device']} ({platform.node()})",
                seconds=round(time.monotonic() - started, 1), **source_revision())
    atomic_write_text(args.out / "run_info.json", json.dumps(info, indent=1))
    atomic_write_text(args.out / "settings.json", json.dumps({k: info[k] for k in ("command", "settings")}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
