"""Figures and summary tables that read only a results folder.

Curves are the paper's: the median across seeds with the 25-75% band, one line per method (and
setting, when a folder holds several). The summary ranks by the area under the median curve, the
paper's selection protocol.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from .runner import read_metrics

DEFAULT_METRICS = ("train_return", "test_return", "states_visited", "max_return")
METRIC_LABELS = {
    "train_return": "episode return",
    "test_return": "greedy test return",
    "max_return": "maximum episode return",
    "states_visited": "distinct states visited",
    "state_actions_visited": "distinct state-actions visited",
    "q_start": "max Q at the start state",
    "qplus_start": "max Q+ at the start state",
    "loss": "TD loss",
    "epsilon": "epsilon",
}


def group_label(row: dict, with_setting: bool) -> str:
    return f"{row['method']} [{row['setting']}]" if with_setting else row["method"]


def curves(rows: list[dict], metric: str) -> dict[str, dict[str, np.ndarray]]:
    """Per group: ``steps``, ``median``, ``q25``, ``q75`` across seeds, and ``values[seed, step]``."""
    settings_per_method = defaultdict(set)
    for r in rows:
        settings_per_method[r["method"]].add(r["setting"])
    with_setting = any(len(s) > 1 for s in settings_per_method.values())
    table: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["metric"] == metric:
            table[group_label(r, with_setting)][r["run"]][r["step"]] = r["value"]
    result = {}
    for label, per_run in table.items():
        steps = np.array(sorted({s for run in per_run.values() for s in run}))
        values = np.array([[run.get(s, np.nan) for s in steps] for run in per_run.values()], dtype=float)
        with warnings.catch_warnings():  # all-NaN columns (no episode ended yet) stay NaN quietly
            warnings.simplefilter("ignore", RuntimeWarning)
            q25, median, q75 = np.nanpercentile(values, [25, 50, 75], axis=0)
        result[label] = dict(steps=steps, median=median, q25=q25, q75=q75, values=values)
    return result


def area_under_median(curve: dict[str, np.ndarray]) -> float:
    """Mean of the median curve over the logged steps (NaN points count as zero)."""
    return float(np.mean(np.nan_to_num(curve["median"], nan=0.0)))


def summary_table(rows: list[dict], metric: str) -> list[dict]:
    """Final median, quartiles and area under the median curve per group, best first."""
    table = []
    for label, c in curves(rows, metric).items():
        table.append(dict(group=label, final_median=float(c["median"][-1]), final_q25=float(c["q25"][-1]),
                          final_q75=float(c["q75"][-1]), auc=area_under_median(c), seeds=int(c["values"].shape[0]),
                          last_step=int(c["steps"][-1])))
    return sorted(table, key=lambda t: -t["auc"])


def markdown_table(table: list[dict], metric: str) -> str:
    lines = [f"| method | seeds | last step | final median {metric} (25%, 75%) | area under median |",
             "|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['group']} | {t['seeds']} | {t['last_step']:,} | {t['final_median']:.3g} ({t['final_q25']:.3g}, "
                     f"{t['final_q75']:.3g}) | {t['auc']:.3g} |")
    return "\n".join(lines)


def plot_curves(ax, metric_curves: dict[str, dict[str, np.ndarray]], groups: list[str] | None = None) -> None:
    """Median line and 25-75% band per group; more than ten groups take distinct colours from tab20."""
    import matplotlib

    labels = [label for label in groups or sorted(metric_curves) if label in metric_curves]
    palette = matplotlib.colormaps["tab20"].colors if len(labels) > 10 else [f"C{i}" for i in range(10)]
    for i, label in enumerate(labels):
        c = metric_curves[label]
        colour = palette[i % len(palette)]
        ax.plot(c["steps"], c["median"], label=label, lw=2.2 if label == "opiq" else 1.4, color=colour)
        ax.fill_between(c["steps"], c["q25"], c["q75"], color=colour, alpha=0.2, lw=0)


def save_curve_figure(path: Path, metric_curves: dict[str, dict[str, np.ndarray]], metric: str, title: str,
                      groups: list[str] | None = None, hline: float | None = None) -> Path:
    """Writes one PNG: the median and 25-75% band of every group, an optional dotted reference line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    plot_curves(ax, metric_curves, groups)
    if hline is not None:
        ax.axhline(hline, color="k", ls=":", lw=1)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_folder(out: str | Path, metrics: tuple[str, ...] = DEFAULT_METRICS, groups: list[str] | None = None,
                reference_lines: dict[str, float] | None = None, prefix: str = "plot") -> list[Path]:
    """One PNG per metric in ``out``: median across seeds with the 25-75% band per method."""
    out = Path(out)
    rows = read_metrics(out)
    written = []
    for metric in metrics:
        metric_curves = curves(rows, metric)
        if metric_curves:
            written.append(save_curve_figure(
                out / f"{prefix}_{metric}.png", metric_curves, metric, f"{out.name}\nmedian and 25-75% across seeds",
                groups, (reference_lines or {}).get(metric)))
    return written
