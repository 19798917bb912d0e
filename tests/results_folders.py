"""Results folders written by hand in the trainer's format (``config.json`` and ``metrics.csv``), so that a
script's test runs the script itself on a folder whose answers are worked out by hand, and reads what it writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opiq_jax.store.files import CONFIG_FILE, METRICS_FILE
from opiq_jax.store.metrics import append_metric_rows

FIELDS = ("run", "method", "setting", "seed", "step", "metric", "value")


def tidy_row(run: int, method: str, seed: int, step: int, metric: str, value: float, setting: str = "paper") -> dict:
    return dict(run=run, method=method, setting=setting, seed=seed, step=step, metric=metric, value=value)


def curve_rows(curves: dict[str, list[list[float]]], steps: Sequence[int],
               metrics: Sequence[str] = ("train_return",)) -> list[dict]:
    """Tidy rows of ``curves[method][seed]``, each curve logged at ``steps``, the same curve for every metric in
    ``metrics``; runs numbered in order."""
    runs = [(method, seed, curve) for method, per_seed in curves.items() for seed, curve in enumerate(per_seed)]
    return [tidy_row(run, method, seed, step, metric, value) for run, (method, seed, curve) in enumerate(runs)
            for step, value in zip(steps, curve, strict=True) for metric in metrics]


def write_folder(folder: Path, rows: list[dict], **static) -> Path:
    """``folder`` holding ``rows`` (tidy dicts, keys :data:`FIELDS`) as ``metrics.csv`` and a ``config.json`` whose
    runs are the rows' runs (in order of their ids) and whose static part is ``static``."""
    folder.mkdir(parents=True)
    runs: dict[int, dict] = {}
    for r in rows:
        runs.setdefault(r["run"], dict(run=r["run"], method=r["method"], setting=r["setting"], seed=r["seed"],
                                       hparams={}))
    config = dict(static=static, seed=0, runs=[runs[k] for k in sorted(runs)])
    (folder / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
    append_metric_rows(folder / METRICS_FILE, [tuple(r[k] for k in FIELDS) for r in rows])
    return folder
