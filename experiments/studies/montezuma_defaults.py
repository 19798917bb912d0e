"""Montezuma's defaults chosen by measurement: the paper's learning rate (5e-4) under the authors' initialisation and
under flax's, and DQN + PC beside OPIQ, each cell 4 runs in float32 with the learning diagnostics.

A cell is trained as processes of ``--seeds-per-process`` runs under consecutive base seeds (``--bases``), all at once
(on one GPU under NVIDIA MPS, ``nvidia-cuda-mps-control -d``, so that they share the card instead of taking turns).
Each process trains with ``max_minutes``: it stops after the first chunk past ``--max-minutes`` with a checkpoint
written, and the same command run again resumes it, so a cell spans several device calls of one lease. Every call
appends a record to the cell's ``calls.json``: the revision (``--revision``, with whether its tree was clean), the
device, the wall-clock and the last step reached; the revision goes into the loop's ``run_info.json`` too.

Reaches inside: opiq_jax.store.files, for its atomic writes.

Run (several times, until every cell says finished):
``python -m experiments.studies.montezuma_defaults --out DIR --cells opiq-pytorch --max-minutes 7.5 --revision REV``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tyro

import opiq_jax
from opiq_jax.store.files import atomic_write_text

PAPER_LR = 5e-4  # the paper's appendix: "RMSProp with a learning rate of 0.0005"; the authors' default.yaml too
COMMON = dict(precision="float32", envs_per_run=8, lr=PAPER_LR)
CELLS = {
    # OPIQ at the corrected beta (0.1) and DQN + PC at its paper beta (0.01), the methods' own Montezuma settings
    "opiq-pytorch": dict(method="opiq", network_init="pytorch"),
    "opiq-flax": dict(method="opiq", network_init="flax"),
    "dqn_pc-pytorch": dict(method="dqn_pc", network_init="pytorch"),
    "opiq-pytorch-e1": dict(method="opiq", network_init="pytorch", envs_per_run=1),  # the paper's one actor
    # the chosen defaults with the learned count (coin-flip network) in place of the frame feature
    "opiq-pytorch-cfn": dict(method="opiq", network_init="pytorch", count_features="cfn"),
}


@dataclass
class Args:
    out: Path
    """The folder of the cells: ``<out>/<cell>-base<B>/`` per process."""
    cells: tuple[str, ...] = ("opiq-pytorch",)
    """Which cells to train (of :data:`CELLS`)."""
    bases: tuple[int, ...] = (0, 2)
    """One process per base seed; a process trains seeds ``base`` to ``base + seeds_per_process - 1``."""
    seeds_per_process: int = 2
    steps: int = 2_000_000
    log_every: int = 40_000
    buffer_size: int | None = None
    """Replay frames per run (default: the paper's 1M; smaller for a smoke test on a CPU)."""
    max_minutes: float = 7.5
    """Each process stops after the first chunk that ends past this many minutes (a checkpoint written)."""
    revision: str = "unknown"
    """The revision the code is at (the GPU machine has no git): ``git rev-parse --short HEAD``."""
    tree_clean: bool = True
    """Whether that revision's tree was clean when the code was sent."""
    cell: str | None = field(default=None)
    """(internal) train one cell-and-base in this process."""


def cell_options(name: str) -> dict:
    if name not in CELLS:
        raise SystemExit(f"montezuma_defaults: error: unknown cell {name!r}; choose from {', '.join(CELLS)}")
    return {**COMMON, **CELLS[name]}


def folder(args: Args, cell: str, base: int) -> Path:
    return args.out / f"{cell}-base{base}"


def train_one(args: Args, cell: str, base: int) -> None:
    """One process: the cell's runs under ``base``, for ``max_minutes``, then a record of this call."""
    options = cell_options(cell)
    if args.buffer_size is not None:
        options["buffer_size"] = args.buffer_size
    method = options.pop("method")
    out = folder(args, cell, base)
    started = time.time()
    results = opiq_jax.train(env="montezuma", methods=[method], seeds=args.seeds_per_process, seed=base,
                             steps=args.steps, log_every=args.log_every, out=out, max_minutes=args.max_minutes,
                             progress=False, **options)
    record = {"revision": args.revision, "tree_clean": args.tree_clean, "device": device_name(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "seconds": round(time.time() - started, 1), "finished": bool(results.finished),
              "last_step": last_step(results)}
    calls = out / "calls.json"
    earlier = json.loads(calls.read_text()) if calls.exists() else []
    atomic_write_text(calls, json.dumps(earlier + [record], indent=1))
    name_revision(out / "run_info.json", args)


def name_revision(run_info: Path, args: Args) -> None:
    """The training loop's record with the revision given on the command line where the loop could not read one
    (a GPU machine without git)."""
    info = json.loads(run_info.read_text())
    if info.get("revision") is None:
        info.update(revision=args.revision, tree_clean=args.tree_clean,
                    provenance="revision given on the command line: the machine that ran it has no git")
        atomic_write_text(run_info, json.dumps(info, indent=1))


def last_step(results) -> int:
    return int(max((row["step"] for row in results.metrics), default=0))


def device_name() -> str:
    import jax

    return f"{jax.devices()[0].device_kind} x{jax.device_count()}"


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if args.cell is not None:
        cell, base = args.cell.rsplit(":", 1)
        return train_one(args, cell, int(base))
    for cell in args.cells:
        cell_options(cell)
    args.out.mkdir(parents=True, exist_ok=True)
    own = list(argv if argv is not None else sys.argv[1:])
    # each process grows its share of the GPU's memory as it needs it, instead of taking 75 % when JAX starts
    environment = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    children = []
    for cell in args.cells:
        for base in args.bases:
            log = open(args.out / f"{cell}-base{base}.log", "a")
            children.append(subprocess.Popen([sys.executable, "-m", "experiments.studies.montezuma_defaults", *own,
                                              "--cell", f"{cell}:{base}"], stdout=log, stderr=subprocess.STDOUT,
                                             env=environment))
    codes = [child.wait() for child in children]
    if any(codes):
        raise SystemExit(f"montezuma_defaults: a process failed (exit codes {codes}); see the .log files in {args.out}")


if __name__ == "__main__":
    main()
