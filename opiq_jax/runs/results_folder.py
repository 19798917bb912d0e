"""Reading a results folder: its experiment's folders, its metrics as one table, whether it finished, and whether
it holds the experiment about to train there.

A folder of per-program subfolders (``plain``, ``rnd``, ...) reads as one experiment, run ids numbered on across
the subfolders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..common.config import saved_defaults
from ..common.errors import ResultsError
from ..store.files import CHECKPOINT_FILE, CONFIG_FILE, checkpoint_chunk, is_scratch, read_json
from ..store.metrics import read_metric_dicts
from .experiment import Experiment


def experiment_folders(out: str | Path) -> list[Path]:
    """The results folders of an experiment: ``out`` itself, or every folder below it that holds a config
    (per-structure subfolders, and the per-process folders of a run over several hosts)."""
    out = Path(out)
    if (out / CONFIG_FILE).exists():
        return [out]
    return sorted(config.parent for config in out.rglob(CONFIG_FILE)) if out.is_dir() else []


def read_metrics(out: str | Path) -> list[dict]:
    """The tidy metrics table of a results folder as a list of dicts (value as float).

    A folder of per-program subfolders (see :func:`run_methods`) reads as one table, run ids numbered on
    across the subfolders.
    """
    out = Path(out)
    folders = experiment_folders(out)
    if not folders:
        if not out.exists():
            raise FileNotFoundError(f"{out} does not exist")
        raise FileNotFoundError(f"{out} holds no results (no {CONFIG_FILE} in it or below it)")
    table, offset = [], 0
    for folder in folders:
        rows = read_metric_dicts(folder)
        for r in rows:
            r["run"], r["seed"], r["step"], r["value"] = (
                offset + int(r["run"]), int(r["seed"]), int(r["step"]), float(r["value"]))
        table += rows
        offset += len(read_json(folder / CONFIG_FILE)["runs"])
    return table


def is_finished(out: str | Path) -> bool:
    """Whether the results folder (every per-program subfolder) holds the metrics of the last chunk and, where it
    keeps a checkpoint, the last chunk's checkpoint (a process killed between the two has not finished)."""
    folders = experiment_folders(out)
    for folder in folders:
        config = read_json(folder / CONFIG_FILE)["static"]
        rows = read_metrics(folder)
        if not rows or max(r["step"] for r in rows) < config["total_steps"]:
            return False
        if (folder / CHECKPOINT_FILE).exists():
            chunk = checkpoint_chunk(folder / CHECKPOINT_FILE)
            if chunk is None or chunk * config["log_every"] < config["total_steps"]:
                return False
    return bool(folders)


def program_finished(folder: Path) -> bool:
    """Whether ``folder`` holds a program's configuration and its last chunk (a program to skip on a resume)."""
    return (folder / CONFIG_FILE).exists() and is_finished(folder)


def same_experiment(saved: dict, config: dict) -> bool:
    """Whether a saved ``config.json`` describes ``config``; static fields added since it was written (absent from
    it) count as they were before (:func:`saved_defaults`), and neither where its plugins live nor what ``auto``
    resolved to (``resolved``: a run resumed on another device may resolve it otherwise) matters."""
    defaults = saved_defaults()
    static = {k: v for k, v in config["static"].items()
              if k in saved.get("static", {}) or json.loads(json.dumps(v)) != json.loads(json.dumps(defaults.get(k)))}
    def unplugged(c: dict) -> dict:  # where plugins live, and what auto resolved to on a device, may differ
        return {k: v for k, v in c.items() if k not in ("plugins", "resolved", DIGEST_KEY)}

    return unplugged(saved) == unplugged(json.loads(json.dumps({**config, "static": static})))


DIGEST_KEY = "experiment_sha256"
"""The key of ``config.json`` that holds :func:`experiment_digest` of the experiment as it trained."""


def experiment_digest(config: dict) -> str:
    """SHA-256 of what a ``config.json`` says was trained (static configuration, seeds, runs), written beside it when
    the runs start: a file edited afterwards no longer matches it."""
    trained = {k: config.get(k) for k in ("static", "seed", "shared_mask_seed", "runs")}
    return hashlib.sha256(json.dumps(trained, sort_keys=True).encode()).hexdigest()


def edited_after_training(saved: dict) -> bool:
    """Whether a saved ``config.json`` was changed after its runs started (its digest no longer matches it)."""
    return DIGEST_KEY in saved and saved[DIGEST_KEY] != experiment_digest(saved)


def require_same_experiment(out: Path, experiment: Experiment, say: Callable[[str], None] | None = None) -> bool:
    """A one-line :class:`ResultsError` when ``out`` already holds the results of another experiment, or a
    ``config.json`` edited after its runs trained. The configuration of one that never trained (nothing but
    ``config.json``: it stopped before its first chunk) is no result: it is replaced, with a line through ``say``.
    Returns whether ``out``'s ``config.json`` already describes ``experiment`` (False: none, or one to replace)."""
    path = Path(out) / CONFIG_FILE
    saved = read_json(path) if path.exists() else None
    if saved is not None and edited_after_training(saved):
        raise ResultsError(f"{path} was edited after its runs trained (it no longer matches the record written with "
                           "them), so its metrics are not of what it now says: train the edited configuration into a "
                           "new --out, or restore the file")
    if saved is not None and not same_experiment(saved, experiment.to_json()):
        if say is None or any(not is_scratch(e.name) and e.name != CONFIG_FILE for e in Path(out).iterdir()):
            raise ResultsError(f"{out} holds a different experiment: choose another --out or delete it")
        say(f"opiq-jax: {out} held the configuration of another experiment, which never trained: replacing it")
        return False
    return saved is not None
