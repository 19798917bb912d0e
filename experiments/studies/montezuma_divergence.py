"""Montezuma's divergence, cell against cell: the learning diagnostics of short OPIQ runs that differ in one setting.

Reads a folder of ``experiments.tools.timeboxed_run`` results, one subfolder per cell (``float32``, ``bfloat16``,
``lr0.00025``, ...), each holding ``config.json``, ``metrics.csv`` and ``timeboxed.json``; writes into it
``summary.md`` (per cell and seed: the peak and last |Q| and TD error, the last loss, rooms, maximum return, the
largest sketch over-count, the unknown-return share, and the call's rate) and ``divergence.png`` (|Q|, the TD error
and the loss over training, a line per seed). With rewards clipped to [-1, 1] and intrinsic rewards of at most
beta = 0.1 per step, no return exceeds 1.1 / (1 - 0.99) = 110: a |Q| above that is the learner out of bounds, not a
value it could be learning.

Run: ``python -m experiments.studies.montezuma_divergence docs/results/montezuma-divergence``.

Reaches inside: opiq_jax.runs.results_folder, for the metrics, and opiq_jax.reporting.stats, for the permutation test.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from opiq_jax.reporting.stats import permutation_p
from opiq_jax.runs.results_folder import read_metrics

BOUND = 110.0
METHOD_NAMES = {"opiq": "OPIQ", "dqn_pc": "DQN + PC", "opiq_no_ob": "OPIQ w/o OB"}
PANELS = {"q_abs_max": "largest |Q|", "td_error_max": "largest |TD error|", "loss": "mean TD loss"}


@dataclass
class Args:
    folder: tyro.conf.Positional[Path]
    """A folder of timeboxed_run results, one subfolder per cell."""
    reference: tuple[Path, ...] = ()
    """Cells of another results folder to compare with, listed first (the p-values are against the first
    setting), named by their path from ``folder``."""


def cell_series(folder: Path) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """seed -> metric -> (steps, values) of one cell."""
    points: dict[int, dict[str, list[tuple[int, float]]]] = {}
    for row in read_metrics(folder):
        pairs = points.setdefault(int(row["seed"]), {}).setdefault(row["metric"], [])
        pairs.append((int(row["step"]), float(row["value"])))
    series = {}
    for seed, metrics in points.items():
        series[seed] = {}
        for metric, pairs in metrics.items():
            steps, values = zip(*sorted(pairs))
            series[seed][metric] = (np.array(steps), np.array(values))
    return series


def cell_setting(folder: Path) -> str:
    """What sets the cell apart, from its config: precision, learning rate, beta, environments per run (not the
    base seed, so that cells run under different base seeds share a setting)."""
    config = json.loads((folder / "config.json").read_text())
    static, run = config["static"], config["runs"][0]
    hp = run["hparams"]
    # folders written before --network-init have flax's initialisation
    return (f"{METHOD_NAMES.get(run['method'], run['method'])}, {static['precision']}, lr {hp['lr']:g}, "
            f"β {hp['beta']:g}, {static['envs_per_run']} environments per run, "
            f"{static.get('network_init', 'flax')} init")


def method_of(setting: str) -> str:
    """The method's name that :func:`cell_setting` puts first."""
    return setting.split(", ", 1)[0]


def one_method(folder: Path) -> bool:
    """Whether ``folder``'s runs all train one method, as a cell's do: its series are keyed by seed, which the runs of
    several methods would share (a program of several methods, timed beside the cells, is no cell)."""
    runs = json.loads((folder / "config.json").read_text())["runs"]
    return len({run["method"] for run in runs}) == 1


def base_seed(folder: Path) -> int:
    """The cell's base seed (``--seed``): runs 0 and 1 under base seed 1 are other runs than under base seed 0."""
    return int(json.loads((folder / "config.json").read_text())["seed"])


def last_value(steps: np.ndarray, values: np.ndarray, at: int) -> float:
    """The metric's value at the last logged step no later than ``at``."""
    return float(values[np.searchsorted(steps, at, side="right") - 1])


def runs_by_setting(cells: dict[str, Path]) -> dict[str, list[dict[str, tuple[np.ndarray, np.ndarray]]]]:
    """Every run's series, pooled by setting (cells under other base seeds share a setting)."""
    runs: dict[str, list[dict[str, tuple[np.ndarray, np.ndarray]]]] = {}
    for folder in cells.values():
        runs.setdefault(cell_setting(folder), []).extend(cell_series(folder).values())
    return runs


def reached(group: list[dict]) -> int:
    """The last step every run of ``group`` reached."""
    return min(int(m["loss"][0][-1]) for m in group)


def comparison_steps(runs: dict[str, list[dict]]) -> list[int]:
    """The last step every run reached, then the last step that every run of at least two settings reached."""
    reached_by = {setting: reached(group) for setting, group in runs.items()}
    common = min(reached_by.values())
    further = sorted({step for step in reached_by.values() if step > common
                      and sum(r >= step for r in reached_by.values()) >= 2})
    return [common, *further[-1:]]


def setting_rows(runs: dict[str, list[dict]], at: int, where: str) -> list[str]:
    """The settings whose runs all reached ``at``, compared there: per-run rooms, maximum return and peak |Q| up to
    that step, the runs out of bounds, and p-values against the first setting of the same method (a method against
    another would mix the method with the setting): the permutation test of rooms and of return, Fisher's exact test
    of the runs out of bounds, and the exact Mann-Whitney test of the peaks."""
    from scipy.stats import fisher_exact, mannwhitneyu

    runs = {s: group for s, group in runs.items() if reached(group) >= at}
    scores = {setting: {metric: np.array([last_value(*m[metric], at) for m in group])
                        for metric in ("rooms_visited", "max_return")} for setting, group in runs.items()}
    peaks = {setting: np.array([float(np.nanmax(m["q_abs_max"][1][m["q_abs_max"][0] <= at])) for m in group])
             for setting, group in runs.items()}
    out = {setting: int((p > BOUND).sum()) for setting, p in peaks.items()}
    firsts = {}
    for setting in scores:
        firsts.setdefault(method_of(setting), setting)

    def against_first(setting: str) -> str:
        first = firsts[method_of(setting)]
        if setting == first:
            return ""
        table = [[out[setting], len(peaks[setting]) - out[setting]], [out[first], len(peaks[first]) - out[first]]]
        tests = [permutation_p(scores[setting][k], scores[first][k]) for k in ("rooms_visited", "max_return")]
        tests += [fisher_exact(table)[1], mannwhitneyu(peaks[setting], peaks[first], method="exact").pvalue]
        return " / ".join(f"{p:.2f}" for p in tests)

    lines = [f"At step {at:,} ({where}):", "",
             "| setting | runs | rooms per run (median) | max return per run (median) | peak \\|Q\\| per run | "
             "out of bounds | p against the method's first setting (rooms / return / out of bounds / peaks) |",
             "|---|---|---|---|---|---|---|"]
    for setting, s in scores.items():
        lines.append(f"| {setting} | {len(peaks[setting])} | {', '.join(f'{v:.0f}' for v in s['rooms_visited'])} "
                     f"({np.median(s['rooms_visited']):g}) | {', '.join(f'{v:.0f}' for v in s['max_return'])} "
                     f"({np.median(s['max_return']):g}) | {', '.join(f'{v:.3g}' for v in peaks[setting])} | "
                     f"{out[setting]} of {len(peaks[setting])} | {against_first(setting)} |")
    return lines


def call_record(folder: Path) -> dict:
    """The record of the cell's (last) call, with its rate: ``timeboxed.json`` for a time-boxed run, else the
    training loop's own ``run_info.json`` (a run resumed over several calls)."""
    timeboxed = folder / "timeboxed.json"
    return json.loads((timeboxed if timeboxed.exists() else folder / "run_info.json").read_text())


def device_of(record: dict) -> str:
    """The card a record names: the loop's ``device``, or the first of a time-boxed run's ``gpus``."""
    gpus = record.get("gpus") or [record.get("device", "an unrecorded device")]
    return str(gpus[0]).split(",")[0]


def summary_rows(cells: dict[str, Path]) -> list[str]:
    lines = ["| cell | setting | seed | steps | peak / last |Q| | peak / last |TD error| | last loss | rooms | "
             "max return | max sketch over-count | unknown returns (median) | env steps/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, folder in cells.items():
        record = call_record(folder)
        for seed, m in cell_series(folder).items():
            q, td = m["q_abs_max"][1], m["td_error_max"][1]
            seed = f"{seed} (base {base_seed(folder)})" if base_seed(folder) else seed
            flag = " **out of bounds**" if np.nanmax(q) > BOUND else ""
            lines.append(
                f"| {name} | {cell_setting(folder)} | {seed} | {int(m['loss'][0][-1]):,} | {np.nanmax(q):.3g} / "
                f"{q[-1]:.3g}{flag} | {np.nanmax(td):.3g} / {td[-1]:.3g} | {m['loss'][1][-1]:.3g} | "
                f"{m['rooms_visited'][1][-1]:.0f} | {m['max_return'][1][-1]:.0f} | "
                f"{np.nanmax(m['sketch_overcount'][1]):.3g} | {np.nanmedian(m['unknown_return_share'][1]):.3g} | "
                f"{record['env_steps_per_second']:,.0f} (2 runs) |")
    return lines


def draw(cells: dict[str, Path], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(PANELS), figsize=(15, 4.2))
    colours: dict[str, str] = {}  # one colour per setting, one line style per run within it
    drawn: dict[str, int] = {}
    for name, folder in cells.items():
        setting = cell_setting(folder)
        colour = colours.setdefault(setting, f"C{len(colours) % 10}")
        for seed, m in cell_series(folder).items():
            style = ("-", "--", ":", "-.")[drawn.get(setting, 0) % 4]
            drawn[setting] = drawn.get(setting, 0) + 1
            for ax, metric in zip(axes, PANELS):
                steps, values = m[metric]
                ax.plot(steps, values, color=colour, ls=style, lw=1.4, label=f"{name}, seed {seed}")
    for ax, (metric, label) in zip(axes, PANELS.items()):
        ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("environment steps")
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
        if metric == "q_abs_max":
            ax.axhline(BOUND, color="0.3", ls=(0, (1, 3)), lw=1, label=f"largest possible return ({BOUND:g})")
    handles, labels = axes[0].get_legend_handles_labels()  # the first panel's: every line and the bound
    axes[-1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    devices = sorted({device_of(call_record(folder)) for folder in cells.values()})
    fig.suptitle(f"Montezuma's Revenge ({', '.join(devices)}): the learner's diagnostics per cell", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if missing := [str(p) for p in (args.folder, *args.reference) if not p.is_dir()]:
        raise SystemExit(f"no such folder: {', '.join(missing)}")
    cells = {os.path.relpath(p, args.folder): p for p in args.reference}
    found = [p for p in sorted(args.folder.iterdir()) if (p / "metrics.csv").exists()]
    for other in [p for p in found if not one_method(p)]:
        print(f"{other.name}: not a cell (its runs train several methods), left out")
    cells |= {p.name: p for p in found if one_method(p)}
    if len(cells) == len(args.reference):
        raise SystemExit(f"{args.folder} holds no cell (a subfolder with metrics.csv, its runs of one method)")
    runs = runs_by_setting(cells)
    steps = comparison_steps(runs)
    wheres = ["the last every run reached", "the settings whose runs all reached it"]
    comparisons = [line for at, where in zip(steps, wheres) for line in (*setting_rows(runs, at, where), "")]
    text = [f"# {args.folder.name}: the learner's diagnostics per cell", "", *summary_rows(cells), "", *comparisons]
    (args.folder / "summary.md").write_text("\n".join(text), encoding="utf-8")
    draw(cells, args.folder / "divergence.png")
    print("\n".join(text))


if __name__ == "__main__":
    main()
