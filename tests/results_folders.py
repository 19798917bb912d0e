"""Results folders written by hand in the trainer's format (``config.json`` and ``metrics.csv``), so that a
script's test runs the script itself on a folder whose answers are worked out by hand, and reads what it writes."""

from __future__ import annotations

import json
from pathlib import Path

from opiq_jax.store.files import CONFIG_FILE, METRICS_FILE
from opiq_jax.store.metrics import append_metric_rows

FIELDS = ("run", "method", "setting", "seed", "step", "metric", "value")


def tidy_row(run: int, method: str, seed: int, step: int, metric: str, value: float, setting: str = "paper") -> dict:
    return dict(run=run, method=method, setting=setting, seed=seed, step=step, metric=metric, value=value)


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
