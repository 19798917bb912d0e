"""How well the learned pseudo-count (``--count-features cfn``) of trained runs matches the exact counts it estimates.

The coin-flip network regresses the signs stored with the steps its replay holds, so what ``Ñ(s, a)`` estimates is
``N(s, a)``, the visits of each (cell, action) pair among the steps the replay holds. For each run of a results
folder trained with ``--count-features cfn`` on an environment whose cells can be listed (the chain, the maze), from
its newest checkpoint:

* ``Ñ(s, a)`` of every (cell, action) pair, as the agent reads it when acting (``opiq_jax.Results.cell_values``);
* ``N(s, a)``: the (cell, action) pairs of the steps in the run's replay, counted exactly.

Over the pairs the replay holds, per run: the rank correlation of ``Ñ`` and ``N``, the median and quartiles of
``Ñ / N``, and by ranges of ``N`` the median ratio; over the pairs it does not hold, the median ``Ñ``.

``python -m experiments.studies.learned_count_calibration --results DIR --out DIR`` writes ``calibration.json``,
``calibration.md``, ``calibration.png`` (``Ñ`` against ``N``, every run, log scales) and ``run_info.json``.

Over the run: each call also adds its checkpoint's step to ``history.json`` in ``--out`` (a second call at the same
step replaces it) and draws ``over_the_run.png`` and ``over_the_run.md``: each step's rank correlation and median
``Ñ / N``, the median over runs with their range. Calling it on a run that trains in time-boxed calls
(``opiq-jax train ... --max-minutes M``, the same command again goes on), after each call, follows the count as it
learns.

Reaches inside: the runs' replay (``Results.state().state.memory``) and the environment's cell ids (the folder's
own configuration, ``opiq_jax.host.plan.experiment_from_configs``, made into its environment by the registry), for
the exact counts the learned one is judged against; nothing else reads them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import tyro

import opiq_jax
from opiq_jax.host.plan import experiment_from_configs
from opiq_jax.registry.environments import environment_spec
from opiq_jax.reporting import portable, source_revision
from opiq_jax.reporting.stats import rank_correlation
from opiq_jax.store.files import atomic_write_text
from experiments.tools.command_line import command_line

RANGES = ((1, 1), (2, 9), (10, 99), (100, 999), (1000, None))
"""Ranges of the exact count over which the median ratio is reported."""


def range_label(low: int, high: int | None) -> str:
    """``1``, ``2-9``, ``>=1000``: how a range of counts is named."""
    return f"{low}" if high == low else (f"{low}-{high}" if high is not None else f">={low}")


def exact_counts(memory, cell_id, num_cells: int, num_actions: int) -> np.ndarray:
    """``int64[runs, cells, actions]``: the (cell, action) pairs of the steps each run's replay holds."""
    items, size = memory.items, np.asarray(memory.size)
    compact, action = np.asarray(items.compact), np.asarray(items.action)
    runs, capacity = action.shape
    table = np.zeros((runs, num_cells * num_actions), np.int64)
    for r in range(runs):
        held = np.arange(capacity) < size[r]  # a ring that has wrapped holds every slot
        cells = np.asarray(jax.vmap(cell_id)(jnp.asarray(compact[r][held])))
        np.add.at(table[r], cells * num_actions + action[r][held], 1)
    return table.reshape(runs, num_cells, num_actions)


def run_row(learned: np.ndarray, exact: np.ndarray) -> dict:
    """One run's calibration figures (``learned`` and ``exact``: ``[cells, actions]``)."""
    held = exact > 0
    ratio = learned[held] / exact[held]
    by_range = {}
    for low, high in RANGES:
        inside = held & (exact >= low) & (exact <= (high if high is not None else np.inf))
        by_range[range_label(low, high)] = float(np.median(learned[inside] / exact[inside])) if inside.any() else None
    return dict(steps_held=int(exact.sum()), pairs_held=int(held.sum()),
                rank_correlation=rank_correlation(learned[held], exact[held]),
                ratio_median=float(np.median(ratio)), ratio_q25=float(np.quantile(ratio, 0.25)),
                ratio_q75=float(np.quantile(ratio, 0.75)), ratio_by_count=by_range,
                unheld_pairs=int((~held).sum()),
                unheld_median=float(np.median(learned[~held])) if (~held).any() else None)


def table(rows: list[dict], folder: str, step: int) -> str:
    """The markdown report."""
    labels = [range_label(low, high) for low, high in RANGES]
    lines = [f"Learned count against the exact counts of the replay, `{folder}` at step {step:,}.", "",
             "| run | seed | pairs held | rank corr. | Ñ/N median (25-75 %) | " + " | ".join(f"N {x}" for x in labels)
             + " | Ñ of pairs not held (median) |",
             "|---|---|---|---|---|" + "---|" * len(labels) + "---|"]
    for r in rows:
        ranges = " | ".join("-" if r["ratio_by_count"][x] is None else f"{r['ratio_by_count'][x]:.2f}" for x in labels)
        unheld = "-" if r["unheld_median"] is None else f"{r['unheld_median']:.2f}"
        lines.append(f"| {r['run']} | {r['seed']} | {r['pairs_held']} | {r['rank_correlation']:.3f} | "
                     f"{r['ratio_median']:.2f} ({r['ratio_q25']:.2f}-{r['ratio_q75']:.2f}) | {ranges} | {unheld} |")
    corr = np.array([r["rank_correlation"] for r in rows])
    ratio = np.array([r["ratio_median"] for r in rows])
    lines += ["", f"Across runs: rank correlation median {np.median(corr):.3f} (lowest {corr.min():.3f}); median "
              f"Ñ/N {np.median(ratio):.2f} (runs' medians from {ratio.min():.2f} to {ratio.max():.2f}). A ratio "
              "below 1 is an under-count (more optimism than the exact count gives), above 1 an over-count."]
    return "\n".join(lines)


def draw(path: Path, learned: np.ndarray, exact: np.ndarray, title: str) -> None:
    """``Ñ`` against ``N`` for every held pair of every run, log scales, with the line ``Ñ = N``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    held = exact > 0
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(exact[held], learned[held], s=3, alpha=0.25, color="tab:blue", linewidths=0)
    top = max(float(exact.max()), float(learned[held].max()))
    ax.plot([1, top], [1, top], color="black", lw=1, label="Ñ = N")
    ax.set(xscale="log", yscale="log", xlabel="N(s, a): visits held in the replay", ylabel="Ñ(s, a): learned count",
           title=title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_history(path: Path, folder: str) -> list[dict]:
    """The points of ``history.json`` so far; refused in one line where they follow another results folder."""
    points = json.loads(path.read_text())["points"] if path.exists() else []
    others = sorted({p["results"] for p in points} - {folder})
    if others:
        raise SystemExit(f"learned_count_calibration: error: {path.parent} follows {others[0]}, not {folder}; give "
                         "this run another --out")
    return points


def add_to_history(path: Path, points: list[dict], step: int, folder: str, rows: list[dict]) -> list[dict]:
    """``points`` with this call's (replacing one at the same step), sorted by step; saved to ``path``."""
    point = dict(step=step, results=folder, rank_correlation=[r["rank_correlation"] for r in rows],
                 ratio_median=[r["ratio_median"] for r in rows])
    points = sorted([p for p in points if p["step"] != step] + [point], key=lambda p: p["step"])
    atomic_write_text(path, json.dumps(dict(points=points), indent=1))
    return points


def history_table(points: list[dict]) -> str:
    """Each step's figures over the runs."""
    lines = ["The learned count against the exact counts of the replay, at each checkpoint judged (the median over "
             "runs, with the lowest and highest run).", "",
             "| step | runs | rank correlation | Ñ/N median |", "|---|---|---|---|"]
    for p in points:
        corr, ratio = np.array(p["rank_correlation"]), np.array(p["ratio_median"])
        lines.append(f"| {p['step']:,} | {len(corr)} | {np.median(corr):.3f} ({corr.min():.3f} to {corr.max():.3f}) | "
                     f"{np.median(ratio):.2f} ({ratio.min():.2f} to {ratio.max():.2f}) |")
    return "\n".join(lines)


def draw_history(path: Path, points: list[dict], title: str) -> None:
    """Rank correlation and median ``Ñ / N`` against the step: the median over runs and the runs' range."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["step"] for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "rank_correlation", "rank correlation of Ñ and N"),
                           (axes[1], "ratio_median", "median Ñ / N (1: calibrated)")):
        values = [np.array(p[key]) for p in points]
        ax.plot(steps, [np.median(v) for v in values], marker="o", color="tab:blue", label="median over runs")
        ax.fill_between(steps, [v.min() for v in values], [v.max() for v in values], color="tab:blue", alpha=0.2,
                        label="lowest to highest run")
        ax.set(xlabel="environment steps", ylabel=label)
    axes[1].axhline(1.0, color="black", lw=1)
    axes[1].set_yscale("log")
    axes[0].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@dataclass
class Args:
    results: Path
    """A results folder of one program trained with --count-features cfn on the chain or the maze."""
    out: Path = Path("results/learned-count-calibration")
    """Where calibration.json, calibration.md, calibration.png and run_info.json go."""


def main(argv: list[str] | None = None) -> list[dict]:
    args = tyro.cli(Args, args=argv)
    started = time.perf_counter()
    history = read_history(args.out / "history.json", portable(str(args.results)))  # before the work
    results = opiq_jax.load(args.results)
    static = results.config["static"]
    if static.get("count_features") != "cfn":
        raise SystemExit(f"{args.results}: trained with count_features {static.get('count_features')!r}, not cfn")
    final = results.state()
    learned = results.cell_values()["counts"]
    saved = experiment_from_configs(args.results / final.program).static  # every option the runs trained with
    env = environment_spec(saved.env).make(saved)
    exact = exact_counts(final.state.memory, env.cell_id, learned.shape[1], learned.shape[2])
    rows = [dict(run=i, seed=run["seed"], method=run["method"], **run_row(learned[i], exact[i]))
            for i, run in enumerate(final.runs)]
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(rows, portable(str(args.results)), final.step)
    atomic_write_text(args.out / "calibration.json", json.dumps(dict(step=final.step, runs=rows), indent=1))
    atomic_write_text(args.out / "calibration.md", text + "\n")
    draw(args.out / "calibration.png", learned, exact, f"{static['env']}: learned against exact counts, step "
         f"{final.step:,}, {len(rows)} runs")
    points = add_to_history(args.out / "history.json", history, final.step, portable(str(args.results)), rows)
    atomic_write_text(args.out / "over_the_run.md", history_table(points) + "\n")
    draw_history(args.out / "over_the_run.png", points, f"{static['env']}: the learned count over the run")
    command = command_line("experiments.studies.learned_count_calibration", argv)
    atomic_write_text(args.out / "run_info.json", json.dumps(dict(
        command=command, seconds=round(time.perf_counter() - started, 1), **source_revision(),
        settings={k: portable(str(v)) for k, v in dataclasses.asdict(args).items()}), indent=1))
    print(text)
    return rows


if __name__ == "__main__":
    main()
