"""The Montezuma headline's tables: every method's rooms, episode return and maximum return at the last step all
methods share and at each method's own last step (median with 25-75 %, IQM with its 95 % CI), and the projected
cost of the paper's whole comparison from the rates the runs measured.

Reads a folder of ``experiments.tools.timeboxed_run`` results (subfolders holding ``config.json``, ``metrics.csv`` and
``timeboxed.json``) and writes ``summary.md`` into it. Run:
``python -m experiments.paper.montezuma_headline docs/results/montezuma-5m``.

Beside the tables, OPIQ against each other method per metric, at the last common step and at the last step both
reached: the medians and the exact two-sided permutation p-value of the difference of means (4 seeds against 4:
70 relabellings, the smallest p 2/70 = 0.029). The verdict says what that allows. The paper states its
ordering at the end of training (12.5M steps), so at any shorter length no claim of the paper is tested
("inconclusive: the paper makes no claim at N steps", with the ordering seen and its p); at 12.5M steps a
difference with p < 0.05 in the paper's direction reproduces the claim, one in the other direction differs, and
anything else is inconclusive.

The projection's model, said in the table: the paper's five methods x 4 seeds x 12.5M steps run as the trainer
groups them, OPIQ, OPIQ w/o OB and DQN + PC as one program of 12 runs and DQN + RND and BSP as one of 4 runs
each. The 12-run program is taken at the rate measured with 8 runs of 32 environments (256 environments, every
core of the 4-GPU host), each 4-run program at the rate measured with 4 runs of 32 (128 environments). RND's and
BSP's networks add learner work that was not measured at this scale, so their times are lower bounds. An 8-GPU
host is assumed to keep the 4-GPU host's rate per GPU (twice the cores, a pool per GPU); it was not measured.

Uses only the public API: ``opiq_jax.read_metrics`` and ``opiq_jax.reporting``, for the metrics table, its curves and
their IQM confidence intervals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from opiq_jax import read_metrics
from opiq_jax.reporting import curves, paper_name, paper_order, permutation_p, summarise

METRICS = {"rooms_visited": "distinct rooms visited", "train_return": "episode return",
           "max_return": "maximum episode return"}
PAPER_STEPS, PAPER_SEEDS = 12_500_000, 4
SIGNIFICANT = 0.05
PROGRAMS = {"OPIQ, OPIQ w/o OB, DQN + PC": (12, 8), "DQN + RND": (4, 4), "BSP": (4, 4)}
"""Each program of the paper's comparison: its runs, and the runs of the measured layout whose rate it takes."""


@dataclass
class Args:
    folder: tyro.conf.Positional[Path]
    """A folder of timeboxed_run results (one subfolder per call)."""


def metric_table(metric_curves: dict[str, dict[str, np.ndarray]], common: int) -> list[str]:
    """Per method (its :func:`opiq_jax.reporting.plotting.curves`), a row at the ``common`` step and one at its own
    last."""
    lines = ["| method | step | seeds | median (25 %, 75 %) | IQM [95 % CI] | per seed |", "|---|---|---|---|---|---|"]
    for method in paper_order(list(metric_curves)):
        curve = metric_curves[method]
        for step in dict.fromkeys((common, int(curve["steps"][-1]))):
            v = curve["values"][:, list(curve["steps"]).index(step)]
            s = summarise(v)
            lines.append(f"| {paper_name(method)} | {step:,} | {s['n']} | {s['median']:.4g} ({s['q25']:.4g}, "
                         f"{s['q75']:.4g}) | {s['iqm']:.4g} [{s['iqm_low']:.4g}, {s['iqm_high']:.4g}] | "
                         f"{', '.join(f'{x:.4g}' for x in v)} |")
    return lines


SIMILAR = frozenset({"opiq_no_ob"})
"""Methods the paper finds similar to OPIQ (the appendix: OPIQ w/o OB, with a higher variance); OPIQ is ahead of
every other one."""


def verdict(opiq: np.ndarray, other: np.ndarray, method: str, step: int, p: float) -> str:
    """What the evidence allows of the paper's claim about OPIQ against ``method`` (module docstring)."""
    lead = np.median(opiq) - np.median(other)
    seen = "level" if lead == 0 else "OPIQ ahead" if lead > 0 else "OPIQ behind"
    if step < PAPER_STEPS:
        return f"inconclusive: the paper makes no claim at {step:,} steps ({seen}, p = {p:.2g})"
    if method in SIMILAR:
        return f"differs: {seen}" if p < SIGNIFICANT else f"consistent with similar (p = {p:.2g})"
    if p < SIGNIFICANT:
        return "reproduced" if lead > 0 else "differs: OPIQ behind"
    return f"inconclusive ({seen}, p = {p:.2g})"


def comparison_table(by_metric: dict[str, dict[str, dict[str, np.ndarray]]], common: int) -> list[str]:
    """OPIQ against each other method, per metric, at the common step and at the last step both reached."""
    lines = ["| metric | against | step | OPIQ median | its median | permutation p | verdict |",
             "|---|---|---|---|---|---|---|"]
    for metric, metric_curves in by_metric.items():
        if "opiq" not in metric_curves:
            continue
        ours = metric_curves["opiq"]
        for method in paper_order([m for m in metric_curves if m != "opiq"]):
            theirs = metric_curves[method]
            last = min(int(ours["steps"][-1]), int(theirs["steps"][-1]))
            for step in dict.fromkeys((common, last)):
                x = ours["values"][:, list(ours["steps"]).index(step)]
                y = theirs["values"][:, list(theirs["steps"]).index(step)]
                p = permutation_p(x, y)
                lines.append(f"| {metric} | {paper_name(method)} | {step:,} | {np.median(x):.4g} | {np.median(y):.4g} "
                             f"| {p:.2g} | {verdict(x, y, method, step, p)} |")
    return lines


def measured_rates(folder: Path) -> dict[int, dict]:
    """runs -> the timeboxed record of the call that trained that many runs (its rate, GPUs, wall-clock)."""
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*/timeboxed.json"))]
    return {r["runs"]: r for r in records if r.get("env_steps_per_second")}


def projection_lines(rates: dict[int, dict]) -> list[str]:
    lines = ["| program | runs | measured layout's rate (env steps/s) | 4-GPU host (h) | 8-GPU host, assumed (h) |",
             "|---|---|---|---|---|"]
    total = 0.0
    for name, (runs, measured) in PROGRAMS.items():
        rate = rates[measured]["env_steps_per_second"]
        hours = runs * PAPER_STEPS / rate / 3600
        total += hours
        lines.append(f"| {name} | {runs} | {rate:,.0f} ({measured} runs x 32 environments) | {hours:.2f} | "
                     f"{hours / 2:.2f} |")
    lines.append(f"| all, one after another | {sum(r for r, _ in PROGRAMS.values())} | | **{total:.2f}** | "
                 f"**{total / 2:.2f}** |")
    return lines


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    rows = read_metrics(args.folder)
    by_metric = {metric: curves(rows, metric) for metric in METRICS}
    common = min(int(c["steps"][-1]) for metric_curves in by_metric.values() for c in metric_curves.values())
    text = [f"# {args.folder.name}: the last common step ({common:,}) and each method's last step", ""]
    for metric, label in METRICS.items():
        text += [f"## {label} (`{metric}`)", "", *metric_table(by_metric[metric], common), ""]
    text += ["## OPIQ against each method (exact permutation test of the difference of means)", "",
             *comparison_table(by_metric, common), ""]
    rates = measured_rates(args.folder)
    if all(measured in rates for _, measured in PROGRAMS.values()):
        gpus = sorted({f"{len(r['gpus'])} x {r['gpus'][0]}" for r in rates.values() if r["gpus"]})
        text += [f"## The paper's comparison, projected ({PAPER_SEEDS} seeds x {PAPER_STEPS:,} steps, 5 methods; "
                 f"measured on {'; '.join(gpus)})", "", *projection_lines(rates), ""]
    (args.folder / "summary.md").write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))


if __name__ == "__main__":
    main()
