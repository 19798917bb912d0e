"""DeepSea scaling: how many episodes OPIQ, epsilon-greedy DQN and DQN + PC need as the sea grows.

gymnax's DeepSea-bsuite (``deterministic=True``, its default): an N x N grid, one-hot observation of
the agent's cell, start top-left, every step moves one row down and one column left or right, so an
episode is exactly N steps. Which action moves right is drawn per cell (each run draws its own
mapping from its seed: see ``envs/gymnax_adapter.py``). Moving right costs 0.01 / N; moving right
from the bottom-right cell pays +1 (the treasure). An episode's return is therefore 0.99 when it
finds the treasure (it must move right on all N steps) and at most 0 otherwise, so we say
**found** when a return exceeds ``FOUND = 0.5``. A uniformly random policy finds it with
probability 2^-N per episode.

For every size N (one compiled program per size: the observation's shape changes with N; all
methods x seeds of a size are one vmapped program) and every run we measure

* **episodes until the treasure is first found**: the first logged step at which the run's largest
  training-episode return exceeds ``FOUND``, divided by N;
* **episodes until the greedy policy finds it reliably**: the first logged step from which the
  greedy test episode (plain Q, no optimism, no epsilon) finds the treasure at *every* later log
  point up to the budget, divided by N.

Both are resolved to ``log_episodes`` episodes (the metrics are logged once per chunk). A run that
never succeeds within its size's budget is censored: drawn at the budget with an open marker, and
counted as ``> budget`` in the medians and quartiles. These are empirical quantiles (inverted CDF: a
censored value is never interpolated, and with an even number of seeds the median is the lower of
the two middle runs).

The budget of size N is ``budget_per_n * N`` episodes (``budget_per_n * N**2`` environment steps per
run), rounded up to a multiple of ``log_episodes``: with the defaults 10/20/30/40 get
1,000/2,000/3,000/4,000 episodes (10k/40k/90k/160k steps per run, 300k in all).

Hyperparameters are the paper's chain settings for each method (``opiq_jax.registry.methods``; a gymnax
environment gets the chain's): DQN decays epsilon from 1 to 0.01 over 100 steps, DQN + PC and
OPIQ keep epsilon at 0.01. Counts are the paper's 32-bit SimHash of the (one-hot) observation; with
a one-hot input each cell's code is the sign pattern of one column of the Gaussian projection, so
two cells collide with probability 2^-32 and SimHash counting is, in effect, exact. ``--count-features
exact`` counts the adapter's cell id (row, column) instead, with no hashing at all.

Writes into ``--out``: ``size_<N>/`` (each a resumable results folder: ``config.json``,
``metrics.csv``, ``checkpoint.msgpack``), ``deepsea_scaling.png``, ``deepsea_scaling.md`` and
``deepsea_scaling.csv`` (the table), ``deepsea_runs.csv`` (every run's two numbers) and
``run_info.json`` (device, wall-clock per size, command).

Run: ``python -m experiments.studies.deepsea --out results/deepsea`` (then again with the same arguments to
resume an interrupted or time-boxed run; ``--max-minutes`` stops cleanly between chunks).

``--plot-only`` redraws the figure and the tables from the size folders in ``--out``, or, where none is there (a
committed result keeps only the tables), from ``deepsea_runs.csv``: every run's two numbers, all the figure needs.

Reaches inside: opiq_jax.reporting.plotting, for the paper's method names and the methods' (colour, line style), as
every figure has them.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

if not __package__:  # run by path (python experiments/studies/deepsea.py): import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import matplotlib
import numpy as np
import tyro

import opiq_jax
from experiments.tools.command_line import command_line
from opiq_jax import train
from opiq_jax.common.config import StaticConfig
from opiq_jax.reporting import source_revision
from opiq_jax.reporting.plotting import group_styles, line_zorder, paper_name

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ENV = "gymnax:DeepSea-bsuite"
FOUND = 0.5  # an episode return above this found the treasure (0.99 if found, <= 0 otherwise)
METHOD_MARKERS = {"opiq": "o", "dqn": "s", "dqn_pc": "^"}
"""A marker per method besides its (colour, line style): at the budget, methods that never succeeded sit on one
another."""
RUNS_CSV = "deepsea_runs.csv"
PRECISION = StaticConfig().execution.precision
"""The runs' precision: the script sets none, so every run trains at the default (float32)."""


@dataclass
class Args:
    out: Path = Path("results/deepsea")
    """Results folder (one resumable subfolder per size; rerun the same command to resume)."""
    sizes: tuple[int, ...] = (10, 20, 30, 40)
    """DeepSea sizes N (the grid is N x N and an episode N steps)."""
    methods: tuple[str, ...] = ("opiq", "dqn", "dqn_pc")
    """Methods (any of opiq_jax.registry.methods; each with the paper's chain setting)."""
    seeds: int = 8
    """Independent runs per method and size (seed i draws run i's network, SimHash matrix and action mapping)."""
    budget_per_n: int = 100
    """Episode budget of size N: budget_per_n * N episodes (= budget_per_n * N^2 steps), rounded up to a
    multiple of log_episodes."""
    log_episodes: int = 25
    """Episodes per logged chunk (the resolution of both measures): log_every = log_episodes * N steps."""
    count_features: Literal["simhash", "exact"] = "simhash"
    """simhash: the paper's 32-bit SimHash of the one-hot observation (in effect exact on DeepSea);
    exact: the adapter's cell id (row * N + column)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of the MLP Q-network (the same network for every method)."""
    buffer_size: int = 10_000
    """Replay capacity per run (environment steps)."""
    seed: int = 0
    """Base seed of every size's experiment."""
    progress: bool = True
    """Show a progress bar per size."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint written) after about this many minutes in all; rerun to resume."""
    checkpoint_minutes: float = 2.0
    """Minutes between checkpoints within a size."""
    plot_only: bool = False
    """Only redraw the figure and tables from the results already in --out (the size folders, or, without them,
    deepsea_runs.csv)."""


def budget_episodes(args: Args, size: int) -> int:
    """The episode budget of ``size``: ``budget_per_n * size`` rounded up to a multiple of ``log_episodes``."""
    return int(math.ceil(args.budget_per_n * size / args.log_episodes) * args.log_episodes)


def size_options(args: Args, size: int) -> dict[str, Any]:
    """The options of one size's experiment (all methods x seeds of it train as one compiled program)."""
    return dict(env_arg={"size": size}, steps=budget_episodes(args, size) * size, log_every=args.log_episodes * size,
                buffer_size=args.buffer_size, hidden=tuple(args.hidden), count_features=args.count_features)


def is_done(folder: Path) -> bool:
    """Whether ``folder`` holds a finished size."""
    return (folder / "metrics.csv").exists() and opiq_jax.load(folder).finished


def size_folder(out: Path, size: int) -> Path:
    return out / f"size_{size}"


# ------------------------------------------------------------------------------------ measures


def run_measures(rows: list[dict], size: int) -> list[dict]:
    """Per run: episodes until the treasure was first found and until the greedy policy finds it at
    every later log point (``inf`` when never within the budget)."""
    by_run: dict[int, dict] = {}
    for r in rows:
        if r["metric"] not in ("max_return", "test_return"):
            continue
        entry = by_run.setdefault(r["run"], {"method": r["method"], "seed": r["seed"], "max_return": {},
                                             "test_return": {}})
        entry[r["metric"]][r["step"]] = r["value"]
    measures = []
    for run, entry in sorted(by_run.items()):
        steps = sorted(entry["test_return"])
        found = [s for s in steps if entry["max_return"].get(s, math.nan) > FOUND]  # NaN (no episode yet) > x is False
        greedy_ok = [entry["test_return"][s] > FOUND for s in steps]
        reliable = math.inf
        for i in range(len(steps) - 1, -1, -1):  # walk back while the greedy policy keeps finding it
            if not greedy_ok[i]:
                break
            reliable = steps[i] / size
        measures.append(dict(
            size=size, run=run, method=entry["method"], seed=entry["seed"],
            first_found=found[0] / size if found else math.inf, reliable=reliable, budget=steps[-1] / size,
        ))
    return measures


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """Empirical 25/50/75% quantiles (no interpolation, so a censored ``inf`` never mixes with a number)."""
    q = np.quantile(np.asarray(values, float), [0.25, 0.5, 0.75], method="inverted_cdf")
    return float(q[0]), float(q[1]), float(q[2])


def summarise(measures: list[dict], methods: tuple[str, ...]) -> list[dict]:
    table = []
    for size in sorted({m["size"] for m in measures}):
        for method in methods:
            runs = [m for m in measures if m["size"] == size and m["method"] == method]
            if not runs:
                continue
            row = dict(size=size, method=method, seeds=len(runs), budget_episodes=runs[0]["budget"])
            for key in ("first_found", "reliable"):
                values = [r[key] for r in runs]
                q25, q50, q75 = quantiles(values)
                row.update({f"{key}_runs": int(np.isfinite(values).sum()), f"{key}_q25": q25,
                            f"{key}_median": q50, f"{key}_q75": q75})
            table.append(row)
    return table


def _fmt(value: float, budget: float) -> str:
    return f"> {budget:,.0f}" if not math.isfinite(value) else f"{value:,.0f}"


def markdown(table: list[dict]) -> str:
    lines = [
        "| N | method | budget (episodes) | found: runs | found: median episodes (25%, 75%) "
        "| greedy reliable: runs | greedy reliable: median episodes (25%, 75%) |",
        "|---:|---|---:|---:|---|---:|---|",
    ]
    for r in table:
        b = r["budget_episodes"]
        cells = []
        for key in ("first_found", "reliable"):
            cells += [f"{r[f'{key}_runs']}/{r['seeds']}",
                      f"{_fmt(r[f'{key}_median'], b)} ({_fmt(r[f'{key}_q25'], b)}, {_fmt(r[f'{key}_q75'], b)})"]
        lines.append(f"| {r['size']} | {paper_name(r['method'])} | {b:,.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in r.items()})


def figure(path: Path, measures: list[dict], table: list[dict], methods: tuple[str, ...], title: str) -> Path:
    """Two log-scale panels (first found, greedy reliable): median and quartiles per method against
    N, every run as a small dot; censored runs and censored medians at the budget, open markers."""
    sizes = sorted({m["size"] for m in measures})
    budgets = {r["size"]: r["budget_episodes"] for r in table}
    fig, axes = plt.subplots(1, 2, figsize=(10, 5.0), sharey=True)
    offsets = {m: (i - (len(methods) - 1) / 2) * 0.01 for i, m in enumerate(methods)}  # dex, to unclutter
    for ax, key, name in zip(axes, ("first_found", "reliable"),
                             ("episodes until the treasure is first found",
                              "episodes until the greedy policy finds it reliably")):
        # the budget wide, pale and solid: methods that never succeed lie on it, their own dashes drawn over it
        ax.plot(sizes, [budgets[s] for s in sizes], color="0.82", ls="-", lw=5, zorder=1, label="budget")
        grid = np.linspace(min(sizes), max(sizes), 50)
        ax.plot(grid, 2.0 ** grid, color="0.3", ls=":", lw=1, zorder=1, label="random policy: 2^N")
        for method, (color, style) in zip(methods, group_styles(len(methods))):
            marker = METHOD_MARKERS.get(method, "D")
            rows = [r for r in table if r["method"] == method]
            if not rows:
                continue
            xs = np.array([r["size"] for r in rows], float) * 10 ** offsets[method]
            cap = lambda v, s: min(v, budgets[s])  # noqa: E731
            med = np.array([cap(r[f"{key}_median"], r["size"]) for r in rows])
            lo = np.array([cap(r[f"{key}_q25"], r["size"]) for r in rows])
            hi = np.array([cap(r[f"{key}_q75"], r["size"]) for r in rows])
            censored = np.array([not math.isfinite(r[f"{key}_median"]) for r in rows])
            ax.errorbar(xs, med, yerr=[med - lo, hi - med], color=color, lw=1.2, capsize=3, ls=style,
                        label=paper_name(method), zorder=line_zorder(style))
            ax.scatter(xs[~censored], med[~censored], color=color, marker=marker, s=45, zorder=3)
            ax.scatter(xs[censored], med[censored], facecolors="white", edgecolors=color, marker=marker, s=45, zorder=3)
            runs = [m for m in measures if m["method"] == method]
            rx = np.array([m["size"] for m in runs], float) * 10 ** offsets[method]
            ry = np.array([min(m[key], budgets[m["size"]]) for m in runs])
            never = np.array([not math.isfinite(m[key]) for m in runs])
            ax.scatter(rx[~never], ry[~never], color=color, marker=".", s=10, alpha=0.5, zorder=2)
            ax.scatter(rx[never], ry[never], facecolors="none", edgecolors=color, marker=marker, s=14, alpha=0.6,
                       lw=0.7, zorder=2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("DeepSea size N")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3, which="major")
        ax.set_ylim(top=2 * max(budgets.values()))
    axes[0].set_ylabel("episodes (median, 25-75%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def read_runs_csv(path: Path) -> list[dict]:
    """The measures :func:`write_csv` wrote to ``deepsea_runs.csv`` (``inf``: never within the budget), typed as
    :func:`run_measures` gives them."""
    with open(path, newline="") as f:
        return [dict(size=int(r["size"]), run=int(r["run"]), method=r["method"], seed=int(r["seed"]),
                     first_found=float(r["first_found"]), reliable=float(r["reliable"]), budget=float(r["budget"]))
                for r in csv.DictReader(f)]


def finished_measures(args: Args) -> tuple[list[dict], bool]:
    """The measures of every finished size folder in ``--out``, and False; with ``--plot-only`` and no size folder
    there, those of ``deepsea_runs.csv`` (a committed result, whose size folders were not kept), and True."""
    measures = []
    for size in args.sizes:
        folder = size_folder(args.out, size)
        if is_done(folder):
            measures += run_measures(opiq_jax.load(folder).metrics, size)
    if not measures and args.plot_only and (args.out / RUNS_CSV).exists():
        return [m for m in read_runs_csv(args.out / RUNS_CSV) if m["size"] in args.sizes], True
    return measures, False


def scaling_title(args: Args, measures: list[dict]) -> str:
    """The figure's title: the seeds, budget and steps read from the measures, the counting, the precision and the
    statistic."""
    seeds = sorted(set(Counter((m["size"], m["method"]) for m in measures).values()))  # runs per method and size
    seed_text = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    steps = sorted({int(m["budget"] * m["size"]) for m in measures})  # an episode of size N is N steps
    per_n = sorted({m["budget"] / m["size"] for m in measures})  # the data's budget, not this invocation's option
    features = "SimHash k=32" if args.count_features == "simhash" else "exact cell counts"
    return (f"DeepSea (deterministic), N = {', '.join(str(s) for s in sorted({m['size'] for m in measures}))}: "
            f"{seed_text} seeds per method and size, {features}, {PRECISION}\n"
            f"budget {per_n[0]:g}{'' if len(per_n) == 1 else f'-{per_n[-1]:g}'}·N episodes "
            f"({steps[0]:,}-{steps[-1]:,} steps per run)\n"
            "median and 25-75% of the seeds (empirical quantiles), each run a dot; "
            "open markers: not within the budget")


def report(args: Args) -> str:
    measures, from_runs_csv = finished_measures(args)
    if not measures:
        return "no finished size yet"
    methods = tuple(m for m in args.methods if any(x["method"] == m for x in measures))
    table = summarise(measures, methods)
    figure(args.out / "deepsea_scaling.png", measures, table, methods, scaling_title(args, measures))
    text = markdown(table)
    (args.out / "deepsea_scaling.md").write_text(text + "\n")
    write_csv(args.out / "deepsea_scaling.csv", table)
    if not from_runs_csv:  # rewriting the csv from a subset of its own sizes would drop the others' runs
        write_csv(args.out / RUNS_CSV, measures)
    return text


# ------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv, description=__doc__.split("\n\n")[0])
    for size in args.sizes:
        if size < 2:
            raise SystemExit(f"deepsea: error: sizes must be >= 2, got {size}")
    args.out.mkdir(parents=True, exist_ok=True)
    info_path = args.out / "run_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {"sizes": {}}
    device = jax.devices()[0]
    started = time.time()
    stopped_early = False
    if not args.plot_only:
        for size in args.sizes:
            folder = size_folder(args.out, size)
            if is_done(folder):
                continue
            left = None if args.max_minutes is None else 60 * args.max_minutes - (time.time() - started)
            if left is not None and left <= 0:
                stopped_early = True
                break
            t0 = time.time()
            results = train(ENV, args.methods, args.seeds, out=folder, seed=args.seed, progress=args.progress,
                            checkpoint_every=60 * args.checkpoint_minutes,
                            max_minutes=None if left is None else left / 60, **size_options(args, size))
            seconds = time.time() - t0
            runs, static = len(results.config["runs"]), results.config["static"]
            entry = info["sizes"].setdefault(str(size), {"seconds_per_invocation": []})
            entry["seconds_per_invocation"].append(seconds)
            entry.update(seconds=sum(entry["seconds_per_invocation"]), runs=runs,
                         steps_per_run=static["total_steps"], budget_episodes=budget_episodes(args, size),
                         log_every=static["log_every"])
            print(f"deepsea N={size}: {runs} runs x {static['total_steps']:,} steps "
                  f"({budget_episodes(args, size):,} episodes) in {seconds:.0f} s on {device.device_kind}", flush=True)
            if not results.finished:
                stopped_early = True
                break
        info.update(
            device=device.device_kind, platform=device.platform, devices=jax.device_count(), jax=jax.__version__,
            host=platform.node(), command=command_line("experiments.studies.deepsea", argv), **source_revision(),
            sizes_requested=list(args.sizes), methods=list(args.methods), seeds=args.seeds,
            budget_per_n=args.budget_per_n,
            log_episodes=args.log_episodes, count_features=args.count_features, hidden=list(args.hidden),
            total_seconds=sum(e["seconds"] for e in info["sizes"].values()),
            total_env_steps=sum(e["steps_per_run"] * e["runs"] for e in info["sizes"].values()),
        )
        info_path.write_text(json.dumps(info, indent=1))
    if stopped_early:
        print(f"deepsea: stopped before the end; run the same command again to resume from {args.out}")
    print(report(args))


if __name__ == "__main__":
    main()
