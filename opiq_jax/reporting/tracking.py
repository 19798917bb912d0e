"""Live tracking of a training: each chunk's aggregates per method streamed to TensorBoard (optional extra).

Off by default (``make_tracker("none", ...)`` gives None). ``"tensorboard"`` writes event files under
``<out>/tensorboard/<group>/``: one TensorBoard run per method (per method and setting when a method has
several settings), so TensorBoard overlays the methods on each chart. Experiments hold thousands of runs, so
runs are never logged one by one: per group and chunk, the median, IQM (:func:`opiq_jax.reporting.stats.iqm`) and the
25%/75% quartiles across runs of the main metrics (:data:`TRACKED_METRICS`, those the chunk has), under tags
``<metric>/median``, ``<metric>/iqm``, ``<metric>/q25``, ``<metric>/q75``. Each group's run also holds the
resolved configuration as text (tag ``config``): the static configuration, the group's hyperparameters and seeds.

The writer is ``tensorboardX`` (small: numpy, packaging and protobuf), installed by the ``tracking`` extra:
``pip install -e '.[tracking]'``. A chunk's metric is NaN for a run where no episode has ended yet; such runs
are left out of the aggregates, and a metric with no finite value in a group is not logged for that chunk.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Protocol

import numpy as np

from ..common.errors import UsageError
from .stats import iqm

TRACKERS = ("none", "tensorboard")
TRACKED_METRICS = ("train_return", "test_return", "states_visited", "rooms_visited", "loss")
"""The metrics streamed, where the chunk has them: the returns, the exploration measures and the TD loss."""
AGGREGATES = ("median", "iqm", "q25", "q75")
MISSING_EXTRA = "--track tensorboard needs the tracking extra: pip install -e '.[tracking]'"


class Tracker(Protocol):
    """What the runner calls: once per chunk with every run's metrics, and once at the end."""

    def log_chunk(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        """``metrics[name]`` has one value per run (the runs axis of config["runs"]); NaN = no episode ended yet."""

    def close(self) -> None:
        """Flushes and closes the files."""


def aggregates(values: np.ndarray) -> dict[str, float] | None:
    """Median, IQM and 25%/75% quartiles of the finite values, or None when there is none."""
    finite = np.asarray(values, dtype=float).ravel()
    finite = finite[~np.isnan(finite)]
    if finite.size == 0:
        return None
    q25, median, q75 = np.quantile(finite, [0.25, 0.5, 0.75])
    return dict(median=float(median), iqm=float(iqm(finite)), q25=float(q25), q75=float(q75))


def run_groups(runs: list[dict]) -> dict[str, np.ndarray]:
    """Per group label (``method``, or ``method [setting]`` when some method has several settings, as the
    figures label them), the indices of its runs in the runs axis."""
    settings = defaultdict(set)
    for run in runs:
        settings[run["method"]].add(run["setting"])
    with_setting = any(len(s) > 1 for s in settings.values())
    groups: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        groups[f"{run['method']} [{run['setting']}]" if with_setting else run["method"]].append(i)
    return {label: np.array(indices) for label, indices in groups.items()}


def folder_name(label: str, taken: set[str]) -> str:
    """A safe, unique folder name for a group label (settings hold ``=``, ``,`` and spaces)."""
    name = re.sub(r"[^\w.=,+-]+", "_", label).strip("_") or "group"
    unique, i = name, 1
    while unique in taken:
        i += 1
        unique = f"{name}_{i}"
    taken.add(unique)
    return unique


def config_text(config: dict, runs: list[int], label: str) -> str:
    """The resolved configuration of one group (its run indices ``runs``) as Markdown for TensorBoard's text tab."""
    first = config["runs"][runs[0]] if runs else {}
    seeds = sorted({config["runs"][i]["seed"] for i in runs})
    static = {k: v for k, v in config.items() if k != "runs"}
    body = json.dumps(dict(group=label, runs=len(runs), seeds=seeds, hparams=first.get("hparams", {}), **static),
                      indent=1, sort_keys=True, default=str)
    return "\n".join("    " + line for line in body.splitlines())  # an indented block: shown verbatim


class TensorBoardTracker:
    """One tensorboardX writer per group; see the module docstring for the layout and tags."""

    def __init__(self, out: Path, config: dict):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise UsageError(MISSING_EXTRA) from None
        self.groups = run_groups(config["runs"])
        self.num_runs = len(config["runs"])
        root, taken = Path(out) / "tensorboard", set()
        self.writers = {label: SummaryWriter(str(root / folder_name(label, taken))) for label in self.groups}
        for label, writer in self.writers.items():
            writer.add_text("config", config_text(config, list(self.groups[label]), label), 0)
            writer.flush()

    def log_chunk(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        for name in TRACKED_METRICS:
            if name not in metrics:
                continue
            values = np.asarray(metrics[name], dtype=float)
            if values.shape[:1] != (self.num_runs,):
                raise ValueError(f"metric {name} has shape {values.shape}; "
                                 f"expected one value per run ({self.num_runs})")
            for label, indices in self.groups.items():
                summary = aggregates(values[indices])
                for key, value in (summary or {}).items():
                    self.writers[label].add_scalar(f"{name}/{key}", value, step)
        for writer in self.writers.values():  # streamed: visible in TensorBoard after every chunk
            writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def make_tracker(kind: str, out: Path, config: dict) -> Tracker | None:
    """The tracker ``kind`` names for a results folder ``out`` and its config.json dict ``config``: None for
    ``"none"``; for ``"tensorboard"`` event files under ``out / "tensorboard"``. A missing package or an unknown
    kind raises :class:`UsageError`."""
    if kind == "none":
        return None
    if kind == "tensorboard":
        with warnings.catch_warnings():  # protobuf's and tensorboardX's import-time deprecation notices
            warnings.simplefilter("ignore", DeprecationWarning)
            return TensorBoardTracker(Path(out), config)
    raise UsageError(f"unknown tracker {kind!r}: use one of {', '.join(TRACKERS)}")


__all__ = ["AGGREGATES", "MISSING_EXTRA", "TRACKED_METRICS", "TRACKERS", "TensorBoardTracker", "Tracker",
           "aggregates", "make_tracker"]
