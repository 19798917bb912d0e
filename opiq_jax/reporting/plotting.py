"""Figures and summary tables that read only a results folder.

Curves are the paper's: the median across seeds with the 25-75% band, one line per method (and
setting, when a folder holds several); or, with ``statistic="iqm"``, the interquartile mean across
seeds with its 95% stratified-bootstrap band (Agarwal et al., 2021; :mod:`opiq_jax.reporting.stats`). Legends name
the methods as the paper does (:func:`paper_name`), each line has its own colour and line style
(:func:`group_styles`), and a title states the environment, seeds, steps, precision and statistic, read from
the folder's configs (:func:`figure_title`). The summary ranks by the area under the median curve, the
paper's selection protocol, and adds the IQM of the seeds' own areas with its 95% CI.

A seed's area is the mean of its curve over the logged points (the area under the curve divided by
the steps, so runs of any length compare), a point with no finished episode (NaN) counting 0 as in
:func:`area_under_median`. The area, not the final value, because the paper selects and compares
by the area under the curve, and a final value of few seeds is noisy.

:func:`plot_folder` is strict: an unknown metric, a missing folder, or a folder holding several
experiments (unless pooled) raise :class:`~opiq_jax.common.errors.UsageError` with a one-line message.
"""

from __future__ import annotations

import io
import json
import re
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..common.config import StaticConfig, saved_defaults
from ..common.errors import UsageError
from ..registry.environments import environment_label, environment_spec
from ..registry.methods import METHODS, program_name
from ..runs.results_folder import DIGEST_KEY, experiment_folders, read_metrics
from ..store.files import (
    CONFIG_FILE, atomic_write_bytes, named_after, older_layout, read_json, run_files_without_config, why_absent,
    without_config,
)
from .stats import iqm, iqm_curve_ci, stratified_bootstrap_ci

DEFAULT_METRICS = ("train_return", "test_return", "states_visited", "max_return", "rooms_visited")
METRIC_LABELS = {
    "train_return": "episode return",
    "test_return": "greedy test return",
    "max_return": "maximum episode return",
    "states_visited": "distinct states visited",
    "rooms_visited": "distinct rooms visited",
    "state_actions_visited": "distinct state-actions visited",
    "q_start": "max Q at the start state",
    "qplus_start": "max Q+ at the start state",
    "loss": "TD loss",
    "epsilon": "epsilon",
    "intrinsic_reward": "intrinsic reward, sampled",
    "td_error_max": "largest |TD error|",
    "q_abs_max": "largest |Q|",
    "acted_intrinsic": "intrinsic reward, acted",
    "acted_bonus": "action bonus, acted",
    "sampled_bonus": "action bonus, sampled",
    "unknown_return_share": "sampled with unknown MC return",
    "sketch_overcount": "sketch over-count (mean)",
    "sketch_false_visits": "untried pairs read as tried",
}
DIAGNOSTIC_PANELS = ("loss", "td_error_max", "q_abs_max", "intrinsic_reward", "acted_intrinsic", "acted_bonus",
                     "sampled_bonus", "unknown_return_share", "sketch_overcount", "sketch_false_visits")
"""The panels of a run's learning diagnostics figure (pool environments record them), in order."""
LOG_PANELS = frozenset({"loss", "td_error_max", "q_abs_max"})
"""Panels drawn on a log scale: a diverging learner moves them by orders of magnitude."""
STATISTICS = ("median", "iqm")
STATISTIC_TEXT = {"median": "median across seeds, 25-75% band",
                  "iqm": "IQM across seeds, 95% stratified-bootstrap CI band"}
LEGEND_ORDER = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias",
                "dqn_bias_pc", "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")
"""A legend's order when a figure is given none: OPIQ and its ablations, then the baselines (the paper's names are
the registry's, ``Method.paper_name``)."""
LINE_STYLES = ("-", "--", ":", "-.")
STRONG_COLOURS = (*(f"C{i}" for i in range(10)), "k")
"""matplotlib's ten default colours and black: none pale (tab20's light halves were hard to tell from the bands)."""
BAND_REPS = 1000
"""Bootstrap resamples of a figure's IQM band: enough for a smooth 95% band, fast for every step at once."""
SUMMARY_REPS = 2000
"""Bootstrap resamples of a summary's CI (one number per group, so more are cheap)."""
SHARE_FOLDER = re.compile(r"process-\d+|batch_\d+")
"""Folders that hold a share of one experiment's runs: a process of a run over several hosts, a sweep's batch."""


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


def add_iqm_band(curve: dict[str, np.ndarray], reps: int = BAND_REPS, seed: int = 0) -> dict[str, np.ndarray]:
    """Adds ``iqm``, ``iqm_low`` and ``iqm_high`` (per step, across seeds, 95% bootstrap CI) to a curve once."""
    if "iqm" not in curve:
        curve["iqm"], curve["iqm_low"], curve["iqm_high"] = iqm_curve_ci(curve["values"], reps=reps, seed=seed)
    return curve


def area_under_median(curve: dict[str, np.ndarray]) -> float:
    """Mean of the median curve over the logged steps (NaN points count as zero)."""
    return float(np.mean(np.nan_to_num(curve["median"], nan=0.0)))


def area_under_median_ci(values: np.ndarray, reps: int = 2000, seed: int = 0,
                         confidence: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of :func:`area_under_median` over seeds (``values[seed, step]``): the seeds
    resampled with replacement ``reps`` times (RNG ``seed``), the median curve's area taken each time."""
    n = values.shape[0]
    draws = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    areas = []
    for block in np.array_split(draws, max(1, reps // 100)):  # [100, seeds, steps] at a time: long curves fit
        with warnings.catch_warnings():  # a step where no resampled seed has a value: NaN, counted as 0
            warnings.simplefilter("ignore", RuntimeWarning)
            areas.append(np.mean(np.nan_to_num(np.nanmedian(values[block], axis=1), nan=0.0), axis=1))
    low, high = np.quantile(np.concatenate(areas), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def seed_areas(values: np.ndarray) -> np.ndarray:
    """Each seed's area under its own curve (``values[seed, step]``), normalised by the number of points and
    counting a missing point as 0, as :func:`area_under_median` does for the median."""
    return np.mean(np.nan_to_num(values, nan=0.0), axis=1)


def summary_table(rows: list[dict], metric: str, *, reps: int = SUMMARY_REPS, seed: int = 0) -> list[dict]:
    """Per group, best first (by the area under the median, the paper's protocol): final median and quartiles,
    ``auc`` (area under the median), and ``area_iqm`` with ``area_iqm_low``/``area_iqm_high``: the IQM of the
    seeds' own areas (:func:`seed_areas`) and its 95% stratified-bootstrap CI (``reps`` resamples, RNG ``seed``)."""
    table = []
    for label, c in curves(rows, metric).items():
        if has_no_value(c):  # no episode ended in any run: no area or IQM of 0 beside a NaN median
            point = low = high = auc = float("nan")
        else:
            point, low, high = stratified_bootstrap_ci(seed_areas(c["values"]), iqm, reps=reps, seed=seed)
            auc = area_under_median(c)
        table.append(dict(group=label, final_median=float(c["median"][-1]), final_q25=float(c["q25"][-1]),
                          final_q75=float(c["q75"][-1]), auc=auc, area_iqm=point,
                          area_iqm_low=low, area_iqm_high=high, seeds=int(c["values"].shape[0]),
                          last_step=int(c["steps"][-1]), no_value=has_no_value(c)))
    return sorted(table, key=lambda t: -np.nan_to_num(t["auc"], nan=-np.inf))


def has_no_value(curve: dict[str, np.ndarray]) -> bool:
    """Whether a curve holds no finite value at all (an episode metric of runs in which no episode ended)."""
    return not np.isfinite(curve["values"]).any()


def markdown_table(table: list[dict], metric: str) -> str:
    """A summary table (:func:`summary_table`) as Markdown; a table without the IQM columns shows ``-`` there."""
    lines = [(f"| method | seeds | last step | final median {metric} (25%, 75%) | area under median "
              "| IQM of seeds' areas (95% CI) |"),
             "|---|---|---|---|---|---|"]
    for t in table:
        if t.get("no_value"):
            lines.append(f"| {t['group']} | {t['seeds']} | {t['last_step']:,} | no value: no episode ended in "
                         f"{t['last_step']:,} steps | - | - |")
            continue
        iqm_text = (f"{t['area_iqm']:.3g} ({t['area_iqm_low']:.3g}, {t['area_iqm_high']:.3g})"
                    if "area_iqm" in t else "-")
        lines.append(f"| {t['group']} | {t['seeds']} | {t['last_step']:,} | {t['final_median']:.3g} "
                     f"({t['final_q25']:.3g}, {t['final_q75']:.3g}) | {t['auc']:.3g} | {iqm_text} |")
    return "\n".join(lines)


def curve_band(curve: dict[str, np.ndarray], statistic: str = "median") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The line and band a figure draws: median and 25-75%, or IQM and its 95% CI (computed on first use)."""
    if statistic == "iqm":
        add_iqm_band(curve)
        return curve["iqm"], curve["iqm_low"], curve["iqm_high"]
    return curve["median"], curve["q25"], curve["q75"]


def group_styles(count: int) -> list[tuple[str, str]]:
    """One (colour, line style) per group, every pair distinct up to 44 groups (11 colours x 4 styles, coprime
    cycles) and neighbours differing in both: lines that overlap (methods that fail alike sit on one another at 0)
    stay apart by their dashes where the colours alone would hide one under the other."""
    return [(STRONG_COLOURS[i % len(STRONG_COLOURS)], LINE_STYLES[i % len(LINE_STYLES)]) for i in range(count)]


def line_zorder(line_style: str) -> float:
    """The drawing order of a line of ``line_style``: solid lines first, broken ones over them. A solid line drawn last
    would cover the line it overlaps entirely; a dashed or dotted one on top leaves the other showing in its gaps."""
    return 2.0 + 0.01 * LINE_STYLES.index(line_style) if line_style in LINE_STYLES else 2.0


def paper_name(method: str) -> str:
    """The paper's name of ``method`` (``dqn_bias_pc`` -> ``DQN Bias + PC``): the registry's ``paper_name`` where
    a method declares one, else the name itself (a method of the user's own)."""
    return getattr(METHODS.get(method), "paper_name", None) or method


def legend_label(group: str) -> str:
    """A group's legend text: its method's paper name, and its setting as :func:`group_label` wrote it."""
    method, bracket, setting = group.partition(" [")
    return paper_name(method) + (f" [{setting}" if bracket else "")


def paper_order(groups) -> list[str]:
    """``groups`` in :data:`LEGEND_ORDER` (OPIQ first), a method of the user's own after the paper's."""
    rank = {method: i for i, method in enumerate(LEGEND_ORDER)}
    return sorted(groups, key=lambda g: (rank.get(g.partition(" [")[0], len(rank)), g))


def plot_curves(ax, metric_curves: dict[str, dict[str, np.ndarray]], groups: list[str] | None = None,
                statistic: str = "median") -> None:
    """Line and band per group (see :func:`curve_band`), styled by :func:`group_styles`, named by the paper."""
    labels = [label for label in groups or paper_order(metric_curves) if label in metric_curves]
    for label, (colour, style) in zip(labels, group_styles(len(labels))):
        c = metric_curves[label]
        line, low, high = curve_band(c, statistic)
        ax.plot(c["steps"], line, label=legend_label(label), lw=2.2 if label == "opiq" else 1.5, color=colour,
                ls=style)
        ax.fill_between(c["steps"], low, high, color=colour, alpha=0.15, lw=0)


def file_backend():
    """``(pyplot, matplotlib)`` drawing into files (Agg): the figures are only ever saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - matplotlib.ticker is used through the returned module

    return plt, matplotlib


def save_curve_figure(path: Path, metric_curves: dict[str, dict[str, np.ndarray]], metric: str, title: str,
                      groups: list[str] | None = None, hline: float | None = None, statistic: str = "median",
                      hline_label: str | None = None) -> Path:
    """Writes one PNG: every group's line and band (:func:`curve_band`), an optional grey reference line (named in
    the legend, so that it is not read as a method's dotted line), and the legend outside the axes (eleven
    methods inside would cover the curves)."""
    plt, matplotlib = file_backend()

    fig, ax = plt.subplots(figsize=(8.4, 4.4))
    plot_curves(ax, metric_curves, groups, statistic)
    if hline is not None:
        ax.axhline(hline, color="0.3", ls=(0, (1, 3)), lw=1, label=hline_label or f"reference ({hline:g})")
    ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))  # 200k, 1M: no offset text to decode
    ax.set_xlabel("environment steps")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, handlelength=3.2, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    save_atomically(fig, path, dpi=120)
    plt.close(fig)
    return path


def save_diagnostics_figure(path: Path, rows: list[dict], title: str, groups: list[str] | None = None,
                            statistic: str = "median") -> Path:
    """Writes one PNG of the learning diagnostics the rows hold (:data:`DIAGNOSTIC_PANELS`), a panel each, every
    group's line and band as in the other figures, so a divergence shows beside the rooms and returns."""
    plt, matplotlib = file_backend()

    present = {r["metric"] for r in rows}
    panels = [m for m in DIAGNOSTIC_PANELS if m in present]
    columns = 2
    fig, axes = plt.subplots((len(panels) + columns - 1) // columns, columns, figsize=(11, 2.4 * len(panels) / 2 + 1),
                             squeeze=False, sharex=True)
    for ax, metric in zip(axes.flat, panels):
        plot_curves(ax, curves(rows, metric), groups, statistic)
        if metric in LOG_PANELS:
            ax.set_yscale("log")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric), fontsize=8)
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("environment steps")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=min(len(labels), 6), frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(title, fontsize=9, y=1.0 - 0.35 / fig.get_figheight())
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / fig.get_figheight()))
    save_atomically(fig, path, dpi=110)
    plt.close(fig)
    return path


def has_diagnostics(rows: list[dict]) -> bool:
    """Whether the rows hold a run's learning diagnostics (what pool environments record)."""
    return any(r["metric"] == "td_error_max" for r in rows)


# ------------------------------------------------------------------------------------ experiments of a folder


def _span(values: set[int], unit: str) -> str:
    """``5 seeds``, ``1 seed`` or, when they differ, ``3-5 seeds``."""
    low, high = min(values), max(values)
    if low == high:
        return f"{low:,} {unit.removesuffix('s') if low == 1 else unit}"
    return f"{low:,}-{high:,} {unit}"


def describe(configs: list[dict] | list[list[dict]], last_step: int | None = None,
             shortest_step: int | None = None) -> str:
    """One line naming the environment(s), the seeds per method and setting, and the steps of ``configs``: the
    config.json dicts of one experiment's folders, or a list of such lists (pooled experiments add their seeds).
    ``shortest_step``: where the method that stopped first stopped, when the methods reached different steps."""
    experiments = [configs] if configs and isinstance(configs[0], dict) else configs
    configs = _flat(experiments)
    envs = sorted({environment_label(c["static"]) for c in configs})
    seeds = defaultdict(set)
    for i, experiment in enumerate(experiments):  # a set per experiment: shares and padding repeat no seed
        for run in (run for c in experiment for run in c["runs"]):
            seeds[(run["method"], run["setting"])].add((i, run["seed"]))
    totals = {int(c["static"]["total_steps"]) for c in configs}
    steps = _span(totals, "steps")
    if last_step is not None and shortest_step is not None and shortest_step < last_step:
        steps = f"{shortest_step:,}-{last_step:,} of {steps}"
    elif last_step is not None and last_step < min(totals):
        steps = f"{last_step:,} of {steps}"
    seed_text = _span({len(s) for s in seeds.values()}, "seeds") if seeds else "no runs"
    return f"{' + '.join(envs)}, {seed_text}, {steps}"


def _flat(configs: list[dict] | list[list[dict]]) -> list[dict]:
    """The config.json dicts of one experiment, or of a list of experiments, as one list."""
    return [c for experiment in configs for c in experiment] if configs and isinstance(configs[0], list) else configs


def precision_text(configs: list[dict] | list[list[dict]]) -> str:
    """The Q-network's precision of ``configs`` (``float32``, ``bfloat16``, ``bfloat16 with packed weights``):
    bfloat16 learns differently on the maze, so a figure must say which it shows. A config written before the
    field existed counts as the default, as :func:`_experiment_identity` does."""
    default = StaticConfig()
    names = set()
    for static in (c.get("static", {}) for c in _flat(configs)):
        precision = static.get("precision", default.execution.precision)
        packed = static.get("weight_storage", default.execution.weight_storage) == "packed"
        names.add(f"{precision} with packed weights" if packed else precision)
    return " + ".join(sorted(names))


def setting_text(configs: list[dict] | list[list[dict]], last_step: int | None = None,
                 shortest_step: int | None = None) -> str:
    """One line of what a figure of ``configs`` shows: the environment, seeds and steps (:func:`describe`) and the
    precision (:func:`precision_text`). Every figure's title states these through here."""
    return f"{describe(configs, last_step, shortest_step)}, {precision_text(configs)}"


def figure_title(heading: str, configs: list[dict] | list[list[dict]], last_step: int | None = None,
                 statistic: str = "median", shortest_step: int | None = None) -> str:
    """A curve figure's title: ``heading``; the environment, seeds, steps and precision (:func:`setting_text`); the
    statistic drawn. Read from the configs, so a figure cannot claim more seeds or steps than its folder holds."""
    return f"{heading}\n{setting_text(configs, last_step, shortest_step)}\n{STATISTIC_TEXT[statistic]}"


def folder_title(out: str | Path, rows: list[dict], heading: str | None = None, statistic: str = "median") -> str:
    """:func:`figure_title` for the results folder ``out`` (its experiments pooled) whose metrics are ``rows``;
    the heading defaults to the folder's name."""
    out = Path(out)
    return rows_title(heading or out.name, check_one_experiment(out, pooled=True), rows, statistic)


def rows_title(heading: str, configs: list[dict] | list[list[dict]], rows: list[dict], statistic: str) -> str:
    """:func:`figure_title` with the steps the metrics ``rows`` reach: pooled experiments (or a run cut short)
    can leave methods at different steps, and the title then gives both ends."""
    shortest, last = steps_reached(rows)
    return figure_title(heading, configs, last, statistic, shortest)


def steps_reached(rows: list[dict]) -> tuple[int, int]:
    """The last step of the group (method, setting) that stopped first and of the one that went furthest, in the
    metrics ``rows`` (the steps a figure of them shows, which a run cut short leaves below its configured steps)."""
    reached: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        reached[(r["method"], r["setting"])] = max(reached[(r["method"], r["setting"])], r["step"])
    return min(reached.values()), max(reached.values())


def _experiment_identity(config: dict) -> str:
    """What must agree for folders to be one experiment: everything but the runs, the program's parts, what
    ``auto`` resolved to in each program (BSP's network has heads) and the digest of what each program trained (its
    runs and parts differ). Static fields missing from an older config count as they were then (as the runner's
    resume check does)."""
    static = {**json.loads(json.dumps(saved_defaults())), **config.get("static", {})}
    static.pop("parts", None)
    for name in getattr(older_layout(config), "per_program", ()):  # an older layout's programs set these apart
        static.pop(name, None)
    rest = {k: v for k, v in config.items() if k not in ("runs", "static", "resolved", DIGEST_KEY)}
    return json.dumps({"static": static, **rest}, sort_keys=True)


def _experiment_root(folder: Path, out: Path, config: dict) -> Path:
    """The folder an experiment was written to: ``folder`` less a per-program subfolder (named after its
    program, as :func:`~opiq_jax.host.train_programs.run_methods` writes them) and per-process or per-batch
    folders."""
    older = older_layout(config)
    try:
        program = (older.program(config["static"]) if older else
                   program_name(config.get("static", {}).get("parts", ())))
    except (KeyError, ValueError):  # a part this installation does not register: not a program subfolder we know
        program = None
    if folder != out and folder.name == program:
        folder = folder.parent
    while folder != out and SHARE_FOLDER.fullmatch(folder.name):
        folder = folder.parent
    return folder


def find_experiments(out: str | Path) -> dict[str, list[Path]]:
    """The experiments under a results folder, each named by its folder relative to ``out`` (``out``'s own
    name for itself), with the folders holding its config.json.

    Folders are one experiment when they are per-program subfolders (``plain``, ``dora``, ...) or per-process
    (``process-<i>``) or per-batch (``batch_<nnn>``) shares below one folder and their configs agree in all but
    the runs and the program's parts; anything else (two sibling runs, even of the same command) is another
    experiment, as pooling them would mix or repeat seeds."""
    out = Path(out)
    found: dict[tuple[Path, str], list[Path]] = defaultdict(list)
    for folder in experiment_folders(out):
        config = read_json(folder / CONFIG_FILE)
        found[(_experiment_root(folder, out, config), _experiment_identity(config))].append(folder)
    named: dict[str, list[Path]] = {}
    for (root, _), folders in found.items():
        name = out.name if root == out else root.relative_to(out).as_posix()
        named[name if name not in named else f"{name} (another config)"] = folders
    return named


def _configs(folders: list[Path]) -> list[dict]:
    return [read_json(f / CONFIG_FILE) for f in folders]


def check_one_experiment(out: Path, pooled: bool) -> list[list[dict]]:
    """Per experiment under ``out``, its folders' configs; several experiments are refused unless ``pooled``."""
    if not out.exists():
        raise UsageError(f"{out} {why_absent(out)}")
    experiments = find_experiments(out)
    if not experiments and run_files_without_config(out):
        raise UsageError(f"{without_config(out)}: put {CONFIG_FILE} back to plot it")
    if not experiments:
        raise UsageError(f"{out} holds no results (no {CONFIG_FILE} in it or below it)")
    if len(experiments) > 1 and not pooled:
        names = "; ".join(f"{name} ({describe(_configs(f))})" for name, f in experiments.items())
        raise UsageError(f"{out} holds {len(experiments)} experiments: {names}. Pass --pooled to plot their runs "
                         f"together, or plot one of the subfolders")
    return [_configs(folders) for folders in experiments.values()]


def save_atomically(fig, path: Path, dpi: int) -> None:
    """``fig`` as a PNG at ``path``, rendered in memory and written as every results file is
    (:func:`~opiq_jax.store.files.atomic_write_bytes`): a full disk, a file-size limit or a kill mid-write leaves the
    previous figure whole (or none), never a truncated one."""
    image = io.BytesIO()
    try:
        fig.savefig(image, format="png", dpi=dpi)
    except OSError as e:  # whatever the renderer met, the user is told which figure
        named_after(e, Path(path))
        raise
    atomic_write_bytes(Path(path), image.getvalue())


def default_figures(configs: list[list[dict]]) -> tuple[str, ...]:
    """The metrics drawn by default: those the folder's environments declare (``EnvironmentSpec.figures``, in the
    first's order), or :data:`DEFAULT_METRICS` for an environment no module here registers."""
    figures: list[str] = []
    for config in (c for group in configs for c in group):
        try:
            figures += environment_spec(str(config.get("static", {}).get("env", ""))).figures
        except ValueError:
            figures += DEFAULT_METRICS
    return tuple(dict.fromkeys(figures)) or DEFAULT_METRICS


def choose_metrics(rows: list[dict], metrics: tuple[str, ...] | None, out: Path,
                   defaults: tuple[str, ...] = DEFAULT_METRICS) -> list[str]:
    """The metrics to draw. The default set draws ``defaults`` that the folder has; a named metric it lacks is an
    error."""
    present = sorted({r["metric"] for r in rows})
    if metrics is None or tuple(metrics) == DEFAULT_METRICS:
        chosen = [m for m in defaults if m in present]
        if chosen:
            return chosen
        raise UsageError(f"{out} holds none of the default metrics; its metrics: {', '.join(present) or 'none'}")
    unknown = [m for m in metrics if m not in present]
    if unknown:
        raise UsageError(f"{out} has no metric {', '.join(unknown)}; its metrics: {', '.join(present) or 'none'}")
    return list(metrics)


def metric_names(metrics: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The metrics to draw as a tuple of names: one name, or a list of them (None: the defaults)."""
    if metrics is None or isinstance(metrics, str):
        return metrics if metrics is None else (metrics,)
    if not isinstance(metrics, Sequence) or not all(isinstance(m, str) for m in metrics):
        raise UsageError(f"metrics must be a metric's name or a list of them, got {metrics!r}")
    return tuple(metrics)


def plot_folder(out: str | Path, metrics: str | Sequence[str] | None = DEFAULT_METRICS,
                groups: list[str] | None = None, reference_lines: dict[str, float] | None = None,
                prefix: str = "plot", *, statistic: str = "median", pooled: bool = False) -> list[Path]:
    """One PNG per metric in ``out``: per method, the median across seeds with the 25-75% band
    (``<prefix>_<metric>.png``), or with ``statistic="iqm"`` the IQM with its 95% bootstrap band
    (``<prefix>_<metric>_iqm.png``). The title names the environment, seeds, steps, precision and statistic.

    ``metrics`` None (or the default set) draws the default metrics the folder has; a named metric the folder
    lacks raises :class:`UsageError` listing its metrics, as do a missing folder and a folder of several
    experiments (see :func:`find_experiments`) unless ``pooled``, which draws all their runs together."""
    if statistic not in STATISTICS:
        raise UsageError(f"unknown statistic {statistic!r}: use one of {', '.join(STATISTICS)}")
    metrics = metric_names(metrics)
    out = Path(out)
    configs = check_one_experiment(out, pooled)
    rows = read_metrics(out)
    if not rows:
        raise UsageError(f"{out} holds no metrics yet: plot it once a chunk has finished")
    title = rows_title(out.name, configs, rows, statistic)
    suffix = "_iqm" if statistic == "iqm" else ""
    written = []
    for metric in choose_metrics(rows, metrics, out, default_figures(configs)):
        metric_curves = curves(rows, metric)
        if all(has_no_value(c) for c in metric_curves.values()):  # empty axes would look like a broken figure
            print(f"plot: {metric} has no value in {out} (no episode ended in {steps_reached(rows)[1]:,} steps): "
                  "not drawn", flush=True)
            continue
        written.append(save_curve_figure(out / f"{prefix}_{metric}{suffix}.png", metric_curves, metric, title,
                                         groups, (reference_lines or {}).get(metric), statistic))
    if (metrics is None or tuple(metrics) == DEFAULT_METRICS) and has_diagnostics(rows):
        written.append(save_diagnostics_figure(out / f"{prefix}_diagnostics{suffix}.png", rows, title, groups,
                                               statistic))
    return written
