"""Hyperparameter sweeps as few compiled programs as memory allows, and the paper's selection protocol.

A preset is a plain JSON file (the ones shipped live in ``opiq_jax/host/presets/``; copy one and edit it)::

    {"env": "chain", "seeds": 20, "metric": "test_return",
     "static": {"total_steps": 100000},
     "grids": [{"method": "opiq", "grid": {"m": [0.1, 0.5], "c_action": [1, 10]}},
               {"method": "dqn", "grid": {"epsilon_decay_steps": [100, 50000]}}]}

Every method's grid is expanded to the product of its values (each setting starts from the method's
best setting in ``methods.py``), and every setting runs ``seeds`` seeds. All runs of one program
structure (plain; DORA, RND and BSP each add networks) share one static configuration, so they form
one flat runs axis; when it does not fit in device memory it is split into equal batches (one
compiled program serves them all), each its own resumable results folder.

The selection protocol of the paper: rank the settings of each method by the area under the median
(across seeds) curve of ``metric`` and keep the best.
"""

from __future__ import annotations

import csv
import difflib
import io
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..agent.trainer import METRIC_DOCS
from ..common.config import RUNNER_SET, STATIC_OPTIONS, SWEEP_DEFAULTS, StaticConfig, static_option
from ..common.errors import DoesNotFit, ResultsError, UsageError, message_of, option_name
from ..parts import get_part
from ..contracts.pool import FrameCounting, PoolStepping
from ..primitives.state import DIAGNOSTIC_METRICS
from ..registry.environments import environment_spec, envs_per_run, started_by_host
from ..registry.methods import method_hparams
from ..registry.methods import get_method, program_name
from ..reporting.plotting import area_under_median, area_under_median_ci, curves
from ..runs.experiment import Experiment, RunSpec, split_by_program
from ..runs.memory import MEMORY_HEADROOM, available_device_bytes, check_fits, runs_that_fit, state_bytes_per_run
from ..runs.results_folder import is_finished, read_metrics, require_same_experiment
from ..store.files import atomic_write_bytes, prepare_folder, read_json
from .host_loop import run_experiment
from .plan import (
    check_count, check_environment, check_seed, check_methods, checked_grid, checked_static, chunk_for, plural,
    setting_label,
    static_with, unknown_option,
)

BATCH_PREFIX = "batch_"


@dataclass(frozen=True)
class Preset:
    env: str
    seeds: int
    metric: str
    static: dict
    grids: tuple[dict, ...]
    seed: int = 0
    name: str = "preset"


PRESET_FIELDS = ("env", "seeds", "metric", "static", "grids", "seed", "note")


def preset_names() -> list[str]:
    """Names of the presets shipped with the package."""
    return sorted(p.name.removesuffix(".json") for p in resources.files("opiq_jax.host.presets").iterdir()
                  if p.name.endswith(".json"))


def read_preset(preset: str | Path | Mapping) -> tuple[str, dict]:
    """``(name, data)`` of a shipped preset's name, a JSON file's path, or a dict written like one."""
    if isinstance(preset, Mapping):
        return "(dict)", dict(preset)
    path = Path(preset)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise UsageError(f"preset file {path} does not exist")
        return path.stem, read_json(path)
    if str(preset) in preset_names():
        return str(preset), json.loads(resources.files("opiq_jax.host.presets").joinpath(f"{preset}.json")
                                       .read_text())
    raise UsageError(f"unknown preset {str(preset)!r}: use a JSON file or one of {', '.join(preset_names())}")


def shrunk(data: Any, seeds: int | None, steps: int | None, say=print) -> Any:
    """A preset's data with fewer (or more) ``seeds`` and ``steps``, to try a shipped preset small. Where the preset's
    chunk (``log_every``) does not divide the new steps, the chunk becomes the nearest smaller one that does
    (:func:`chunk_for`), and ``say`` is told: the ranking's area under the curve needs a point per chunk. Checked
    afterwards as any preset is."""
    if not isinstance(data, dict) or (seeds is None and steps is None):
        return data
    data = dict(data)
    if seeds is not None:
        data["seeds"] = check_count("seeds", seeds)
    if steps is not None:
        static = dict(data.get("static") or {})
        static["total_steps"] = check_count("steps", steps)
        chunk = static.get("log_every", environment_chunk(data.get("env")))
        if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0 and steps % chunk:
            envs = preset_envs_per_run(data.get("env"), static.get("envs_per_run", 1))
            static["log_every"] = chunk_for(steps, chunk, envs)
            points = steps // static["log_every"]
            whose = "" if "log_every" in (data.get("static") or {}) else " (its environment's default)"
            say(f"opiq-jax: the preset logs every {chunk:,} steps{whose}, which does not divide {steps:,}: logging "
                f"every {static['log_every']:,} steps instead ({plural(points, 'point')} per run for the ranking's "
                f"area under the curve){'' if points > 1 else '; give steps a multiple of ' + format(chunk, ',')}")
        data["static"] = static
    return data


def preset_envs_per_run(env: Any, chosen: Any) -> Any:
    """The environments per run of a preset's ``env`` as its stepping decides; ``chosen`` as written where the
    environment is not known (the preset's check names it)."""
    try:
        return envs_per_run(env, chosen)
    except (ValueError, TypeError):
        return chosen


def environment_chunk(env: Any) -> int | None:
    """The chunk (``log_every``) of ``env``'s paper configuration; None for a name no registry knows (the preset's
    check names it)."""
    try:
        return StaticConfig(**environment_spec(env).defaults).log_every
    except (ValueError, TypeError):
        return None


def load_preset(preset: str | Path | Mapping, seeds: int | None = None, steps: int | None = None) -> Preset:
    """A preset (see :func:`read_preset`), its ``seeds`` and ``steps`` replaced where given (:func:`shrunk`), every
    field checked against the options' declarations: a bad one
    gives a one-line error naming the preset and the field as written in it. Structural options in
    ``static`` are honoured, except ``env`` and ``parts``, which the preset sets otherwise (refused)."""
    name, data = read_preset(preset)
    data = shrunk(data, seeds, steps)  # the caller's seeds and steps, named as the caller writes them
    try:
        return checked_preset(name, data)
    except UsageError as e:  # the preset's own fields, named as the preset writes them (str: Python's names)
        raise UsageError(f"preset {name}: {e}") from None


def checked_preset(name: str, data: dict) -> Preset:
    """:func:`load_preset`'s checks, its messages without the preset's name."""
    if not isinstance(data, dict):
        raise UsageError("a preset is a JSON object with env, seeds, static and grids")
    unknown = sorted(set(data) - set(PRESET_FIELDS))
    if unknown or "env" not in data or "grids" not in data:
        raise UsageError(f"unknown field(s) {', '.join(unknown)}; a preset has {', '.join(PRESET_FIELDS)}" if unknown
                         else "a preset needs env and grids")
    check_environment(data["env"])
    seeds = check_count("seeds", data.get("seeds", 1))
    static = checked_preset_static(data.get("static", {}))
    static_with(data["env"], static)  # the relations between options (steps a multiple of log_every, ...)
    grids = data["grids"]
    if not isinstance(grids, list) or not grids:
        raise UsageError("grids must be a non-empty list of {\"method\": ..., \"grid\": {...}}")
    for g in grids:
        if not isinstance(g, dict) or set(g) - {"method", "grid"} or "method" not in g:
            raise UsageError(f"each entry of grids has a method and a grid, got {g!r}")
        check_methods((g["method"],))
        grid = checked_grid(g.get("grid", {}), written=f"grids[{g['method']}]")
        options = get_method(g["method"]).options()
        foreign = sorted(set(grid) - set(options))
        if foreign:
            raise UsageError(f"the grid for {g['method']} has hyperparameters its parts do not declare: "
                             f"{', '.join(foreign)} (it has {', '.join(options)})")
    default = environment_spec(data["env"]).headline_metric
    metric = checked_metric(data.get("metric", default), data["env"], [g["method"] for g in grids])
    check_run_count(seeds, grids)
    seed = check_seed("seed", data.get("seed", 0))
    return Preset(env=data["env"], seeds=seeds, metric=metric, static=static, grids=tuple(grids), seed=seed, name=name)


MAX_SWEEP_RUNS = 1_000_000
"""The most runs (settings x seeds) a sweep plans: its list of runs is built on the host before anything trains."""

LOWER_IS_BETTER = frozenset({"loss", "td_error_max", "q_abs_max", "nonfinite", "count_nonfinite", "env_restarts",
                             "sketch_overcount", "sketch_false_visits", "unknown_return_share"})
"""Metrics a sweep ranks smallest first: errors and faults, where the largest area would be the worst setting."""


def ranked_metrics(env: str, methods: list[str]) -> list[str]:
    """The metrics a sweep of ``methods`` on ``env`` records, so can rank on: the trainer's and the parts'."""
    pool = started_by_host(env)
    own = {"test_return", "states_visited", "state_actions_visited", "qplus_start"}
    pool_only = (*DIAGNOSTIC_METRICS, *PoolStepping.metric_names, *FrameCounting.metric_names, "rooms_visited")
    names = [m for m in METRIC_DOCS if (m not in own if pool else m not in pool_only)]
    names += [m for method in methods for part in get_method(method).part_names for m in get_part(part).metric_names]
    return list(dict.fromkeys(names))


def checked_metric(metric: Any, env: str, methods: list[str]) -> str:
    """The preset's ``metric`` if its runs record it, else a one-line error with the closest names (a typo must fail
    before anything trains, not at the ranking after the whole sweep)."""
    known = ranked_metrics(env, methods)
    if isinstance(metric, str) and metric in known:
        return metric
    close = difflib.get_close_matches(str(metric), known, n=2)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UsageError(f"metric {metric!r} is not one that these runs record ({', '.join(known)}){hint}")


def check_run_count(seeds: int, grids: list[dict]) -> None:
    """A one-line error when the preset has more runs than a sweep plans (:data:`MAX_SWEEP_RUNS`)."""
    settings = sum(math.prod(len(v) for v in g.get("grid", {}).values()) for g in grids)
    if settings * seeds > MAX_SWEEP_RUNS:
        raise UsageError(f"seeds ({seeds:,}) x settings ({settings:,}) is {settings * seeds:,} runs, more than a sweep "
                         f"plans ({MAX_SWEEP_RUNS:,}): give fewer seeds")


def checked_preset_static(static: Any) -> dict:
    """A preset's ``static`` by field name, each value checked; ``env`` and ``parts`` are refused."""
    if not isinstance(static, dict):
        raise UsageError(f"static must be an object of options, got {static!r}")
    checked = {}
    for key, value in static.items():
        if key in RUNNER_SET:
            raise UsageError(f"static.{key} cannot be set: " + (
                "the preset's env field chooses the environment" if key == "env"
                else "the parts come from the methods of its grids"))
        option = STATIC_OPTIONS.get(key) or static_option(key)
        if option is None:
            raise unknown_option(key)
        checked[option.name] = checked_static(option, value, written=f"static.{key}")
    return checked


def expand(preset: Preset) -> list[RunSpec]:
    """Every (method, setting, seed) of the preset, in a fixed order."""
    runs = []
    for g in preset.grids:
        grid = g.get("grid", {})
        for combo in itertools.product(*grid.values()):
            values = dict(zip(grid, (float(v) for v in combo)))
            hp = method_hparams(preset.env, g["method"], **values)
            # In the grid's order, as every sweep folder has labelled its settings (a resume compares them).
            runs += [RunSpec(g["method"], setting_label(values, in_name_order=False), s, hp)
                     for s in range(preset.seeds)]
    return runs


def plan_static(preset: Preset) -> StaticConfig:
    """The sweep's static configuration: the environment's paper settings with the preset's ``static``."""
    return static_with(preset.env, preset.static)


def plan_batches(num_runs: int, per_run_bytes: int, free_bytes: int, headroom: float = MEMORY_HEADROOM) -> int:
    """The fewest equal batches whose runs fit in ``free_bytes`` with ``headroom`` (the environment's,
    :attr:`~opiq_jax.registry.environments.EnvironmentSpec.memory_headroom`)."""
    most = max(1, runs_that_fit(per_run_bytes, free_bytes, headroom))
    return math.ceil(num_runs / most)


def split(runs: list[RunSpec], num_batches: int) -> list[tuple[RunSpec, ...]]:
    """Equal batches (one compiled program for all); the last is padded by repeating its final run."""
    size = math.ceil(len(runs) / num_batches)
    batches = [tuple(runs[i : i + size]) for i in range(0, len(runs), size)]
    if len(batches[-1]) < size:  # pad so every batch has the same shape (the padding is not reported)
        batches[-1] = batches[-1] + (batches[-1][-1],) * (size - len(batches[-1]))
    return batches


PLAN_FILE = "plan.json"
"""The sweep folder's record of its batches: a resume trains the batches planned first, whatever the memory."""


def planned_batches(preset: Preset, groups: dict[str, Experiment], max_batch_runs: int | None) -> dict[str, int]:
    """Per program, the fewest equal batches that fit in the free device memory (and hold at most
    ``max_batch_runs`` runs)."""
    free, counts = available_device_bytes(), {}
    for name, group in groups.items():
        per_run = state_bytes_per_run(group.static)
        headroom = environment_spec(group.static.env).memory_headroom
        counts[name] = plan_batches(len(group.runs), per_run, free, headroom)
        if max_batch_runs is not None:
            counts[name] = max(counts[name], math.ceil(len(group.runs) / max_batch_runs))
        print(f"sweep: {name}: {len(group.runs)} runs, {per_run / 2**20:.1f} MiB per run, {free / 2**30:.1f} GiB "
              f"free -> {len(split(list(group.runs), counts[name]))} batch(es) of "
              f"{math.ceil(len(group.runs) / counts[name])} runs", flush=True)
    return counts


def batches_in_folders(out: Path) -> dict[str, int]:
    """The batches per program of a sweep folder written before plans were recorded, from its batch folders (the
    size of a program's first batch gives their number); programs not started yet are absent."""
    counts: dict[str, int] = {}
    for folder in sorted(out.glob(f"{BATCH_PREFIX}*")):
        if not (folder / "config.json").exists():
            continue
        config = read_json(folder / "config.json")
        name = program_name(get_method(config["runs"][0]["method"]).part_names)
        counts.setdefault(name, len(config["runs"]))  # for now its batch size: the group's size gives the number
    return counts


def recorded_plan(out: Path, groups: dict[str, Experiment]) -> dict[str, int] | None:
    """The batches per program that ``out`` planned before (``plan.json``, or read from older batch folders)."""
    if (out / PLAN_FILE).exists():
        plan = read_json(out / PLAN_FILE)
        try:
            return {str(k): int(v) for k, v in plan["batches"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ResultsError(f"{out / PLAN_FILE} is not a sweep's plan (batches per program): delete it, and the "
                               "sweep reads its plan back from its batch folders") from None
    sizes = batches_in_folders(out) if out.is_dir() else {}
    if not sizes:
        return None
    return {name: math.ceil(len(groups[name].runs) / size) for name, size in sizes.items() if name in groups}


def plan_sweep(preset: Preset, max_batch_runs: int | None = None, out: Path | None = None) -> list[Experiment]:
    """The sweep as compiled batches: per program structure, the fewest equal batches that fit; a sweep folder
    ``out`` that planned before keeps its batches (its ``plan.json``), and a new plan is recorded there."""
    static = plan_static(preset)
    groups = split_by_program(Experiment(static, tuple(expand(preset)), seed=preset.seed))
    recorded = recorded_plan(out, groups) if out is not None else None
    counts = dict(recorded or {})
    missing = {name: g for name, g in groups.items() if name not in counts}
    if recorded:
        print(f"sweep: resuming the batches planned first ({PLAN_FILE}): " + ", ".join(
            f"{name} {n}" for name, n in recorded.items()) + (
            "; --max-batch-runs applies to a new sweep only" if max_batch_runs is not None else ""), flush=True)
    counts.update(planned_batches(preset, missing, max_batch_runs) if missing else {})
    if out is not None:
        atomic_write_bytes(out / PLAN_FILE, json.dumps({"batches": {n: counts[n] for n in groups}}, indent=1).encode())
    return [Experiment(group.static, part, seed=preset.seed)
            for name, group in groups.items() for part in split(list(group.runs), counts[name])]


def require_same_preset(out: Path, preset: Preset) -> None:
    """A one-line :class:`UsageError` when ``out`` holds a sweep of another preset (its ``preset.json``)."""
    path = out / "preset.json"

    def unnamed(data: dict) -> dict:  # the same preset read from a renamed file, or ranked on another metric
        return {k: v for k, v in data.items() if k not in ("name", "metric")}

    if path.exists() and unnamed(read_json(path)) != unnamed(json.loads(json.dumps(preset.__dict__, default=list))):
        raise ResultsError(f"{out} holds a sweep of another preset (its preset.json differs): choose another --out "
                           "or delete it")


def run_sweep(preset: Preset, out: str | Path, progress: bool = SWEEP_DEFAULTS["progress"],
              max_batch_runs: int | None = None, checkpoint_seconds: float = SWEEP_DEFAULTS["checkpoint_every"],
              track: str = SWEEP_DEFAULTS["track"]) -> list[dict]:
    """Runs (or resumes) every batch, then writes ``settings.csv`` and ``best.md``; returns the ranking."""
    out = prepare_folder(Path(out), kind="sweep")
    require_same_preset(out, preset)
    runs = expand(preset)
    print(f"sweep: {plural(len(runs), 'run')} ({plural(len(runs) // preset.seeds, 'setting')} x "
          f"{plural(preset.seeds, 'seed')}) on {preset.env}", flush=True)
    atomic_write_bytes(out / "preset.json", json.dumps(preset.__dict__, indent=1, default=list).encode())
    batches = plan_sweep(preset, max_batch_runs, out)
    for i, batch in enumerate(batches):
        folder = out / f"{BATCH_PREFIX}{i:03d}"
        if (folder / "metrics.csv").exists() and is_finished(folder):
            require_same_experiment(folder, batch)
            print(f"sweep: batch {i + 1}/{len(batches)} already finished", flush=True)
            continue
        print(f"sweep: batch {i + 1}/{len(batches)}", flush=True)
        try:
            check_fits(batch.static, len(batch.runs), note=print)
        except DoesNotFit as e:  # a resume on a card with less free memory than the one that planned the batches
            raise DoesNotFit(f"{message_of(e)}; this sweep's batches were planned when it started ({PLAN_FILE}): "
                             f"resume it where it fits, or start it again into a new {option_name('out')} with "
                             f"{option_name('max_batch_runs')}") from None
        run_experiment(batch, folder, progress=progress, checkpoint_seconds=checkpoint_seconds, track=track)
    ranking = rank_settings(out, preset.metric)
    write_tables(out, ranking, preset.metric)
    return ranking


def sweep_rows(out: Path) -> list[dict]:
    """The metrics of every batch, with run ids made global and the batches' padding runs dropped.

    Padding repeats a batch's final run, so a (method, setting, seed) seen in an earlier run is padding.
    """
    rows, offset, seen = [], 0, {}
    for folder in sorted(out.glob(f"{BATCH_PREFIX}*")):
        batch_rows = read_metrics(folder)
        for r in batch_rows:
            key = (r["method"], r["setting"], r["seed"])
            run = seen.setdefault(key, offset + r["run"])
            if run == offset + r["run"]:
                rows.append({**r, "run": run})
        offset += 1 + max(r["run"] for r in batch_rows)
    return rows


def rank_settings(out: Path, metric: str) -> list[dict]:
    """Every (method, setting) with its area under the median curve of ``metric`` and that area's 95% bootstrap
    interval over seeds, best first per method."""
    rows = sweep_rows(out)
    table = []
    for method in dict.fromkeys(r["method"] for r in rows):
        method_rows = [r for r in rows if r["method"] == method]
        per_setting = {}
        for r in method_rows:
            per_setting.setdefault(r["setting"], []).append(r)
        for setting, setting_rows in per_setting.items():
            c = next(iter(curves(setting_rows, metric).values()))
            low, high = area_under_median_ci(c["values"])
            table.append(dict(method=method, setting=setting, auc=area_under_median(c), auc_low=low, auc_high=high,
                              final_median=float(c["median"][-1]), seeds=int(c["values"].shape[0])))
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    table.sort(key=lambda t: (t["method"], -sign * t["auc"]))
    return table


def best_per_method(ranking: list[dict], lower_is_better: bool = False) -> list[dict]:
    """Each method's best setting (the largest area, or the smallest for a metric of :data:`LOWER_IS_BETTER`)."""
    sign = -1.0 if lower_is_better else 1.0
    best = {}
    for t in ranking:
        if t["method"] not in best or sign * t["auc"] > sign * best[t["method"]]["auc"]:
            best[t["method"]] = t
    return sorted(best.values(), key=lambda t: -sign * t["auc"])


def tied_with_best(ranking: list[dict], best: dict, lower_is_better: bool = False) -> list[dict]:
    """The other settings of ``best``'s method whose area's 95% interval reaches the best's interval: the seeds do
    not tell them apart from the best (a sweep's selection is within noise when this is not empty)."""
    def reaches(t: dict) -> bool:
        if lower_is_better:  # ranked smallest first
            return t.get("auc_low", np.inf) <= best.get("auc_high", -np.inf)
        return t.get("auc_high", -np.inf) >= best.get("auc_low", np.inf)

    return [t for t in ranking if t["method"] == best["method"] and t is not best and reaches(t)]


def write_tables(out: Path, ranking: list[dict], metric: str) -> None:
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=["method", "setting", "auc", "auc_low", "auc_high", "final_median",
                                               "seeds"])
    writer.writeheader()
    writer.writerows(ranking)
    atomic_write_bytes(out / "settings.csv", table.getvalue().encode())
    lower = metric in LOWER_IS_BETTER
    order = " (the smallest: lower is better for it)" if lower else ""
    lines = [f"Best setting per method by area under the median {metric} curve{order} (the paper's protocol), with "
             "its 95% bootstrap interval over seeds. Settings whose interval reaches the best's are tied with it: the "
             "seeds do not tell them apart.", "",
             f"| method | best setting | area under median {metric} (95% CI) | final median | settings tried | "
             "tied with the best |",
             "|---|---|---|---|---|---|"]
    for t in best_per_method(ranking, lower):
        tried = sum(1 for r in ranking if r["method"] == t["method"])
        tied = ", ".join(r["setting"] for r in tied_with_best(ranking, t, lower)) or "none"
        lines.append(f"| {t['method']} | {t['setting']} | {t['auc']:.4g} ({t['auc_low']:.4g}, {t['auc_high']:.4g}) | "
                     f"{t['final_median']:.4g} | {tried} | {tied} |")
    atomic_write_bytes(out / "best.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
