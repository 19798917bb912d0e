"""Learning curves of the same experiment from two code revisions (or devices), side by side.

A speed change must not change what the agents learn. Run the same command (same methods, seeds and
steps) into two results folders, one per revision, then
``python -m experiments.before_after --before results/chain-old --after results/chain-new``. Writes
into ``--out`` (default: the ``--after`` folder):

* ``before_after_<metric>.png``: per method, the median across seeds before (dashed) and after (solid),
  with the 25-75% band of the after run;
* ``before_after.md``: per method and metric, the final median and the area under the median curve
  before and after, the share of (seed, step) points whose value is identical, the mean of the seeds'
  own areas before and after, and the p-value of a two-sided rank-sum (Mann-Whitney) test that the seeds' own areas (the mean of the metric over the
  run) come from one distribution: a small p says the change moved the learning beyond what the
  seeds' spread explains. A change that alters the floating-point path (another precision, another
  kernel) makes each seed's run a different sample, so the seeds' spread is the scale to judge by;
* also from the seeds' own areas (:mod:`opiq_jax.stats`, Agarwal et al. 2021): the interquartile mean before
  and after, each with its 95 % stratified-bootstrap interval, and the probability of improvement
  P(after > before) (a random seed after beats a random seed before, ties counting half; 0.5 = no change)
  with its 95 % bootstrap interval.

GPU runs of the same command differ slightly from one another (scatter-adds and reductions are not
ordered), so identical points are expected only on the CPU; the curves say whether the learning
changed.

Reaches inside: opiq_jax.plotting and opiq_jax.stats, for the per-seed areas and the paired statistics that its
tables are made of (the API gives curves, not these).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run by path (python experiments/before_after.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tyro

import opiq_jax
from opiq_jax.plotting import METRIC_LABELS, area_under_median, curves, group_colours, seed_areas
from opiq_jax.stats import iqm, probability_of_improvement_ci, stratified_bootstrap_ci


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
                         seed_area_mean_before=float(np.mean(areas_before)), seed_area_mean_after=float(np.mean(areas_after)),
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


def draw(path: Path, before: list[dict], after: list[dict], metric: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    old, new = curves(before, metric), curves(after, metric)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    methods = sorted(set(old) & set(new))
    for method, colour in zip(methods, group_colours(len(methods))):
        ax.plot(old[method]["steps"], old[method]["median"], ls="--", color=colour, lw=1.2)
        ax.plot(new[method]["steps"], new[method]["median"], color=colour, lw=1.6, label=method)
        ax.fill_between(new[method]["steps"], new[method]["q25"], new[method]["q75"], color=colour, alpha=0.15, lw=0)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title("before (dashed) and after (solid, 25-75% band)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[dict]:
    args = tyro.cli(Args, args=argv)
    out = args.out or args.after
    out.mkdir(parents=True, exist_ok=True)
    try:
        before, after = opiq_jax.load(args.before).metrics, opiq_jax.load(args.after).metrics
    except opiq_jax.ResultsError as e:  # a folder that does not exist or holds no results
        raise SystemExit(f"before_after: error: {e}") from None
    rows = []
    for metric in args.metrics:
        rows += comparison_rows(before, after, metric)
        draw(out / f"before_after_{metric}.png", before, after, metric)
    if not rows:
        raise SystemExit(f"before_after: error: {args.before} and {args.after} share no method")
    text = markdown(rows)
    (out / "before_after.md").write_text(f"before: {args.before}\n\nafter: {args.after}\n\n{text}\n")
    print(text)
    return rows


if __name__ == "__main__":
    main()
