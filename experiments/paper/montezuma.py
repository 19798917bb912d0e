"""Montezuma's Revenge: OPIQ against DQN + PC under the same budget (the paper's Figures 7 and 8, short).

Every method x seed is one run with one environment of a single EnvPool pool, stepped inside the
compiled loop. Writes into ``--out``: the results folder (``config.json``, ``metrics.csv``,
``run_info.json``), ``montezuma_<metric>.png`` for the episode return, the maximum episode return and
the rooms visited, ``summary.md``, and the projected wall-clock of the paper's full experiment
(12.5M steps x 4 seeds per method) from the measured rate.

Needs the Atari extra: ``pip install -e '.[atari]'``. Run:
``python -m experiments.paper.montezuma --steps 500000 --seeds 2 --out results/montezuma``; ``--redraw --out <folder>``
only draws a finished folder's figures again (no EnvPool needed).

Uses only the public API: ``opiq_jax.train`` and ``opiq_jax.reporting``, for the figures and tables of the Montezuma
page.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run by path (python experiments/paper/montezuma.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tyro

import opiq_jax
from opiq_jax import train
from opiq_jax.reporting import curves, folder_title, markdown_table, save_curve_figure, summary_table

PAPER_STEPS, PAPER_SEEDS = 12_500_000, 4


@dataclass
class Args:
    out: Path = Path("results/montezuma")
    """Results folder (an unfinished one is started again: EnvPool's emulators cannot be checkpointed)."""
    steps: int = 500_000
    """Agent steps per run (the paper: 12.5M)."""
    seeds: int = 2
    """Seeds per method (the paper: 4)."""
    methods: tuple[str, ...] = ("opiq", "dqn_pc")
    """Methods: dqn, dqn_pc, opiq, opiq_no_ob, opiq_no_pc."""
    log_every: int = 10_000
    """Agent steps per compiled chunk (one metrics row per run)."""
    buffer_size: int = 1_000_000
    """Replay frames per run (the paper: 1M, about 6.6 GiB per run), split evenly over its environments."""
    envs_per_run: int = 1
    """EnvPool environments per run (the paper's agent: 1); step counts stay per run."""
    max_minutes: float | None = None
    """Stop after this many minutes (the metrics so far are kept)."""
    progress: bool = True
    """Show a progress bar."""
    redraw: bool = False
    """Only redraw the figures from --out's metrics: no training, summary.md left as it is."""


def options(args: Args) -> dict[str, Any]:
    """The experiment's options for ``opiq_jax.train`` (every method x seed with the paper's setting)."""
    if args.steps % args.log_every:
        raise SystemExit(f"--steps ({args.steps}) must be a multiple of --log-every ({args.log_every})")
    return dict(steps=args.steps, log_every=args.log_every, buffer_size=args.buffer_size,
                envs_per_run=args.envs_per_run)


def projection(info: dict, methods: int) -> str:
    """The paper's experiment (12.5M steps x 4 seeds per method) at the measured rate of one program."""
    rate = info["env_steps_per_second"]
    if not rate:
        return f"{info['runs']} runs on {info['device']}: too few chunks for a rate"
    hours = PAPER_STEPS * PAPER_SEEDS * methods / rate / 3600
    return (f"Measured {rate:,.0f} environment steps/s with {info['runs']} runs on {info['device']}; "
            f"the paper's {PAPER_STEPS / 1e6:g}M steps x {PAPER_SEEDS} seeds x {methods} methods would take about "
            f"{hours:.1f} h at this rate (one pool, {info['runs']} environments; more runs per pool raise the rate).")


def draw_figures(out: Path, rows: list[dict]) -> None:
    title = folder_title(out, rows)
    for metric in ("train_return", "max_return", "rooms_visited"):
        save_curve_figure(out / f"montezuma_{metric}.png", curves(rows, metric), metric, title)


def report(out: Path, methods: int) -> str:
    results = opiq_jax.load(out)
    rows = results.metrics
    draw_figures(out, rows)
    text = "\n\n".join(f"### {m}\n\n{markdown_table(summary_table(rows, m), m)}"
                       for m in ("train_return", "max_return", "rooms_visited"))
    for folder in (out / name for name in results.programs()):
        info = json.loads((folder / "run_info.json").read_text())
        text += (f"\n\n{folder.name}: " + projection(info, methods)
                 + f" State per run: {info['state_bytes_per_run'] / 2**30:.2f} GiB.")
    (out / "summary.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if args.redraw:  # a committed folder's figures, drawn again by today's plotting (no EnvPool needed)
        draw_figures(args.out, opiq_jax.load(args.out).metrics)
        return
    try:
        train("montezuma", args.methods, args.seeds, out=args.out, progress=args.progress, max_minutes=args.max_minutes,
              **options(args))
    except (ImportError, ValueError) as e:  # no EnvPool, or a bad option (opiq_jax.UsageError is a ValueError)
        raise SystemExit(f"montezuma: {e}") from None
    print(report(args.out, len(args.methods)))


if __name__ == "__main__":
    main()
