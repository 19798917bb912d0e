"""Figure 5 (the maze's OPIQ ablations) at many seeds: who reaches the goal, how soon, how much, how steadily.

Reads a results folder of ``opiq-jax train --env maze --method opiq opiq_no_ob opiq_no_pc ...`` and reports,
per method:

* ``reached``: seeds whose maximum training episode return reached the goal's reward (the maze's only
  reward is the goal's, 10 per episode that reaches it; without a ``max_return`` metric a positive
  training return counts);
* ``first goal``: the logged step at which a seed first reached the goal (the end of the logging chunk in
  which it happened), the median over seeds with a 95 % percentile-bootstrap interval; a seed that never
  reached it counts as infinitely late, so the median is infinite once half the seeds never get there;
* ``area``: each seed's area under its own training-return curve (the mean over logged points, a point
  with no finished episode counting 0, as the project's area under the median does), then the IQM over
  seeds with its 95 % stratified-bootstrap interval (``opiq_jax.reporting``);
* ``stability``: the spread across seeds, the interquartile range (q75 - q25) of the seeds' areas, and
  within seeds the ``dips``: after the first logged point at which every finished training episode
  reached the goal, the share of later points whose training return is below the goal's reward (episodes
  that failed again once the goal had been learnt);
* for each pair of methods the probability of improvement P(area of A > area of B) with its interval.

``python -m experiments.paper.fig5_analysis docs/results/fig5-24seeds`` writes ``summary.md``,
``summary.json`` and ``fig5_analysis.png`` into the folder (``--out`` elsewhere). CPU only, seconds.

Uses only the public API: ``opiq_jax.load`` and ``opiq_jax.reporting``, so that the figure names, styles and titles its
methods as the project's others do.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

if not __package__:  # run by path (python experiments/paper/fig5_analysis.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

import opiq_jax
from opiq_jax.reporting import (
    check_one_experiment, group_styles, line_zorder, paper_name, probability_of_improvement_ci, setting_text,
    stratified_bootstrap_ci, summarise,
)

GOAL_REWARD = 10.0
PAPER_ORDER = ("opiq", "opiq_no_ob", "opiq_no_pc")
"""The paper's ordering on the maze (Figure 5): OPIQ, then OPIQ w/o OB, then OPIQ w/o PC."""


def seed_table(rows: list[dict], metric: str = "train_return", goal: float = GOAL_REWARD) -> list[dict]:
    """One row per run: method, seed, ``reached``, ``first_goal`` (step or None), ``area``, ``dips`` and the curve
    (``steps``, ``values``); see the module docstring for the definitions.

    ``rows`` is the tidy metrics table of a results folder, ``opiq_jax.load(folder).metrics`` (keys run, method,
    setting, seed, step, metric, value).
    """
    per_run: dict[int, dict] = {}
    for r in rows:
        run = per_run.setdefault(r["run"], dict(run=r["run"], method=r["method"], seed=r["seed"],
                                                curve={}, best={}))
        if r["metric"] == metric:
            run["curve"][r["step"]] = r["value"]
        elif r["metric"] == "max_return":
            run["best"][r["step"]] = r["value"]
    table = []
    for run in sorted(per_run.values(), key=lambda x: x["run"]):
        if not run["curve"]:
            continue
        steps = sorted(run["curve"])
        values = np.array([run["curve"][s] for s in steps], dtype=float)
        if run["best"]:
            hits = [s for s in sorted(run["best"]) if run["best"][s] >= goal]
        else:
            hits = [s for s, v in zip(steps, values, strict=True) if v > 0]
        first = hits[0] if hits else None
        full = np.flatnonzero(values >= goal)  # logged points at which every finished episode reached the goal
        after = values[full[0] + 1:] if full.size else np.empty(0)
        after = after[~np.isnan(after)]
        dips = float(np.mean(after < goal)) if after.size else float("nan")
        table.append(dict(run=run["run"], method=run["method"], seed=run["seed"], reached=first is not None,
                          first_goal=first, area=float(np.mean(np.nan_to_num(values, nan=0.0))), dips=dips,
                          steps=steps, values=values.tolist()))
    return table


def _order(methods) -> list[str]:
    known = [m for m in PAPER_ORDER if m in methods]
    return known + sorted(m for m in methods if m not in PAPER_ORDER)


def method_summary(seeds: list[dict], reps: int = 2000, seed: int = 0) -> dict[str, dict]:
    """Per method (the paper's order first): seeds, reached, first-goal median and CI, area IQM and CI, IQR, dips."""
    by_method = defaultdict(list)
    for s in seeds:
        by_method[s["method"]].append(s)
    out = {}
    for method in _order(by_method):
        runs = by_method[method]
        firsts = np.array([s["first_goal"] if s["reached"] else math.inf for s in runs], dtype=float)
        areas = np.array([s["area"] for s in runs], dtype=float)
        with np.errstate(invalid="ignore"):  # a median between a step and "never" (inf - inf inside numpy)
            med, low, high = stratified_bootstrap_ci(firsts, np.median, reps=reps, seed=seed)
        area = summarise(areas, reps=reps, seed=seed)
        reached = [s for s in runs if s["reached"]]
        dips = [s["dips"] for s in reached if not math.isnan(s["dips"])]
        out[method] = dict(
            seeds=len(runs), reached=len(reached),
            first_goal_median=med, first_goal_low=low, first_goal_high=high,
            first_goal_min=float(min(firsts)), first_goal_max=float(max(firsts)),
            area_iqm=area["iqm"], area_iqm_low=area["iqm_low"], area_iqm_high=area["iqm_high"],
            area_median=area["median"], area_q25=area["q25"], area_q75=area["q75"],
            area_iqr=area["q75"] - area["q25"], area_mean=area["mean"],
            dips_mean=float(np.mean(dips)) if dips else float("nan"))
    return out


def improvements(seeds: list[dict], reps: int = 2000, seed: int = 0) -> list[dict]:
    """P(area of A > area of B) with its 95 % bootstrap interval for every ordered pair, the paper's order first."""
    areas = defaultdict(list)
    for s in seeds:
        areas[s["method"]].append(s["area"])
    pairs = []
    for a, b in itertools.combinations(_order(areas), 2):
        p, low, high = probability_of_improvement_ci(areas[a], areas[b], reps=reps, seed=seed)
        pairs.append(dict(better=a, worse=b, p=p, low=low, high=high))
    return pairs


def verdict(summary: dict[str, dict], pairs: list[dict]) -> dict[str, object]:
    """Does the paper's ordering hold? Checks for each neighbouring pair of :data:`PAPER_ORDER` that is present:

    ``ordered``: the IQM of the area is higher for the earlier method; ``resolved``: the interval of
    P(earlier > later) lies above 0.5; and whether OPIQ's areas are less spread (smaller IQR) than w/o OB's.
    """
    present = [m for m in PAPER_ORDER if m in summary]
    checks = []
    lookup = {(p["better"], p["worse"]): p for p in pairs}
    for a, b in zip(present, present[1:]):
        pair = lookup.get((a, b))
        checks.append(dict(better=a, worse=b, ordered=summary[a]["area_iqm"] > summary[b]["area_iqm"],
                           resolved=bool(pair and pair["low"] > 0.5)))
    stable = None
    if "opiq" in summary and "opiq_no_ob" in summary:
        stable = summary["opiq"]["area_iqr"] < summary["opiq_no_ob"]["area_iqr"]
    return dict(pairs=checks, ordering_holds=all(c["ordered"] for c in checks) if checks else None,
                ordering_resolved=all(c["resolved"] for c in checks) if checks else None,
                opiq_more_stable_than_no_ob=stable)


def _steps(x: float) -> str:
    if math.isnan(x):  # an interval between "never" and "never"
        return "n/a"
    return "never" if math.isinf(x) else f"{x / 1000:,.0f}k"


def markdown(summary: dict[str, dict], pairs: list[dict], result: dict, folder: str) -> str:
    lines = [f"# Goal, area and spread across {max(s['seeds'] for s in summary.values())} seeds: `{folder}`", "",
             "Written by `python -m experiments.paper.fig5_analysis`. Area: each seed's mean training episode return "
             "over the logged points (goal reward 10); IQM and its 95 % stratified-bootstrap interval over seeds; "
             "IQR: q75 - q25 of the seeds' areas (spread across seeds); dips: after a seed's first logged point "
             "with a training return of 10, the share of later points below 10 (mean over seeds).", "",
             "| method | reached the goal | first goal: median (95 % CI), range | area: IQM (95 % CI) "
             "| area: median (q25, q75) | area IQR | dips |",
             "|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        lines.append(
            f"| {m} | {s['reached']}/{s['seeds']} | {_steps(s['first_goal_median'])} ({_steps(s['first_goal_low'])}–"
            f"{_steps(s['first_goal_high'])}), {_steps(s['first_goal_min'])}–{_steps(s['first_goal_max'])} | "
            f"{s['area_iqm']:.2f} ({s['area_iqm_low']:.2f}–{s['area_iqm_high']:.2f}) | {s['area_median']:.2f} "
            f"({s['area_q25']:.2f}, {s['area_q75']:.2f}) | {s['area_iqr']:.2f} | {s['dips_mean']:.3f} |")
    lines += ["", "| P(area of A > area of B) | estimate (95 % CI) |", "|---|---|"]
    for p in pairs:
        lines.append(f"| {p['better']} > {p['worse']} | {p['p']:.2f} ({p['low']:.2f}–{p['high']:.2f}) |")
    lines += ["", f"Paper's ordering (opiq > opiq_no_ob > opiq_no_pc by area IQM): "
              f"{'holds' if result['ordering_holds'] else 'does not hold'}; resolved by the intervals of P(A > B): "
              f"{'yes' if result['ordering_resolved'] else 'no'}; OPIQ's areas less spread than w/o OB's: "
              f"{'yes' if result['opiq_more_stable_than_no_ob'] else 'no'}.", ""]
    return "\n".join(lines)


def analysis_title(folder: str | Path, configs: list, seeds: list[dict]) -> str:
    """The figure's title: the folder, then the environment, seeds, steps and precision read from its configs (each
    panel's title names its statistic)."""
    last_step = max(step for s in seeds for step in s["steps"])
    return f"{Path(folder).name}: {setting_text(configs, last_step)}"


def figure(path: Path, seeds: list[dict], summary: dict[str, dict], title: str) -> None:
    """Left: each method's median curve and 25-75 % band; right: each seed's area, and the IQM with its 95 % CI.
    Methods keep one (colour, line style) in both panels, the line style telling overlapping curves apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.2), gridspec_kw=dict(width_ratios=[1.6, 1]))
    for i, (method, (colour, style)) in enumerate(zip(summary, group_styles(len(summary)))):
        runs = [s for s in seeds if s["method"] == method]
        steps = np.array(runs[0]["steps"])
        values = np.array([r["values"] for r in runs], dtype=float)
        q25, med, q75 = np.nanpercentile(values, [25, 50, 75], axis=0)
        left.plot(steps, med, color=colour, ls=style, label=paper_name(method), lw=2.2 if method == "opiq" else 1.5,
                  zorder=line_zorder(style))
        left.fill_between(steps, q25, q75, color=colour, alpha=0.15, lw=0)
        areas = np.array([r["area"] for r in runs])
        jitter = np.random.default_rng(i).uniform(-0.15, 0.15, areas.size)
        right.scatter(np.full(areas.size, i) + jitter, areas, s=12, color=colour, alpha=0.7)
        s = summary[method]
        right.errorbar(i + 0.3, s["area_iqm"], yerr=[[s["area_iqm"] - s["area_iqm_low"]],
                                                      [s["area_iqm_high"] - s["area_iqm"]]],
                       fmt="D", color="k", ms=4, capsize=3)
    fig.suptitle(title, fontsize=10)
    left.set_title("median across seeds, 25-75 % band", fontsize=9)
    left.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    left.set_xlabel("environment steps")
    left.set_ylabel("training episode return")
    left.legend(fontsize=8, handlelength=3.2)
    right.set_title("each seed's area (dots); IQM and its 95 % CI (diamond)", fontsize=9)
    # slanted: thirteen methods' names side by side run into one another
    right.set_xticks(range(len(summary)), [paper_name(m) for m in summary], fontsize=8, rotation=45, ha="right",
                     rotation_mode="anchor")
    right.set_ylabel("area under each seed's curve")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _finite(x):
    """``x`` with every non-finite float replaced by None, so that the JSON is strict."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def metrics_of(folder: Path) -> list[dict]:
    """The tidy metrics table of the results folder ``folder``."""
    return opiq_jax.load(folder).metrics


def configs_of(folder: Path) -> list[list[dict]]:
    """The config.json dicts of ``folder``'s experiments (pooled, as its metrics are), for the figure's title."""
    return check_one_experiment(folder, pooled=True)


def analyse(folder: str | Path, out: str | Path | None = None, reps: int = 2000, seed: int = 0) -> dict:
    """Reads ``folder``'s metrics and writes summary.md, summary.json and fig5_analysis.png into ``out``."""
    folder = Path(folder)
    out = Path(out) if out is not None else folder
    seeds = seed_table(metrics_of(folder))  # before making ``out``: a mistyped folder is not created
    out.mkdir(parents=True, exist_ok=True)
    summary = method_summary(seeds, reps=reps, seed=seed)
    pairs = improvements(seeds, reps=reps, seed=seed)
    result = verdict(summary, pairs)
    (out / "summary.md").write_text(markdown(summary, pairs, result, str(folder)))
    seeds_out = [{k: v for k, v in s.items() if k not in ("steps", "values")} for s in seeds]
    settings = dict(folder=str(folder), metric="train_return", goal_reward=GOAL_REWARD, reps=reps, bootstrap_seed=seed,
                    confidence=0.95)
    document = dict(settings=settings, methods=summary, improvements=pairs, verdict=result, seeds=seeds_out,
                    note="non-finite numbers (a median of 'never') are written as null")
    (out / "summary.json").write_text(json.dumps(_finite(document), indent=1))
    figure(out / "fig5_analysis.png", seeds, summary, analysis_title(folder, configs_of(folder), seeds))
    return dict(methods=summary, improvements=pairs, verdict=result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a results folder of the maze with opiq, opiq_no_ob and opiq_no_pc")
    parser.add_argument("--out", default=None, help="where to write (default: the folder itself)")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = parser.parse_args(argv)
    try:
        analyse(args.folder, args.out, reps=args.reps, seed=args.seed)
    except opiq_jax.ResultsError as e:  # a folder that does not exist or holds no results
        raise SystemExit(f"fig5_analysis: error: {e}") from None
    print((Path(args.out or args.folder) / "summary.md").read_text())


if __name__ == "__main__":
    main()
