"""What checkpoints cost a Montezuma run: the share of its wall-clock spent writing them, in two source trees.

    python -m experiments.checkpoint_cost --trees before=.before now=. --minutes 3.5 --out results/checkpoint-cost

trains, in each tree (a process of its own, the tree first on ``PYTHONPATH``), OPIQ and DQN + PC on Montezuma
with the paper's 1M-frame replay per run and the default checkpoint interval (60 s), for ``--minutes`` of
training, and times every checkpoint the host loop writes (``runner.write_checkpoint``, wrapped). One tree
writes the whole state at each checkpoint, frame rings included (revisions before
:mod:`opiq_jax.store.frames`); the other writes the rings as what changed. Writes ``checkpoint_cost.json``,
``checkpoint_cost.md`` and ``run_info.json`` into ``--out``. Needs EnvPool and a GPU with room for the rings
(2 runs x 6.6 GiB) and a disk with room for two full checkpoints of the older tree (2 x 13 GiB).

Reaches inside: opiq_jax.running.host_loop.write_checkpoint, wrapped to time each checkpoint (in any revision).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tyro

from experiments.source_tree import importable  # noqa: E402

# Run in a tree: train with every checkpoint timed, then print one line of JSON.
DRIVER = """
import json, sys, time
import os, opiq_jax
if os.path.isdir(os.path.join(os.path.dirname(opiq_jax.__file__), "running")):  # read from the tree's own files
    import opiq_jax.running.host_loop as runner
else:  # a revision before the layers became folders
    import opiq_jax.runner as runner
spent, inner = [], runner.write_checkpoint
def timed(*args, **kwargs):
    started = time.monotonic()
    inner(*args, **kwargs)
    spent.append(time.monotonic() - started)
runner.write_checkpoint = timed
import opiq_jax
out, minutes, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
started = time.monotonic()
opiq_jax.train("montezuma", ["opiq", "dqn_pc"], 1, out=out, max_minutes=minutes, checkpoint_every=every,
               progress=False, verbose=False)
wall = time.monotonic() - started
info = json.load(open(out + "/run_info.json"))
steps = info.get("steps_done", info.get("steps_per_run", 0))  # the name of revisions before and after
print("RESULT " + json.dumps(dict(wall=wall, checkpoint_seconds=spent, device=info.get("device", "?"),
                                  source=opiq_jax.__file__,
                                  steps_per_run=steps, env_steps_per_second=info.get("env_steps_per_second"))))
"""


@dataclass
class Args:
    trees: tuple[str, ...] = ("before=.before", "now=.")
    """NAME=PATH of each source tree to measure (PATH holds opiq_jax/ and envs/)."""
    minutes: float = 3.5
    """Training minutes per tree (the run stops with a checkpoint after the first chunk past them)."""
    checkpoint_every: float = 60.0
    """Seconds between checkpoints (the default of opiq-jax train)."""
    scratch: Path = Path("/tmp/checkpoint-cost")
    """Where the runs write (deleted after each tree: a full checkpoint of 1M frames per run is large)."""
    out: Path = Path("results/checkpoint-cost")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(name: str, tree: str, args: Args) -> dict:
    """One tree's run: its wall-clock, every checkpoint's seconds, and what its folder holds at the end."""
    out = args.scratch.resolve() / name
    shutil.rmtree(out, ignore_errors=True)
    tree = importable(Path(tree).resolve())  # run in the tree: python -c puts the working folder ahead of PYTHONPATH
    path = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", DRIVER, str(out), str(args.minutes), str(args.checkpoint_every)],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, cwd=tree)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"checkpoint_cost: the {name} tree failed:\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    seconds = result["checkpoint_seconds"]
    result.update(tree=name, checkpoints=len(seconds), checkpoint_total=sum(seconds),
                  share=sum(seconds) / result["wall"], folder_bytes=folder_bytes(out))
    shutil.rmtree(out, ignore_errors=True)
    return result


def table(rows: list[dict]) -> str:
    lines = ["| tree | device | steps per run | wall-clock (s) | checkpoints | seconds writing them (each) | share of the "
             "wall-clock | folder at the end (GiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        each = ", ".join(f"{s:.1f}" for s in r["checkpoint_seconds"])
        lines.append(f"| {r['tree']} | {r['device']} | {r['steps_per_run'] or 0:,} | {r['wall']:.1f} | {r['checkpoints']} | "
                     f"{r['checkpoint_total']:.1f} ({each}) | {100 * r['share']:.1f} % | {r['folder_bytes'] / 2**30:.2f} |")
    return "\n".join(lines) + "\n"


def write_settings(args: Args) -> None:
    """``settings.json``: the options of the call, as parsed."""
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (args.out / "settings.json").write_text(json.dumps({"settings": settings}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    started, rows = time.monotonic(), []
    args.out.mkdir(parents=True, exist_ok=True)
    write_settings(args)
    for spec in args.trees:
        name, _, tree = spec.partition("=")
        rows.append(measure(name, tree or ".", args))
        (args.out / "checkpoint_cost.json").write_text(json.dumps(rows, indent=1) + "\n")  # kept tree by tree
        (args.out / "checkpoint_cost.md").write_text(table(rows))
        print(table(rows), flush=True)
    info = dict(command=" ".join(["python -m experiments.checkpoint_cost", *(argv or sys.argv[1:])]),
                device=rows[0]["device"], seconds=time.monotonic() - started)
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
