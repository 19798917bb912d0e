"""Hyperparameter sweeps as few compiled programs as memory allows, and the paper's selection protocol.

A preset is a plain JSON file (the ones shipped live in ``opiq_jax/presets/``; copy one and edit it)::

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
import itertools
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .environments import method_hparams, static_for_env
from .methods import METHODS, get_method
from .plotting import area_under_median, curves
from .runner import (
    Experiment, RunSpec, available_device_bytes, is_finished, read_metrics, require_same_experiment, run_experiment,
    runs_that_fit, split_by_program, state_bytes_per_run,
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


def preset_names() -> list[str]:
    """Names of the presets shipped with the package."""
    return sorted(p.name.removesuffix(".json") for p in resources.files("opiq_jax.presets").iterdir()
                  if p.name.endswith(".json"))


def load_preset(name_or_path: str) -> Preset:
    """A shipped preset by name, or a JSON file by path; checked for unknown methods and fields."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        if not path.exists():
            raise ValueError(f"no preset file {path}")
        data = json.loads(path.read_text())
    elif name_or_path in preset_names():
        data = json.loads(resources.files("opiq_jax.presets").joinpath(f"{name_or_path}.json").read_text())
    else:
        raise ValueError(f"unknown preset {name_or_path!r}: use a JSON file or one of {', '.join(preset_names())}")
    static = {k: tuple(v) if isinstance(v, list) else v for k, v in data.get("static", {}).items()}
    preset = Preset(env=data["env"], seeds=int(data["seeds"]), metric=data.get("metric", "test_return"),
                    static=static, grids=tuple(data["grids"]), seed=int(data.get("seed", 0)))
    for g in preset.grids:
        if g["method"] not in METHODS:
            raise ValueError(f"preset names unknown method {g['method']!r}; known: {', '.join(METHODS)}")
        options = get_method(g["method"]).options()
        unknown = set(g.get("grid", {})) - set(options)
        if unknown:
            raise ValueError(f"preset grid for {g['method']} has hyperparameters its parts do not declare: "
                             f"{', '.join(sorted(unknown))} (it has {', '.join(options)})")
    if preset.seeds < 1:
        raise ValueError("a preset needs seeds >= 1")
    return preset


def setting_label(values: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in values.items()) or "paper"


def expand(preset: Preset) -> list[RunSpec]:
    """Every (method, setting, seed) of the preset, in a fixed order."""
    runs = []
    for g in preset.grids:
        grid = g.get("grid", {})
        for combo in itertools.product(*grid.values()):
            values = dict(zip(grid, (float(v) for v in combo)))
            hp = method_hparams(preset.env, g["method"], **values)
            runs += [RunSpec(g["method"], setting_label(values), s, hp) for s in range(preset.seeds)]
    return runs


def plan_batches(num_runs: int, per_run_bytes: int, free_bytes: int) -> int:
    """The fewest equal batches whose runs fit in ``free_bytes`` with the runner's headroom."""
    most = max(1, runs_that_fit(per_run_bytes, free_bytes))
    return math.ceil(num_runs / most)


def split(runs: list[RunSpec], num_batches: int) -> list[tuple[RunSpec, ...]]:
    """Equal batches (one compiled program for all); the last is padded by repeating its final run."""
    size = math.ceil(len(runs) / num_batches)
    batches = [tuple(runs[i : i + size]) for i in range(0, len(runs), size)]
    if len(batches[-1]) < size:  # pad so every batch has the same shape (the padding is not reported)
        batches[-1] = batches[-1] + (batches[-1][-1],) * (size - len(batches[-1]))
    return batches


def plan_sweep(preset: Preset, max_batch_runs: int | None = None) -> list[Experiment]:
    """The sweep as compiled batches: per program structure, the fewest equal batches that fit."""
    static = static_for_env(preset.env, **preset.static)
    free = available_device_bytes()
    batches = []
    for name, group in split_by_program(Experiment(static, tuple(expand(preset)), seed=preset.seed)).items():
        per_run = state_bytes_per_run(group.static)
        num_batches = plan_batches(len(group.runs), per_run, free)
        if max_batch_runs is not None:
            num_batches = max(num_batches, math.ceil(len(group.runs) / max_batch_runs))
        parts = split(list(group.runs), num_batches)
        print(f"sweep: {name}: {len(group.runs)} runs, {per_run / 2**20:.1f} MiB per run, {free / 2**30:.1f} GiB free "
              f"-> {len(parts)} batch(es) of {len(parts[0])} runs", flush=True)
        batches += [Experiment(group.static, part, seed=preset.seed) for part in parts]
    return batches


def run_sweep(preset: Preset, out: str | Path, progress: bool = True, max_batch_runs: int | None = None,
              checkpoint_seconds: float = 300.0) -> list[dict]:
    """Runs (or resumes) every batch, then writes ``settings.csv`` and ``best.md``; returns the ranking."""
    out = Path(out)
    runs = expand(preset)
    print(f"sweep: {len(runs)} runs ({len(runs) // preset.seeds} settings x {preset.seeds} seeds) on {preset.env}",
          flush=True)
    batches = plan_sweep(preset, max_batch_runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preset.json").write_text(json.dumps(preset.__dict__, indent=1, default=list))
    for i, batch in enumerate(batches):
        folder = out / f"{BATCH_PREFIX}{i:03d}"
        if (folder / "metrics.csv").exists() and is_finished(folder):
            require_same_experiment(folder, batch)
            print(f"sweep: batch {i + 1}/{len(batches)} already finished", flush=True)
            continue
        print(f"sweep: batch {i + 1}/{len(batches)}", flush=True)
        run_experiment(batch, folder, progress=progress, checkpoint_seconds=checkpoint_seconds)
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
    """Every (method, setting) with its area under the median curve of ``metric``, best first per method."""
    rows = sweep_rows(out)
    table = []
    for method in dict.fromkeys(r["method"] for r in rows):
        method_rows = [r for r in rows if r["method"] == method]
        per_setting = {}
        for r in method_rows:
            per_setting.setdefault(r["setting"], []).append(r)
        for setting, setting_rows in per_setting.items():
            c = next(iter(curves(setting_rows, metric).values()))
            table.append(dict(method=method, setting=setting, auc=area_under_median(c),
                              final_median=float(c["median"][-1]), seeds=int(c["values"].shape[0])))
    table.sort(key=lambda t: (t["method"], -t["auc"]))
    return table


def best_per_method(ranking: list[dict]) -> list[dict]:
    best = {}
    for t in ranking:
        if t["method"] not in best or t["auc"] > best[t["method"]]["auc"]:
            best[t["method"]] = t
    return sorted(best.values(), key=lambda t: -t["auc"])


def write_tables(out: Path, ranking: list[dict], metric: str) -> None:
    with open(out / "settings.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["method", "setting", "auc", "final_median", "seeds"])
        writer.writeheader()
        writer.writerows(ranking)
    lines = [f"Best setting per method by area under the median {metric} curve (the paper's protocol).", "",
             f"| method | best setting | area under median {metric} | final median | settings tried |",
             "|---|---|---|---|---|"]
    for t in best_per_method(ranking):
        tried = sum(1 for r in ranking if r["method"] == t["method"])
        lines.append(f"| {t['method']} | {t['setting']} | {t['auc']:.4g} | {t['final_median']:.4g} | {tried} |")
    (out / "best.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
