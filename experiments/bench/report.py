"""The closing files every benchmark of this folder writes: ``README.md`` (the command and the table) and
``run_info.json`` (the card, jax, the command, the wall-clock, the revision and the settings), portable paths only.

Reaches inside: opiq_jax.store.files, for its atomic writes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Callable

from opiq_jax.reporting import portable, source_revision
from opiq_jax.store.files import atomic_write_text


def keep_row(path: Path, device: str, settings, rows: list[dict], row: dict, name: str) -> None:
    """Appends ``row`` to ``rows``, says it on stderr (``name``, then its rate or its error), and saves every row so
    far with the card and the settings into ``path``: a call cut short keeps what it measured."""
    rows.append(row)
    print(f"{name}: {row.get('steps_per_s') or row['error']}", file=sys.stderr, flush=True)
    atomic_write_text(path, json.dumps(dict(device=device, settings=portable_settings(settings), rows=rows), indent=1))


def unless_out_of_memory(measure: Callable[[], dict], **row) -> dict:
    """``row`` with what ``measure()`` returns and ``error=None``, or with ``error="out of memory"`` where the card ran
    out (a wide row that does not fit is a result, not a crash); any other error propagates."""
    from opiq_jax.benchmark.throughput import is_out_of_memory

    try:
        return {**row, **measure(), "error": None}
    except Exception as error:  # XlaRuntimeError and friends
        if not is_out_of_memory(error):
            raise
        return {**row, "error": "out of memory"}


def compiles_note(timed: list[str]) -> list[str]:
    """The lines a table ends with where timed windows (``timed``: each named) held an XLA compile, whose rates are
    then too low; none where none did."""
    if not timed:
        return []
    return ["", "XLA compiles inside a timed window (those rates are too low): " + "; ".join(timed) + "."]


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
