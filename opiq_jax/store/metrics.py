"""``metrics.csv``, the tidy table of a results folder, guarded like the checkpoints.

* It only grows, by one chunk's rows in one write; a failed append is cut back (:func:`append_bytes`).
* Every checkpoint records how much of it the checkpoint covers (rows, bytes and their SHA-256) and keeps a
  compressed copy of those bytes. This process keeps both up to date as it appends (:class:`MetricsLedger`), so
  a checkpoint neither reads the file again nor compresses it whole.
* On resume (:func:`resume_metrics`) the file must begin with exactly the bytes the checkpoint covers; the rows
  after them (chunks trained after the checkpoint) go, as they are trained again. A file that is missing, short,
  cut mid-line, without its header or changed is set aside and the covered rows are restored from the copy,
  with one line saying so: a resume never trains on past a gap.
* Rows that no checkpoint covers (the checkpoints were deleted or all damaged) are never deleted: a run whose
  rows reach its last step is finished; any other such file is set aside, named in one line.

Fields are CSV-quoted where they need it (setting labels hold commas, quotes, any unicode), with one line ending.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.errors import ResultsError
from .files import METRICS_FILE, METRICS_HEADER_LINE, append_bytes, aside, atomic_write_bytes

METRICS_HEADER = ("run", "method", "setting", "seed", "step", "metric", "value")
HEADER_BYTES = METRICS_HEADER_LINE


def csv_text(rows: Iterable[Iterable[Any]]) -> str:
    """``rows`` as CSV (quoted where a field needs it, CRLF line endings): the one way metrics are written."""
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def parse_metric_rows(text: str) -> list[list[str]]:
    """The well-formed data rows of a metrics file's text; the header, when there is one, and a torn last row
    are left out."""
    if not text.endswith("\n"):  # a torn append: its unterminated last line goes
        text = text[: text.rfind("\n") + 1]
    rows = []
    try:
        for row in csv.reader(io.StringIO(text, newline="")):
            rows.append(row)
    except csv.Error:  # an unterminated quote at the end of a torn write
        pass
    if rows and tuple(rows[0]) == METRICS_HEADER:
        rows = rows[1:]
    return [r for r in rows if len(r) == len(METRICS_HEADER) and r[4].isdigit()]


def read_metric_dicts(folder: Path) -> list[dict]:
    """The raw rows of one folder's ``metrics.csv`` (or ``metrics.csv.gz``, as results are committed)."""
    for path, opener in ((folder / METRICS_FILE, open), (folder / f"{METRICS_FILE}.gz", gzip.open)):
        if path.exists():
            with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
                rows = parse_metric_rows(f.read())
            return [dict(zip(METRICS_HEADER, r)) for r in rows]
    return []


# ------------------------------------------------------------------------------------ what a checkpoint keeps


@dataclass(frozen=True)
class MetricsRecord:
    """How much of ``metrics.csv`` a checkpoint covers: its first ``size`` bytes, ``rows`` rows, and their hash."""

    rows: int
    size: int
    sha256: str

    def to_json(self) -> dict:
        return {"rows": self.rows, "bytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: dict) -> MetricsRecord:
        return cls(rows=int(data["rows"]), size=int(data["bytes"]), sha256=str(data["sha256"]))

    def covers(self, data: bytes) -> bool:
        """Whether ``data`` begins with exactly the bytes this record covers."""
        return len(data) >= self.size and hashlib.sha256(data[: self.size]).hexdigest() == self.sha256


class MetricsLedger:
    """What this process knows ``metrics.csv`` holds: its length, rows, SHA-256 and a compressed copy, each kept up
    to date as rows are appended, so that a checkpoint records and keeps them at no cost proportional to the file."""

    def __init__(self, data: bytes = b"", rows: int = 0):
        self.size, self.rows = 0, 0
        self._digest, self._zip, self._compressed = hashlib.sha256(), zlib.compressobj(6), bytearray()
        self.add(data, rows)

    def add(self, data: bytes, rows: int) -> None:
        """``data`` (holding ``rows`` rows) was appended to the file."""
        self.size, self.rows = self.size + len(data), self.rows + rows
        self._digest.update(data)
        self._compressed += self._zip.compress(data)

    def record(self) -> MetricsRecord:
        return MetricsRecord(rows=self.rows, size=self.size, sha256=self._digest.hexdigest())

    def copy(self) -> bytes:
        """Every byte so far as one zlib stream (the compressor is copied, so it goes on compressing after)."""
        return bytes(self._compressed) + self._zip.copy().flush()

    def checkpoint_part(self) -> tuple[dict, bytes]:
        """``(record, copy)`` as a checkpoint stores them (:func:`opiq_jax.store.files.write_checkpoint`)."""
        return self.record().to_json(), self.copy()


def append_metric_rows(path: Path, rows: list[tuple], ledger: MetricsLedger | None = None) -> str | None:
    """Appends one chunk's rows (the header first, for a new file) in a single write; ``ledger`` is told.

    With a ``ledger``, the file must be what it holds: a file that someone deleted, cut or grew while the run
    went on is first put back from the ledger's copy (the file found set aside), so that the rows appended, the
    checkpoints' record and their copy stay one table. Returns a line saying so, or None.
    """
    said = None if ledger is None else repair_behind_ledger(path, ledger)
    new = (ledger.size == 0) if ledger is not None else (not path.exists() or path.stat().st_size == 0)
    data = csv_text(([METRICS_HEADER] if new else []) + rows).encode("utf-8")
    append_bytes(path, data)
    if ledger is not None:
        ledger.add(data, len(rows))
    return said


def repair_behind_ledger(path: Path, ledger: MetricsLedger) -> str | None:
    """Puts ``metrics.csv`` back as the ledger holds it when its size says it was changed behind the run's back."""
    size = path.stat().st_size if path.exists() else 0
    if size == ledger.size:
        return None
    kept = aside(path, "changed") if path.exists() else None
    atomic_write_bytes(path, zlib.decompress(ledger.copy()))
    return (f"opiq-jax: {path} was {'changed' if kept else 'deleted'} while the run went on: put back its "
            f"{ledger.rows:,} rows from this run's copy"
            + (f" (the file found is kept as {kept.name})" if kept else ""))


# ------------------------------------------------------------------------------------ resuming


def problem_with(data: bytes | None, record: MetricsRecord, copy: bytes) -> str:
    """What is wrong with a metrics file that does not begin with the checkpoint's bytes (``copy``), in a few
    words."""
    if data is None:
        return "missing"
    if not data:
        return "empty"
    if not (data.startswith(HEADER_BYTES) or HEADER_BYTES.startswith(data)):
        return "without its header"
    if len(data) < record.size and copy.startswith(data):
        if not data.endswith(b"\n"):
            return "cut mid-line"
        return f"short ({len(parse_metric_rows(text_of(data))):,} of the {record.rows:,} rows the checkpoint covers)"
    return "different from the rows the checkpoint covers"


def text_of(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def resume_metrics(path: Path, record: MetricsRecord, copy: bytes, step: int, say: Callable[[str], None]
                   ) -> MetricsLedger:
    """``metrics.csv`` as of the checkpoint (at ``step``): its rows after the checkpoint dropped, or, when the file
    does not begin with the covered bytes, restored from the checkpoint's copy (the file found set aside)."""
    data = path.read_bytes() if path.exists() else None
    if data is not None and record.covers(data):
        if len(data) > record.size:  # rows of chunks trained after the checkpoint: trained again
            atomic_write_bytes(path, data[: record.size])
        return MetricsLedger(data[: record.size], record.rows)
    restored = zlib.decompress(copy)
    if not record.covers(restored):
        raise ResultsError(f"the checkpoint's copy of {path.name} does not match its record: move the folder away")
    problem = problem_with(data, record, restored)
    kept = aside(path, "damaged") if data is not None else None
    atomic_write_bytes(path, restored)
    say(f"opiq-jax: {path} was {problem}: restored its {record.rows:,} rows up to step {step:,} from the checkpoint's "
        "copy" + (f" (the file found is kept as {kept.name})" if kept else ""))
    return MetricsLedger(restored, record.rows)


def resume_metrics_without_copy(path: Path, step: int, runs: int, log_every: int) -> MetricsLedger:
    """``metrics.csv`` for a checkpoint written before checkpoints kept a copy of it: the rows up to ``step`` kept,
    provided every run has every chunk's rows up to there; else a one-line :class:`ResultsError`."""
    data = path.read_bytes() if path.exists() else b""
    rows = [r for r in parse_metric_rows(text_of(data)) if int(r[4]) <= step]
    present = {(int(r[0]), int(r[4])) for r in rows if r[0].isdigit()}
    missing = [(run, s) for s in range(log_every, step + 1, log_every) for run in range(runs)
               if (run, s) not in present]
    if missing:
        raise ResultsError(
            f"{path} lacks rows its checkpoint covers (run {missing[0][0]} at step {missing[0][1]:,} first), and that "
            "checkpoint was written by an earlier opiq-jax, which kept no copy of the metrics: put the file back, or "
            "move the folder away to start over")
    kept = csv_text([METRICS_HEADER, *rows]).encode("utf-8")
    if kept != data:
        atomic_write_bytes(path, kept)
    return MetricsLedger(kept, len(rows))


def covered_steps(rows: list[list[str]], runs: int, log_every: int) -> int:
    """The last step up to which every one of ``runs`` runs has a row for every chunk (0 if none)."""
    present = {(int(r[0]), int(r[4])) for r in rows if r[0].isdigit()}
    step = 0
    while all((run, step + log_every) in present for run in range(runs)):
        step += log_every
    return step


def rows_without_checkpoint(path: Path, runs: int, log_every: int) -> tuple[int, int]:
    """``(rows, steps every run has)`` of a ``metrics.csv`` that no checkpoint covers."""
    if not path.exists():
        return 0, 0
    rows = parse_metric_rows(text_of(path.read_bytes()))
    return len(rows), covered_steps(rows, runs, log_every)


def set_aside_uncovered(path: Path, say: Callable[[str], None]) -> None:
    """Moves a ``metrics.csv`` that no checkpoint covers out of the way before training from step 0, saying where."""
    kept = aside(path, "uncovered")
    say(f"opiq-jax: {path} holds rows that no checkpoint covers (its checkpoints were deleted or damaged): kept it as "
        f"{kept.name} and training from step 0")


__all__ = [
    "METRICS_HEADER", "MetricsLedger", "MetricsRecord", "append_metric_rows", "csv_text", "parse_metric_rows",
    "read_metric_dicts", "resume_metrics", "resume_metrics_without_copy", "rows_without_checkpoint",
    "set_aside_uncovered",
]
