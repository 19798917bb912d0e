"""The closing files every benchmark of this folder writes: ``README.md`` (the command and the table) and
``run_info.json`` (the card, jax, the command, the wall-clock, the revision and the settings), portable paths only.

Reaches inside: opiq_jax.store.files, for its atomic writes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from opiq_jax.reporting import portable, source_revision
from opiq_jax.store.files import atomic_write_text


def portable_settings(settings) -> dict:
    """The parsed arguments (a dataclass) as JSON, every path in them (``--out``, ``--trees LABEL=FOLDER``) without
    this machine's absolute path."""
    def shown(value):
        if isinstance(value, list):
            return [shown(v) for v in value]
        if isinstance(value, str):
            label, sep, path = value.rpartition("=")
            return f"{label}{sep}{portable(path)}"
        return value
    plain = json.loads(json.dumps(dataclasses.asdict(settings), default=str))
    return {key: shown(value) for key, value in plain.items()}


def write_report(out: Path, title: str, command: str, text: str, device: str, started: float, settings) -> None:
    """Writes ``out/README.md`` and ``out/run_info.json``; ``started`` is the ``time.perf_counter()`` of the start
    and ``settings`` the parsed arguments (a dataclass with an ``out`` field)."""
    import jax  # the caller has started the backend already; the version names what timed the rows

    atomic_write_text(out / "README.md", f"# {title}\n\n`{command}`\n\n{text}\n")
    atomic_write_text(out / "run_info.json", json.dumps(dict(
        device=device, jax=jax.__version__, command=command, wall_seconds=round(time.perf_counter() - started),
        **source_revision(), settings=portable_settings(settings)),
        indent=1))
