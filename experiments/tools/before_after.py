"""Learning curves of the same experiment from two code revisions (or devices), side by side.

A speed change must not change what the agents learn. Run the same command (same methods, seeds and
steps) into two results folders, one per revision, then
``python -m experiments.tools.before_after --before results/chain-old --after results/chain-new``. Writes
into ``--out`` (default: the ``--after`` folder):

* ``before_after_<metric>.png``: one panel per method (named as the paper names it), the median across seeds
  before (grey, dashed) and after (blue, solid, with the 25-75% band of the after run); the title states each
  folder's environment, seeds, steps and precision. A panel per method, as the line style already tells before
  from after and thirteen methods' lines in one axes hid one another;
* ``before_after.md``: per method and metric, the final median and the area under the median curve
  before and after, the share of (seed, step) points whose value is identical, the mean of the seeds'
  own areas before and after, and the p-value of a two-sided rank-sum (Mann-Whitney) test that the seeds' own
  areas (the mean of the metric over the run) come from one distribution: a small p says the change moved the
  learning beyond what the
  seeds' spread explains. A change that alters the floating-point path (another precision, another
  kernel) makes each seed's run a different sample, so the seeds' spread is the scale to judge by;
* also from the seeds' own areas (:mod:`opiq_jax.reporting.stats`, Agarwal et al. 2021): the interquartile mean before
  and after, each with its 95 % stratified-bootstrap interval, and the probability of improvement
  P(after > before) (a random seed after beats a random seed before, ties counting half; 0.5 = no change)
  with its 95 % bootstrap interval.

GPU runs of the same command differ slightly from one another (scatter-adds and reductions are not
ordered), so identical points are expected only on the CPU; the curves say whether the learning
changed.

``--figures-only`` redraws the figures of a comparison whose table is already written (the table is left as it
was).

Reaches inside: opiq_jax.reporting.plotting and opiq_jax.reporting.stats, for the per-seed areas and the paired
statistics that its tables are made of (the API gives curves, not these), and for the figures' names, titles and
layout.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run by path (python experiments/tools/before_after.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import tyro

import opiq_jax
from opiq_jax.reporting.plotting import (
    METRIC_LABELS,
    STATISTIC_TEXT,
    area_under_median,
    check_one_experiment,
    curves,
    line_zorder,
    paper_name,
    paper_order,
    seed_areas,
    setting_text,
    steps_reached,
)
from opiq_jax.reporting.stats import iqm, probability_of_improvement_ci, stratified_bootstrap_ci


@dataclass
class Args:
    before: Path
    """Results folder of the earlier revision."""
    after: Path
    """Results folder of the later revision (same methods, seeds and steps)."""
    metrics: tuple[str, ...] = ("train_return", "test_return", "states_visited")
    """Metrics to compare."""
    out: Path | None = None
    """Folder for the figures and the table (default: --after)."""
    figures_only: bool = False
    """Only draw the figures (a comparison's before_after.md is left as it was)."""


def rank_sum_p_value(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney rank-sum test (normal approximation, ties averaged and corrected)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n, m = len(x), len(y)
    values = np.concatenate([x, y])
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n + m)
    ranks[order] = np.arange(1, n + m + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ranks = (np.bincount(inverse, weights=ranks) / counts)[inverse]  # average ranks of ties
    u = ranks[:n].sum() - n * (n + 1) / 2
    ties = np.sum(counts**3 - counts)
    variance = n * m / 12 * ((n + m + 1) - ties / ((n + m) * (n + m - 1)))
    if variance <= 0:  # every value equal
        return 1.0
    z = (abs(u - n * m / 2) - 0.5) / math.sqrt(variance)  # continuity correction
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def mean_difference_interval(before: np.ndarray, after: np.ndarray, z: float = 1.96) -> tuple[float, float, float]:
    """``after``'s mean minus ``before``'s and its 95 % interval (normal approximation with each sample's own
    variance, as in Welch's test): the change a comparison can rule out, which a p-value alone does not say."""
    before, after = np.asarray(before, float), np.asarray(after, float)
    difference = float(np.mean(after) - np.mean(before))
    spread = math.sqrt(np.var(before, ddof=1) / len(before) + np.var(after, ddof=1) / len(after))
    return difference, difference - z * spread, difference + z * spread


REPS = 2000
"""Bootstrap resamples of every interval (a fixed RNG seed 0 makes the table reproducible)."""


def robust_comparison(areas_before: np.ndarray, areas_after: np.ndarray, reps: int = REPS) -> dict[str, float]:
    """The IQM of the seeds' areas before and after with their 95 % stratified-bootstrap intervals, and the
    probability of improvement P(after > before) with its 95 % bootstrap interval."""
    result = {}
    for side, areas in (("before", areas_before), ("after", areas_after)):
        point, low, high = stratified_bootstrap_ci(areas, iqm, reps=reps, seed=0)
        result.update({f"iqm_{side}": point, f"iqm_{side}_low": low, f"iqm_{side}_high": high})
    point, low, high = probability_of_improvement_ci(areas_after, areas_before, reps=reps, seed=0)
    return {**result, "improvement": point, "improvement_low": low, "improvement_high": high}


def comparison_rows(before: list[dict], after: list[dict], metric: str) -> list[dict]:
    """Per method present in both: final median and area under the median, before and after, and the
    share of identical (seed, step) values, and the seeds' own areas: their means, the change of the mean with
    its 95 % interval, and the rank-sum p-value; and their IQM before and after and the probability of
    improvement, each with its 95 % interval (:func:`robust_comparison`)."""
    old, new = curves(before, metric), curves(after, metric)
    rows = []
    for method in sorted(set(old) & set(new)):
        a, b = old[method], new[method]
        if a["values"].shape != b["values"].shape or not np.array_equal(a["steps"], b["steps"]):
            raise ValueError(f"{method}/{metric}: the two folders hold different seeds or steps "
                             f"({a['values'].shape} against {b['values'].shape})")
        same = np.isclose(a["values"], b["values"], rtol=0, atol=0, equal_nan=True)
        areas_before, areas_after = seed_areas(a["values"]), seed_areas(b["values"])
        change, change_low, change_high = mean_difference_interval(areas_before, areas_after)
        rows.append(dict(method=method, metric=metric, final_before=float(a["median"][-1]),
                         final_after=float(b["median"][-1]), auc_before=area_under_median(a),
                         auc_after=area_under_median(b), identical=float(np.mean(same)),
                         seed_area_mean_before=float(np.mean(areas_before)),
                         seed_area_mean_after=float(np.mean(areas_after)),
                         seed_area_change=change, seed_area_change_low=change_low, seed_area_change_high=change_high,
                         seed_area_p=rank_sum_p_value(areas_before, areas_after),
                         **robust_comparison(areas_before, areas_after)))
    return rows


def _interval(r: dict, key: str, spec: str = ".3g") -> str:
    """``point (low, high)`` of ``key``."""
    return f"{r[key]:{spec}} ({r[key + '_low']:{spec}}, {r[key + '_high']:{spec}})"


def markdown(rows: list[dict]) -> str:
    lines = [("| method | metric | final median before | after | area under median before | after | identical points "
              "| seeds' mean area before | after | change of the mean (95 % interval) | rank-sum p "
              "| IQM of seeds' areas before (95 % CI) | after (95 % CI) | P(after > before) (95 % CI) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['metric']} | {r['final_before']:.3g} | {r['final_after']:.3g} | "
                     f"{r['auc_before']:.3g} | {r['auc_after']:.3g} | {100 * r['identical']:.0f}% | "
                     f"{r['seed_area_mean_before']:.3g} | {r['seed_area_mean_after']:.3g} | "
                     f"{_interval(r, 'seed_area_change', '+.2g')} | {r['seed_area_p']:.2g} | "
                     f"{_interval(r, 'iqm_before')} | {_interval(r, 'iqm_after')} | "
                     f"{_interval(r, 'improvement', '.2f')} |")
    return "\n".join(lines)


BEFORE_STYLE = dict(color="0.35", ls="--", lw=1.3)
AFTER_STYLE = dict(color="C0", ls="-", lw=1.6)
"""Before and after differ in colour and line style both, so either tells them apart where they overlap."""
PANEL_COLUMNS = 4


def folder_text(name: str, folder: Path, rows: list[dict]) -> str:
    """``before: <folder> (<environment, seeds, steps, precision>)``, read from the folder's configs and the steps
    its metrics reach, as every other figure's title is (:func:`opiq_jax.reporting.plotting.setting_text`)."""
    shortest, last = steps_reached(rows)
    return f"{name}: {folder.name} ({setting_text(check_one_experiment(folder, pooled=True), last, shortest)})"


def comparison_title(before: Path, after: Path, before_rows: list[dict], after_rows: list[dict]) -> str:
    """The figures' title: what the lines are, each folder's setting (the precision may differ between the two:
    that can be the change compared), and the statistic."""
    return (f"{folder_text('before (grey, dashed)', before, before_rows)}\n"
            f"{folder_text('after (blue, solid)', after, after_rows)}\n"
            f"{STATISTIC_TEXT['median']} (the band of the after run only)")


def draw(path: Path, before: list[dict], after: list[dict], metric: str, title: str) -> Path:
    """One panel per method present in both (the paper's names and order), before against after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    old, new = curves(before, metric), curves(after, metric)
    methods = paper_order(set(old) & set(new))
    columns = min(len(methods), PANEL_COLUMNS)
    rows = -(-len(methods) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(max(3.0 * columns, 7.5), 2.3 * rows + 1.5), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    for ax, method in zip(axes.flat, methods):
        # the dashed 'before' over the solid 'after': where they agree, both stay visible
        ax.plot(old[method]["steps"], old[method]["median"], label="before", zorder=line_zorder(BEFORE_STYLE["ls"]),
                **BEFORE_STYLE)
        ax.plot(new[method]["steps"], new[method]["median"], label="after (25-75% band)",
                zorder=line_zorder(AFTER_STYLE["ls"]), **AFTER_STYLE)
        ax.fill_between(new[method]["steps"], new[method]["q25"], new[method]["q75"], color=AFTER_STYLE["color"],
                        alpha=0.15, lw=0)
        ax.set_title(paper_name(method), fontsize=9)
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))  # 200k, 1M: no offset text
        ax.tick_params(labelsize=8)
    for i, ax in enumerate(axes.flat):
        if i >= len(methods):
            ax.set_visible(False)
        elif i + columns >= len(methods):  # no panel below it: its steps are labelled here
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("environment steps", fontsize=8)
    fig.supylabel(METRIC_LABELS.get(metric, metric), fontsize=9)
    fig.suptitle(title, fontsize=9)
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=8,
               frameon=False)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[dict]:
    args = tyro.cli(Args, args=argv)
    out = args.out or args.after
    try:
        before, after = opiq_jax.load(args.before).metrics, opiq_jax.load(args.after).metrics
        rows = [row for metric in args.metrics for row in comparison_rows(before, after, metric)]
    except (opiq_jax.ResultsError, ValueError) as e:  # no such folder, no results, or two experiments' shapes
        raise SystemExit(f"before_after: error: {e}") from None
    if not rows:
        raise SystemExit(f"before_after: error: {args.before} and {args.after} share no method")
    out.mkdir(parents=True, exist_ok=True)  # only now: a mistyped --after is not created
    title = comparison_title(args.before, args.after, before, after)
    for metric in dict.fromkeys(r["metric"] for r in rows):  # a metric neither folder logged has no panel to draw
        draw(out / f"before_after_{metric}.png", before, after, metric, title)
    if args.figures_only:
        return rows
    text = markdown(rows)
    (out / "before_after.md").write_text(f"before: {args.before}\n\nafter: {args.after}\n\n{text}\n")
    print(text)
    return rows


if __name__ == "__main__":
    main()
