"""Every setting of a sweep at the last step its batch reached: the median (25-75 %) across seeds of a few metrics.

A sweep ranks settings by the area under the median return curve. When every setting of a method still scores 0
(a partial sweep, or a method that never reaches the goal), that ranking cannot tell them apart; how far each
setting explored (``state_actions_visited``) and the best episode so far (``max_return``) still can. Writes
``last_step.md`` into the sweep folder. Run:
``python -m experiments.tools.sweep_last_step docs/results/sweep-maze_baselines-bfloat16-partial``.

Reaches inside: opiq_jax.host.sweeping.sweep_rows, for the batches' metrics with their padding runs dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from opiq_jax.reporting.plotting import paper_name
from opiq_jax.host.sweeping import sweep_rows
from opiq_jax.store.files import atomic_write_bytes

METRICS = ("state_actions_visited", "max_return", "train_return")


@dataclass
class Args:
    sweep: tyro.conf.Positional[Path]
    """A sweep's results folder (its batch_* subfolders)."""
    metrics: tuple[str, ...] = METRICS
    """The metrics to tabulate, one column each."""


def last_step_values(rows: list[dict], metric: str) -> dict[tuple[str, str], tuple[int, np.ndarray]]:
    """Per (method, setting): the last step its runs share for ``metric``, and each seed's value there."""
    by_run: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for r in rows:
        if r["metric"] == metric:
            by_run.setdefault((r["method"], r["setting"]), {}).setdefault(r["seed"], {})[r["step"]] = r["value"]
    table = {}
    for key, seeds in by_run.items():
        step = min(max(steps) for steps in seeds.values())  # every seed logged it
        table[key] = (step, np.array([steps[step] for steps in seeds.values()]))
    return table


def cell(values: np.ndarray) -> str:
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return f"{median:.4g} ({q25:.4g}-{q75:.4g})"


def last_step_table(rows: list[dict], metrics: tuple[str, ...]) -> str:
    """A markdown table: one line per (method, setting), in the sweep's order, one column per metric."""
    if not rows:
        raise ValueError("the sweep folder holds no metrics")
    columns = {m: last_step_values(rows, m) for m in metrics}
    missing = [m for m, c in columns.items() if not c]
    if missing:
        raise ValueError(f"no rows of {', '.join(missing)} in the sweep; its metrics are "
                         f"{', '.join(sorted({r['metric'] for r in rows}))}")
    keys = list(dict.fromkeys((r["method"], r["setting"]) for r in rows))
    lines = ["| method | setting | step | seeds | " + " | ".join(f"{m}: median (25-75 %)" for m in metrics) + " |",
             "|---|---|---|---|" + "---|" * len(metrics)]
    for key in keys:
        step, values = columns[metrics[0]][key]
        cells = " | ".join(cell(columns[m][key][1]) for m in metrics)
        lines.append(f"| {paper_name(key[0])} | {key[1]} | {step:,} | {len(values)} | {cells} |")
    return "\n".join(lines) + "\n"


def main(args: Args) -> None:
    try:
        table = last_step_table(sweep_rows(args.sweep), args.metrics)
    except ValueError as e:  # no batches there, or a metric the sweep did not log
        raise SystemExit(f"sweep_last_step: error: {args.sweep}: {e}") from None
    text = ("Every setting at the last step its batch reached "
            "(written by `python -m experiments.tools.sweep_last_step`)."
            "\n\n" + table)
    atomic_write_bytes(args.sweep / "last_step.md", text.encode())
    print(text)


if __name__ == "__main__":
    main(tyro.cli(Args))
