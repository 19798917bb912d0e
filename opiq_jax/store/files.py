"""A results folder's files, written so that nothing is lost whatever stops a run.

* Every whole-file write is atomic: a temporary file in the same folder, flushed and synced, then renamed
  over the old one (a kill mid-write leaves the old file; a full disk leaves it too, and the temporary file
  is removed).
* ``metrics.csv`` only grows by appending one chunk's rows in one write; a failed append is cut back to
  the file's previous length (:mod:`opiq_jax.store.metrics` keeps it in step with the checkpoints).
* Checkpoints are checksummed and the last two are kept: a truncated or corrupt newest checkpoint is
  reported by name, moved aside, and the run resumes from the one before. A checkpoint streams one array at
  a time (a Montezuma replay holds gigabytes), so it never needs a second copy of the state in memory; a pool's
  frame rings go apart, as segments of what changed (:mod:`opiq_jax.store.frames`). It also records how much of
  ``metrics.csv`` it covers and keeps a compressed copy of those rows.
* A checkpoint of a state with frame rings can be written while training goes on
  (:class:`BackgroundCheckpoints`): the new frames and the other leaves are copied to the host first, since the
  next chunk updates the state in place.
* A folder is written only when it is new, empty or already an opiq-jax experiment of the same kind: a
  user's own files are never overwritten (:func:`prepare_folder`).
* A lock file: two processes cannot write one folder; a lock left by a killed process is detected (the
  operating system releases a dead process's lock) and taken over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..common.errors import ResultsError, Stopped
from .frames import SEGMENTS_FOLDER, DamagedSegment, FrameRings, PendingSegment, Segment, assemble

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
CHECKPOINT_FILE = "checkpoint.msgpack"
PREVIOUS_CHECKPOINT_FILE = "checkpoint.previous.msgpack"
RUN_INFO_FILE = "run_info.json"
LOCK_FILE = ".lock"
PRESET_FILE = "preset.json"

METRICS_HEADER_LINE = b"run,method,setting,seed,step,metric,value\r\n"  # metrics.csv's first line (store.metrics)

CHECKPOINT_MAGIC = b"OPIQCKP2"  # the streamed, checksummed format (tests/ and experiments/ read it too)


# ------------------------------------------------------------------------------------ writing files


def write_all(f, data: bytes) -> None:
    """Writes ``data`` to the open binary file ``f`` (one place, so that tests can make it fail)."""
    f.write(data)


def fsync_folder(folder: Path) -> None:
    """Makes a rename in ``folder`` durable (where the platform allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def named_after(error: BaseException, path: Path, *stand_ins: Path) -> None:
    """Gives an :class:`OSError` of a write the name of the file it was writing, where it has none (a full disk, a
    file-size limit: ``write`` names no file) or names a temporary stand-in: a user is told which file failed."""
    if isinstance(error, OSError) and (error.filename is None or error.filename in map(str, stand_ins)):
        error.filename = str(path)


def atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> None:
    """Writes ``chunks`` to ``path`` atomically: a temporary file beside it, synced, then renamed over it.

    Any failure (a full disk, an error producing the chunks) removes the temporary file and leaves the
    old ``path`` as it was; an :class:`OSError` names ``path``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                write_all(f, chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        named_after(e, path, tmp)
        raise
    fsync_folder(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write_chunks(path, [data])


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_chunks(path, [text.encode("utf-8")])


def append_bytes(path: Path, data: bytes) -> None:
    """Appends ``data`` in one write; if it fails (a full disk) the file is cut back to its previous length (an
    :class:`OSError` names ``path``)."""
    with open(path, "ab") as f:
        size = f.tell()
        try:
            write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        except BaseException as e:
            f.truncate(size)
            named_after(e, path)
            raise


# ------------------------------------------------------------------------------------ config.json


def read_json(path: Path) -> Any:
    """``path`` parsed, or a one-line :class:`ResultsError` that names the file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path} is not valid JSON ({e}); repair it or move the folder away") from None
    except OSError as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror or e}") from None


@dataclass(frozen=True)
class OlderLayout:
    """A ``config.json`` layout that this version cannot build an experiment from (its metrics still read)."""

    written_by: str
    """Which opiq-jax wrote it, for messages."""
    reads_it: str
    """The last opiq-jax that builds its experiment (restores, resumes, re-runs it)."""
    recognised: Callable[[dict], bool]
    """Whether a ``static`` section is of this layout."""
    program: Callable[[dict], str]
    """The program (results subfolder) a ``static`` section of this layout trained."""
    per_program: tuple[str, ...]
    """The ``static`` fields that differ between the programs of one experiment in this layout."""


def bonus_network_program(static: dict) -> str:
    """The program of a ``static`` section that names a bonus_network (BSP: its heads)."""
    if isinstance(static.get("bsp_heads"), int) and static["bsp_heads"] > 0:
        return "bsp"
    return "plain" if static.get("bonus_network") in (None, "none") else str(static["bonus_network"])


OLDER_LAYOUTS = (
    OlderLayout("an opiq-jax from before 28a7929 (2026-11-26, when the methods became parts: it names a "
                "bonus_network, not parts)", "opiq-jax at commit 28a7929~1",
                lambda static: "parts" not in static and "bonus_network" in static, bonus_network_program,
                ("bonus_network", "bsp_heads")),
)


def older_layout(config: Any) -> OlderLayout | None:
    """The older layout of the parsed ``config.json`` ``config`` (None: this version's, or not a config.json at all,
    which the reading of it names)."""
    static = config.get("static") if isinstance(config, dict) else None
    if not isinstance(static, dict):
        return None
    return next((layout for layout in OLDER_LAYOUTS if layout.recognised(static)), None)


# ------------------------------------------------------------------------------------ checkpoints


def _leaf_header(path: str, x: Any) -> dict:
    return {"path": path, "shape": list(np.shape(x)), "dtype": jnp.dtype(x.dtype).name}


def checkpoint_chunks(state: Any, chunk: int, metrics: tuple[dict, bytes] | None = None,
                      apart: dict[str, dict] | None = None) -> Iterator[bytes]:
    """The checkpoint of ``state`` (arrays only: typed PRNG keys as their data) after ``chunk`` chunks, as a
    stream: magic, header, each array, the metrics' compressed copy, SHA-256. ``metrics``: the record of the
    ``metrics.csv`` rows the checkpoint covers and their copy (:meth:`MetricsLedger.checkpoint_part`).
    ``apart``: leaves stored in files of their own (frame rings, :mod:`opiq_jax.store.frames`), by key path, with
    what the header says of them instead of their bytes.

    Arrays are fetched from the device one at a time, so the host never holds a copy of the whole state.
    """
    apart = apart or {}
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    fields = {"chunk": chunk, "leaves": [{**_leaf_header(jax.tree_util.keystr(p), x),
                                         **apart.get(jax.tree_util.keystr(p), {})} for p, x in leaves]}
    if metrics is not None:
        fields["metrics"] = {**metrics[0], "copy": len(metrics[1])}
    header = json.dumps(fields)
    digest = hashlib.sha256()

    def emit(data: bytes) -> bytes:
        digest.update(data)
        return data

    yield emit(CHECKPOINT_MAGIC + struct.pack("<Q", len(header)) + header.encode())
    for path, leaf in leaves:
        if jax.tree_util.keystr(path) not in apart:
            yield emit(np.ascontiguousarray(jax.device_get(leaf)).tobytes())
    if metrics is not None:
        yield emit(metrics[1])
    yield digest.digest()


@dataclass
class PreparedCheckpoint:
    """A checkpoint ready to write: its folder, chunk and state (device arrays, or host copies when taken), the
    metrics record, and the frame segment it lists (:class:`opiq_jax.store.frames.PendingSegment`)."""

    folder: Path
    state: Any
    chunk: int
    metrics: tuple[dict, bytes] | None
    rings: FrameRings | None
    segment: PendingSegment | None

    def write(self) -> None:
        """The segment, then the checkpoint that lists it, atomically (the one before it kept as
        ``checkpoint.previous.msgpack``); then the segments neither checkpoint lists any more are deleted."""
        apart = {}
        if self.segment is not None:
            apart[self.rings.frames_path] = self.rings.write(self.folder, self.segment, atomic_write_chunks)
        tmp = self.folder / f".{CHECKPOINT_FILE}.new"
        try:
            atomic_write_chunks(tmp, checkpoint_chunks(self.state, self.chunk, self.metrics, apart))
        except OSError as e:  # a full disk names the checkpoint, not its stand-in
            named_after(e, self.folder / CHECKPOINT_FILE, tmp)
            raise
        if (self.folder / CHECKPOINT_FILE).exists():
            os.replace(self.folder / CHECKPOINT_FILE, self.folder / PREVIOUS_CHECKPOINT_FILE)
        os.replace(tmp, self.folder / CHECKPOINT_FILE)
        fsync_folder(self.folder)
        if (self.folder / SEGMENTS_FOLDER).is_dir():
            delete_unlisted_segments(self.folder)


def prepare_checkpoint(folder: Path, state: Any, chunk: int, metrics: tuple[dict, bytes] | None = None,
                       rings: FrameRings | None = None, frames_bound: int = 0,
                       taken_now: bool = False) -> PreparedCheckpoint:
    """The checkpoint of ``state`` after ``chunk`` chunks, ready to write. ``rings``: the state's frame rings, saved
    apart as what changed (at most ``frames_bound`` frames per ring since the last checkpoint;
    :mod:`opiq_jax.store.frames`). ``taken_now``: everything the write reads is copied to the host now (the new
    frames and the other leaves), so that it may be written while the state is donated to the next chunk; else the
    arrays are read as they are written, one at a time."""
    folder, segment = Path(folder), None
    if rings is not None:
        leaves = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(state)[0]}
        segment = rings.prepare(leaves, frames_bound, f"seg-{chunk:09d}-{time.time_ns()}.bin", taken_now)
    if taken_now:
        apart = rings.frames_path if rings is not None else None
        state = jax.tree_util.tree_map_with_path(
            lambda p, x: jax.ShapeDtypeStruct(x.shape, x.dtype) if jax.tree_util.keystr(p) == apart
            else np.array(x, copy=True), state)
    return PreparedCheckpoint(folder, state, chunk, metrics, rings, segment)


def write_checkpoint(folder: Path, state: Any, chunk: int, metrics: tuple[dict, bytes] | None = None,
                     rings: FrameRings | None = None, frames_bound: int = 0) -> None:
    """Writes the checkpoint now (:func:`prepare_checkpoint`, then :meth:`PreparedCheckpoint.write`)."""
    prepare_checkpoint(folder, state, chunk, metrics, rings, frames_bound).write()


class BackgroundCheckpoints:
    """Writes prepared checkpoints from a thread of their own while training goes on, one at a time: starting
    one waits for the one before, and :meth:`wait` returns once the last is on disk, raising what its write
    raised. The thread is a daemon: a process that ends at once (a second signal, a kill) leaves a write cut off,
    which a resume handles as it handles a SIGKILL mid-write (the checkpoint before it is used)."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, prepared: PreparedCheckpoint, on_written: Callable[[], None]) -> None:
        self.wait()

        def write():
            try:
                prepared.write()
                on_written()
            except BaseException as e:  # handed to the main thread by wait()
                self._error = e

        self._thread = threading.Thread(target=write, name=f"checkpoint {prepared.chunk}", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def checkpoint_header(path: Path) -> dict | None:
    """A checkpoint file's header alone (None if it has no readable one)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(CHECKPOINT_MAGIC) + 8)
            if len(head) < len(CHECKPOINT_MAGIC) + 8 or not head.startswith(CHECKPOINT_MAGIC):
                return None
            (header_len,) = struct.unpack("<Q", head[len(CHECKPOINT_MAGIC):])
            return json.loads(f.read(header_len))
    except (OSError, ValueError):
        return None


def delete_unlisted_segments(folder: Path) -> None:
    """Deletes the frame segments that neither the checkpoint nor the one before it lists (older ones, and any
    left by a write that was cut off)."""
    listed = set()
    for checkpoint in (folder / CHECKPOINT_FILE, folder / PREVIOUS_CHECKPOINT_FILE):
        header = checkpoint_header(checkpoint) or {}
        listed |= {s["name"] for leaf in header.get("leaves", []) for s in leaf.get("segments", [])}
    for path in (folder / SEGMENTS_FOLDER).iterdir():
        if path.name not in listed:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class CheckpointFile:
    """A sound checkpoint file's contents."""

    chunk: int
    arrays: dict[str, np.ndarray]
    metrics: dict | None = None
    """The record of the ``metrics.csv`` rows it covers (``rows``, ``bytes``, ``sha256``); None in a checkpoint
    written before checkpoints kept them."""
    metrics_copy: bytes | None = None
    """Those rows' bytes, zlib-compressed."""
    segments: dict[str, list] = field(default_factory=dict)
    """The frame rings saved apart, by key path: the segments that made them up (:mod:`opiq_jax.store.frames`)."""


class CorruptCheckpoint(ResultsError):
    """A checkpoint file that is truncated, damaged or not a checkpoint at all."""


class IncompatibleCheckpoint(ResultsError):
    """A sound checkpoint whose arrays do not fit this experiment's state (another version's layout)."""


def checkpoint_chunk(path: Path) -> int | None:
    """The chunk a checkpoint file belongs to, from its header alone (None if there is no readable header)."""
    header = checkpoint_header(path)
    try:
        return None if header is None else int(header["chunk"])
    except (KeyError, TypeError, ValueError):
        return None


def read_checkpoint_file(path: Path) -> CheckpointFile:
    """A checkpoint file's chunk, arrays and metrics record, its checksum verified."""
    data = Path(path).read_bytes()
    magic = len(CHECKPOINT_MAGIC)
    if len(data) < magic + 8 + 32 or not data.startswith(CHECKPOINT_MAGIC):
        kind = "truncated" if data and CHECKPOINT_MAGIC.startswith(data[:magic]) else "not an opiq-jax checkpoint"
        raise CorruptCheckpoint(f"{path} is {kind} ({len(data)} bytes)")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise CorruptCheckpoint(f"{path} is truncated or damaged (its checksum does not match)")
    (header_len,) = struct.unpack("<Q", data[magic : magic + 8])
    header = json.loads(data[magic + 8 : magic + 8 + header_len])
    offset, arrays, segments = magic + 8 + header_len, {}, {}
    for leaf in header["leaves"]:
        dtype = jnp.dtype(leaf["dtype"])
        if "segments" in leaf:  # a frame ring saved apart
            segments[leaf["path"]] = leaf["segments"]
            arrays[leaf["path"]] = frames_from_segments(Path(path), leaf)
            continue
        size = int(np.prod(leaf["shape"], dtype=np.int64)) * dtype.itemsize
        arrays[leaf["path"]] = np.frombuffer(data, dtype, size // dtype.itemsize, offset).reshape(leaf["shape"])
        offset += size
    metrics = header.get("metrics")
    copy = None if metrics is None else data[offset : offset + int(metrics["copy"])]
    return CheckpointFile(int(header["chunk"]), arrays, metrics, copy, segments)


def frames_from_segments(path: Path, leaf: dict) -> np.ndarray:
    """The frame ring of checkpoint ``path``'s ``leaf``, from its segments; a :class:`CorruptCheckpoint` if one is
    missing or damaged."""
    try:
        return assemble(path.parent, tuple(leaf["shape"]), np.dtype(leaf["dtype"]),
                        [Segment.from_json(s) for s in leaf["segments"]])
    except DamagedSegment as e:
        raise CorruptCheckpoint(f"{path} cannot be restored: {e}") from None


def read_checkpoint_arrays(path: Path) -> tuple[int, dict[str, np.ndarray]]:
    """``(chunk, {tree path: array})`` of a checkpoint file, its checksum verified."""
    file = read_checkpoint_file(path)
    return file.chunk, file.arrays


def restore_into(template: Any, arrays: dict[str, np.ndarray], path: Path) -> Any:
    """``template``'s tree filled with ``arrays``; an :class:`IncompatibleCheckpoint` if they do not fit."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    expected = {jax.tree_util.keystr(p): (tuple(np.shape(x)), jnp.dtype(x.dtype)) for p, x in leaves}
    found = {k: (v.shape, v.dtype) for k, v in arrays.items()}
    if expected != found:
        missing = (sorted(set(expected) - set(found))[:2]
                   or sorted(k for k in expected if expected[k] != found.get(k))[:2])
        raise IncompatibleCheckpoint(
            f"{path} does not fit this experiment's training state (first differences: {', '.join(missing)}): it was "
            "written by another version of opiq-jax; resume it with that version, or move it away to start over")
    return jax.tree_util.tree_unflatten(treedef, [arrays[jax.tree_util.keystr(p)] for p, _ in leaves])


def aside(path: Path, why: str = "corrupt") -> Path:
    """Moves a file out of the way (``NAME.<why>-<time>``, never over another) and returns where it went."""
    stem = f"{path.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = path.with_name(stem), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{stem}-{n}")
    os.replace(path, target)
    return target


@dataclass(frozen=True)
class Restored:
    """The newest sound checkpoint of a folder, restored into the state's template."""

    state: Any
    chunk: int
    file: CheckpointFile


def newest_checkpoint(folder: Path, template: Any, warn=print) -> Restored | None:
    """The newest sound checkpoint of ``folder`` restored into ``template``; None if there is none.

    A corrupt newest checkpoint is reported through ``warn``, moved aside, and the previous one is used.
    """
    for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE):
        path = Path(folder) / name
        if not path.exists():
            continue
        try:
            file = read_checkpoint_file(path)
        except CorruptCheckpoint as e:
            moved = aside(path)
            warn(f"opiq-jax: {e}; moved it to {moved.name} and looking for the checkpoint before it")
            continue
        return Restored(restore_into(template, file.arrays, path), file.chunk, file)
    return None


def read_checkpoint(folder: Path, template: Any, warn=print) -> tuple[Any, int] | None:
    """``(state, chunk)`` of :func:`newest_checkpoint`, or None."""
    restored = newest_checkpoint(folder, template, warn)
    return None if restored is None else (restored.state, restored.chunk)


# ------------------------------------------------------------------------------------ the folder


FOLDER_KINDS = {"program": "training run (config.json)", "programs": "run of several programs (subfolders)",
                "sweep": "sweep (preset.json)"}
"""What a results folder holds: one program's files, per-program subfolders, or a sweep's batches."""


SYSTEM_FILES = (".DS_Store", "Thumbs.db", "desktop.ini", ".ipynb_checkpoints")
"""What operating systems and notebooks leave in any folder they show: not a user's results."""


def is_scratch(name: str) -> bool:
    """A file opiq-jax writes for a moment (the lock, a write test, a temporary file before its rename), or one that
    a file browser or notebook leaves in any folder."""
    temporary = name.startswith(".write-test-") or name.endswith((".tmp", ".new"))
    return name == LOCK_FILE or name in SYSTEM_FILES or (name.startswith(".") and temporary)


def holds_json_object(path: Path, keys: tuple[str, ...]) -> bool:
    """Whether ``path`` is a JSON object with ``keys`` (how opiq-jax tells its own config.json and preset.json)."""
    if not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return True  # ours but damaged (a cut write of an older version): read_json names it when it is read
    return isinstance(data, dict) and all(k in data for k in keys)


def folder_kind(folder: Path) -> str | None:
    """``empty`` (nothing but empty folders and opiq-jax's scratch files), a key of :data:`FOLDER_KINDS`, or None
    when ``folder`` holds files that opiq-jax did not write."""
    if holds_json_object(folder / CONFIG_FILE, ("static", "runs")):
        return "program"
    if holds_json_object(folder / PRESET_FILE, ("env", "grids")):
        return "sweep"
    figures, programs = False, False
    for entry in folder.iterdir():
        if is_scratch(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            kind = folder_kind(entry)
            if kind is None:
                return None
            programs |= kind != "empty"
        elif entry.suffix == ".png":  # the figures of a run of several programs, drawn at its top
            figures = True
        else:
            return None
    return "programs" if programs else (None if figures else "empty")


def run_files_without_config(folder: Path) -> list[str]:
    """The files of an opiq-jax run in ``folder`` (a checkpoint with its header, ``metrics.csv`` with its header) when
    its ``config.json`` is missing (deleted): the run cannot be read or resumed without it."""
    if (folder / CONFIG_FILE).exists():
        return []
    found = [name for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE) if checkpoint_header(folder / name)]
    try:
        with open(folder / METRICS_FILE, "rb") as f:
            if f.read(len(METRICS_HEADER_LINE)) == METRICS_HEADER_LINE:
                found.append(METRICS_FILE)
    except OSError:
        pass
    return sorted(found)


def without_config(folder: Path) -> str:
    """What to say of a folder whose run lost its ``config.json`` (:func:`run_files_without_config`)."""
    return (f"{folder} holds an opiq-jax run ({', '.join(run_files_without_config(folder))}) whose {CONFIG_FILE} is "
            "missing (deleted?)")


def foreign_names(folder: Path) -> list[str]:
    """The names in ``folder`` that make it not an opiq-jax experiment (for messages)."""
    return sorted(e.name for e in folder.iterdir()
                  if not is_scratch(e.name) and not (e.is_dir() and folder_kind(e) is not None))


def require_own_folder(folder: Path, kind: str, flag: str = "--out") -> None:
    """A one-line :class:`ResultsError` unless ``folder`` is new, empty or already an opiq-jax experiment of
    ``kind``: a user's own files are never written over."""
    if not folder.is_dir():
        return
    found = folder_kind(folder)
    if found is None and run_files_without_config(folder):
        raise ResultsError(f"{flag} {without_config(folder)}: put {CONFIG_FILE} back to resume it (the same command "
                           f"then does), or choose a new {flag} to start anew")
    if found is None:
        names = foreign_names(folder)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ResultsError(f"{flag} {folder} already holds files that opiq-jax did not write ({shown}): choose a new "
                           "or empty folder")
    if found not in ("empty", kind):
        raise ResultsError(f"{flag} {folder} holds an opiq-jax {FOLDER_KINDS[found]}, not a {FOLDER_KINDS[kind]}: "
                           "choose another folder")


def prepare_folder(folder: Path, flag: str = "--out", kind: str = "program") -> Path:
    """Creates ``folder`` if needed; a one-line :class:`ResultsError` if it is a file, unwritable, read-only, or
    holds anything but an opiq-jax experiment of ``kind`` (:func:`require_own_folder`)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ResultsError(f"{flag} {folder} is a file, not a folder: choose a folder")
    if folder.is_symlink() and not folder.exists():
        raise ResultsError(f"{flag} {folder} {broken_link(folder)}: point it at a folder, or choose another")
    require_own_folder(folder, kind, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        reason = {errno.EROFS: "is on a read-only file system",
                  errno.ELOOP: "lies under a symbolic link that loops back on itself"}.get(
                      e.errno, f"cannot be written ({e.strerror or e})")
        raise ResultsError(f"{flag} {folder} {reason}: choose another folder") from None
    return folder


def broken_link(path: Path) -> str:
    """Why the symbolic link ``path`` leads to no file or folder (a loop, or a missing target), for a message."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symbolic link that loops back on itself"
    return f"is a symbolic link to {os.readlink(path)}, which does not exist"


def why_absent(path: Path) -> str:
    """Why ``path`` cannot be read, for a message: ``does not exist``, or what is wrong with the link there."""
    path = Path(path)
    return broken_link(path) if path.is_symlink() and not path.exists() else "does not exist"


MADE_BEFORE_TRAINING = (CONFIG_FILE, PRESET_FILE, "plan.json")  # a sweep's plan: running.sweeping.PLAN_FILE
"""What a run or a sweep writes before its first chunk: a folder holding only these (and scratch files) has nothing
trained in it."""


def nothing_trained(folder: Path) -> bool:
    """Whether ``folder`` holds no file but :data:`MADE_BEFORE_TRAINING` and scratch files, and no process holds a lock
    in it (another run that has just started there)."""
    for path in folder.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            continue
        if path.name == LOCK_FILE and lock_is_held(path):
            return False
        if not (is_scratch(path.name) or path.name in MADE_BEFORE_TRAINING):
            return False
    return True


def lock_is_held(path: Path) -> bool:
    """Whether a live process holds the lock file ``path`` (:class:`FolderLock`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def first_missing(folder: Path) -> Path | None:
    """The outermost of ``folder`` and its parents that does not exist yet (what creating ``folder`` makes), or None."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists() or path.is_symlink():
            break
        missing = path
    return missing


@contextlib.contextmanager
def removed_if_refused(folder: Path) -> Iterator[None]:
    """Around a run or a sweep into ``folder``: when it fails (a refusal, an error, a Ctrl-C before the loop took the
    signals over) before anything was trained, what it made is removed again (the folders it created; in a folder
    that was empty, the files it added), so that no half-made folder (a lock or a config.json alone) stays behind.
    The loop's own stop (:class:`Stopped`) keeps them: its message says to run the same command again."""
    folder = Path(folder)
    made, empty_before = first_missing(folder), entries_if_empty(folder)
    try:
        yield
    except (Exception, KeyboardInterrupt) as e:
        if not isinstance(e, Stopped):
            if made is not None and made.is_dir() and nothing_trained(made):
                shutil.rmtree(made, ignore_errors=True)
            elif empty_before is not None and folder.is_dir() and nothing_trained(folder):
                for path in folder.iterdir():
                    if path.name in empty_before:
                        continue
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
        raise


def entries_if_empty(folder: Path) -> set[str] | None:
    """The names in ``folder`` when it is an empty folder (:func:`folder_kind`), else None."""
    try:
        return {p.name for p in folder.iterdir()} if folder.is_dir() and folder_kind(folder) == "empty" else None
    except OSError:
        return None


class FolderLock:
    """An exclusive lock on a results folder while a process writes it (``with FolderLock(folder): ...``)."""

    def __init__(self, folder: Path, warn=print):
        self.path, self.warn, self.fd = Path(folder) / LOCK_FILE, warn, None

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:
            return "another process"

    def __enter__(self) -> FolderLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ResultsError(f"{self.path.parent} is being written by {self.holder()}: wait for it to finish, "
                               "or choose another --out") from None
        stale = os.read(fd, 4096).decode(errors="replace").strip()
        if stale:
            self.warn(f"opiq-jax: {self.path.parent} had a lock of {stale}, which no longer runs; taking it over")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # a clean exit leaves no holder behind
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


__all__ = [
    "BackgroundCheckpoints", "CHECKPOINT_FILE", "CONFIG_FILE", "CheckpointFile", "CorruptCheckpoint", "FolderLock",
    "IncompatibleCheckpoint", "METRICS_FILE", "PREVIOUS_CHECKPOINT_FILE", "PreparedCheckpoint", "RUN_INFO_FILE",
    "ResultsError", "atomic_write_bytes", "atomic_write_text", "folder_kind", "newest_checkpoint",
    "prepare_checkpoint", "prepare_folder", "read_checkpoint", "read_checkpoint_arrays", "read_checkpoint_file",
    "read_json", "write_checkpoint",
]
