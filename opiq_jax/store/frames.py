"""A checkpoint's frame rings, saved as what changed since the checkpoint before.

A pool environment's replay holds 1M uint8 frames per run (6.6 GiB): written whole at every checkpoint it would
cost more time and disk than an interval has. So a checkpoint stores the rings apart, in *segments*
(``frames/seg-*.bin`` beside the checkpoint): each holds, per ring, the frames written since the previous
checkpoint, as ``count`` slots from ``start`` (cyclically). The checkpoint's header lists the segments that make
up the rings, oldest first; restoring starts from zeros (a ring's slots are zeros until written, as in the live
state) and writes every listed segment in order. A segment is dropped from the list once every ring has
been written ``capacity`` times after it (each of its slots then holds a later frame), so the list never holds
more than about two rings' worth of frames, and no checkpoint ever rewrites a whole ring unless a whole ring
was written since the one before.

Every segment is written atomically (a temporary file, synced, renamed) before the checkpoint that lists it, and
carries its own SHA-256; a segment that is missing or damaged makes its checkpoint unreadable, and the
checkpoint before it is used. Files that neither the checkpoint nor the one before it list are deleted after
each checkpoint.

A whole host writes new frames faster than one thread can store them (8 runs at 48k steps/s make 338 MB/s), so a
segment is written in blocks of :data:`BLOCK_FRAMES` frames, each fetched from the device and zlib-compressed by a
pool of threads (zlib releases the GIL; Atari frames are mostly flat colour and compress many times over), and
appended in order as they come. Segments written before compression (``OPIQSEG1``, the frames raw) still load.

Compressing still takes the host's cores a while, and the emulators need them too. So a checkpoint that the loop
writes while training goes on (:meth:`FrameRings.prepare` with ``taken_now``) first fetches the new frames to the
host, block by block (the next chunk updates the rings in place, so they cannot be read later; fetching is fast
beside compressing), and a thread of its own then compresses and writes them. The host holds the frames of one
checkpoint interval until they are written (about 2.5 GB per run for 60 s at 6,000 env steps/s); the device holds
no more than one block beyond its state, so the plan's memory check stays as it was.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

SEGMENTS_FOLDER = "frames"
SEGMENT_MAGIC = b"OPIQSEG1"
"""A segment of raw frames (written before compression; still read)."""
COMPRESSED_MAGIC = b"OPIQSEG2"
"""A segment of zlib-compressed blocks, each ``<raw bytes, compressed bytes>`` (two little-endian u64) then its data."""
BLOCK_FRAMES = 4_096
"""Frames of one block (about 28 MiB of 84x84 frames), fetched and compressed by one thread: the host holds
``writer threads`` blocks at a time, never a segment."""
COMPRESSION_LEVEL = 1
"""zlib's fastest level: on Atari frames it already shrinks them many times over
(``experiments.bench.segment_writer``)."""


def writer_threads() -> int:
    """Threads that fetch and compress a segment's blocks: ``OPIQ_JAX_WRITER_THREADS`` if set, else up to 16 cores."""
    value = os.environ.get("OPIQ_JAX_WRITER_THREADS", "")
    if value.strip():
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"OPIQ_JAX_WRITER_THREADS must be a whole number >= 1, got {value!r}")
        return threads
    return max(1, min(16, os.cpu_count() or 1))


class DamagedSegment(Exception):
    """A segment file that is missing, truncated or damaged (its checkpoint cannot be restored)."""


@dataclass
class Segment:
    """One segment file: per ring, ``count`` frames written from slot ``start`` on (cyclically)."""

    name: str
    starts: list[int]
    counts: list[int]
    sha256: str

    def to_json(self) -> dict:
        return {"name": self.name, "starts": self.starts, "counts": self.counts, "sha256": self.sha256}

    @staticmethod
    def from_json(data: dict) -> Segment:
        return Segment(data["name"], list(data["starts"]), list(data["counts"]), data["sha256"])


def slots(start: int, count: int, capacity: int) -> np.ndarray:
    """The ring slots ``start, start + 1, ...`` (``count`` of them), wrapping at ``capacity``."""
    return (start + np.arange(count, dtype=np.int64)) % capacity


def written_ranges(before: np.ndarray | None, now: np.ndarray, capacity: int,
                   bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Per ring, ``(starts, counts)`` of the slots written since the positions ``before`` (None: since the rings
    were empty) to the positions ``now``, given that at most ``bound`` frames per ring were written in between.
    When ``bound`` reaches the capacity the positions cannot tell, and the whole ring is taken (oldest first)."""
    before = np.zeros_like(now) if before is None else before
    if bound >= capacity:
        return now % capacity, np.full_like(now, capacity)
    return before % capacity, (now - before) % capacity


def segment_blocks(frames: jax.Array, starts: np.ndarray,
                   counts: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """The blocks of a segment in file order: per ring (its index in the leading axes), up to :data:`BLOCK_FRAMES`
    of its slots."""
    lead, capacity = frames.shape[:-3], frames.shape[-3]
    blocks = []
    for ring, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
        indices, where = slots(start, count, capacity), tuple(int(i) for i in np.unravel_index(ring, lead))
        blocks += [(where, indices[at: at + BLOCK_FRAMES]) for at in range(0, count, BLOCK_FRAMES)]
    return blocks


def block_fetchers(frames: jax.Array, starts: np.ndarray, counts: np.ndarray,
                   taken_now: bool = False) -> list[Callable[[], np.ndarray]]:
    """One function per block of the segment (in file order) that returns the block's frames on the host.

    ``taken_now``: every block is fetched to the host now, so that the state's next update (donated, in place)
    cannot touch them and the device holds no copy beyond one block: the segment can then be compressed and written
    while training goes on. Else each block is read from the rings when its turn comes, with no copy (the rings
    must not change until it is written)."""
    blocks = segment_blocks(frames, starts, counts)
    if not taken_now:
        return [functools.partial(fetched_block, frames, block) for block in blocks]
    taken = [fetched_block(frames, block) for block in blocks]  # before the next chunk gets the rings
    return [functools.partial(np.asarray, block) for block in taken]


def fetched_block(frames: jax.Array, block: tuple[tuple[int, ...], np.ndarray]) -> np.ndarray:
    """A block's frames, read from the rings on the device."""
    where, indices = block
    return jax.device_get(frames[(*where, indices)])


def compressed_block(fetch: Callable[[], np.ndarray]) -> bytes:
    """One block fetched to the host and compressed, with its sizes in front."""
    raw = np.ascontiguousarray(fetch()).tobytes()
    packed = zlib.compress(raw, COMPRESSION_LEVEL)
    return struct.pack("<QQ", len(raw), len(packed)) + packed


def segment_head(frames: jax.Array, starts: np.ndarray, counts: np.ndarray) -> bytes:
    """A compressed segment's magic and header: the ranges, the frames' shape and dtype, the compression."""
    header = json.dumps({"starts": starts.tolist(), "counts": counts.tolist(), "frame_shape": list(frames.shape[-2:]),
                         "dtype": np.dtype(frames.dtype).name, "compression": "zlib",
                         "block_frames": BLOCK_FRAMES}).encode()
    return COMPRESSED_MAGIC + struct.pack("<Q", len(header)) + header


def segment_stream(head: bytes, fetchers: list[Callable[[], np.ndarray]],
                   threads: int | None = None) -> Iterator[bytes]:
    """A segment file as a stream: its head, each block compressed (``threads`` fetch and compress them,
    :func:`writer_threads` by default, at most that many blocks ahead of the one written), then the SHA-256 of
    all that comes before."""
    digest = hashlib.sha256(head)
    yield head
    threads = threads or writer_threads()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = [pool.submit(compressed_block, fetch) for fetch in fetchers[:threads]]
        for following in range(threads, len(fetchers) + threads):
            data = pending.pop(0).result()
            if following < len(fetchers):  # keep ``threads`` blocks in flight, no more (the host's memory)
                pending.append(pool.submit(compressed_block, fetchers[following]))
            digest.update(data)
            yield data
    yield digest.digest()


def segment_chunks(frames: jax.Array, starts: np.ndarray, counts: np.ndarray,
                   threads: int | None = None) -> Iterator[bytes]:
    """The segment file of ``frames`` (``[..., capacity, *frame]``, the rings in the leading axes, read in place:
    a reshape could copy the whole replay on the device) at the given ranges, as a stream (:func:`segment_stream`),
    each block read from the rings when its turn comes."""
    return segment_stream(segment_head(frames, starts, counts), block_fetchers(frames, starts, counts), threads)


def decompressed(data: bytes, offset: int, end: int) -> bytes:
    """The frames of a compressed segment's blocks from ``offset`` to ``end`` (the checksum's start), joined."""
    parts = []
    while offset < end:
        if offset + 16 > end:
            raise DamagedSegment("a block header runs past the end")
        raw, packed = struct.unpack("<QQ", data[offset: offset + 16])
        try:
            block = zlib.decompress(data[offset + 16: offset + 16 + packed])
        except zlib.error as e:
            raise DamagedSegment(f"a block does not decompress ({e})") from None
        if len(block) != raw:
            raise DamagedSegment("a block decompresses to the wrong size")
        parts.append(block)
        offset += 16 + packed
    return b"".join(parts)


def read_segment(path: Path, segment: Segment, frame_shape: tuple[int, ...], dtype: np.dtype) -> list[np.ndarray]:
    """Each ring's frames of a segment file, its checksum verified; a :class:`DamagedSegment` if it is not sound."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DamagedSegment(f"its frame segment {path.name} cannot be read ({e.strerror or e})") from None
    if len(data) < len(SEGMENT_MAGIC) + 40 or not data.startswith((SEGMENT_MAGIC, COMPRESSED_MAGIC)):
        raise DamagedSegment(f"its frame segment {path.name} is truncated or not a segment")
    if data[-32:] != hashlib.sha256(data[:-32]).digest() or data[-32:].hex() != segment.sha256:
        raise DamagedSegment(f"its frame segment {path.name} is damaged (its checksum does not match)")
    (length,) = struct.unpack("<Q", data[len(SEGMENT_MAGIC): len(SEGMENT_MAGIC) + 8])
    offset, size = len(SEGMENT_MAGIC) + 8 + length, int(np.prod(frame_shape)) * np.dtype(dtype).itemsize
    if data.startswith(COMPRESSED_MAGIC):
        try:
            data, offset = decompressed(data, offset, len(data) - 32), 0
        except DamagedSegment as e:
            raise DamagedSegment(f"its frame segment {path.name} is damaged ({e})") from None
    if len(data) - offset < sum(segment.counts) * size:
        raise DamagedSegment(f"its frame segment {path.name} holds fewer frames than its checkpoint lists")
    rings = []
    for count in segment.counts:
        rings.append(np.frombuffer(data, dtype, count * size // np.dtype(dtype).itemsize, offset)
                     .reshape((count, *frame_shape)))
        offset += count * size
    return rings


def assemble(folder: Path, shape: tuple[int, ...], dtype: np.dtype, segments: list[Segment]) -> np.ndarray:
    """The rings (``shape``: ``[..., capacity, *frame]``, rings in the leading axes) that ``segments`` make up."""
    rings = np.zeros((int(np.prod(shape[:-3])), *shape[-3:]), dtype)
    capacity = shape[-3]
    for segment in segments:
        frames = read_segment(folder / SEGMENTS_FOLDER / segment.name, segment, tuple(shape[-2:]), dtype)
        for ring, (start, count) in enumerate(zip(segment.starts, segment.counts)):
            rings[ring, slots(start, count, capacity)] = frames[ring]
    return rings.reshape(shape)


def still_needed(segments: list[Segment], capacity: int) -> list[Segment]:
    """``segments`` without those that every ring has overwritten since: ``capacity`` frames written after one
    cover each of its slots again."""
    later = np.zeros(len(segments[-1].counts) if segments else 0, np.int64)
    kept = []
    for segment in reversed(segments):
        if np.any(later < capacity):
            kept.append(segment)
        later += np.asarray(segment.counts)
    return kept[::-1]


@dataclass(frozen=True)
class PendingSegment:
    """A segment prepared by a checkpoint, not yet written: its file name, per ring the range it holds, the rings'
    capacity, its head and the functions that fetch its blocks."""

    name: str
    starts: np.ndarray
    counts: np.ndarray
    capacity: int
    head: bytes
    fetchers: list[Callable[[], np.ndarray]]


@dataclass
class FrameRings:
    """What a program's checkpoints know of its frame rings: the state's leaves that hold them (key paths), the
    segments that make them up, and the ring positions at the last checkpoint."""

    frames_path: str
    position_path: str
    segments: list[Segment] = field(default_factory=list)
    positions: np.ndarray | None = None
    whole_next: bool = False
    """The next checkpoint writes whole rings: the rings were restored from a checkpoint that kept them inline."""

    def prepare(self, leaves: dict[str, jax.Array], bound: int, name: str, taken_now: bool = False) -> PendingSegment:
        """The segment of what changed since the last checkpoint (``bound``: at most that many frames per ring were
        written since), ready to write (``taken_now``: its frames copied now, :func:`block_fetchers`). The rings'
        positions move on at once: the next checkpoint's segment starts where this one ends."""
        frames, position = leaves[self.frames_path], np.asarray(jax.device_get(leaves[self.position_path]))
        now, capacity = position.reshape(-1).astype(np.int64), frames.shape[-3]
        starts, counts = written_ranges(self.positions, now, capacity, capacity if self.whole_next else bound)
        self.positions, self.whole_next = now, False
        return PendingSegment(name, starts, counts, capacity, segment_head(frames, starts, counts),
                              block_fetchers(frames, starts, counts, taken_now))

    def write(self, folder: Path, pending: PendingSegment, write_chunks) -> dict:
        """Writes a prepared segment (``write_chunks`` writes a file atomically from a stream of bytes); returns
        the frames leaf's entry for the checkpoint's header: the segments that now make up the rings."""
        last = {}

        def remembering(stream):  # the file ends with its own SHA-256: keep it for the header
            for piece in stream:
                last["piece"] = piece
                yield piece

        (folder / SEGMENTS_FOLDER).mkdir(exist_ok=True)
        write_chunks(folder / SEGMENTS_FOLDER / pending.name,
                     remembering(segment_stream(pending.head, pending.fetchers)))
        segment = Segment(pending.name, pending.starts.tolist(), pending.counts.tolist(), last["piece"].hex())
        self.segments = still_needed([*self.segments, segment], pending.capacity)
        return {"segments": [s.to_json() for s in self.segments]}

    def restored(self, segments: list[dict] | None, arrays: dict[str, np.ndarray]) -> None:
        """Continues from a restored checkpoint: its segments (None: it kept the rings inline, so the next
        checkpoint writes them whole) and the positions its state holds."""
        self.segments = [Segment.from_json(s) for s in segments or []]
        self.positions = arrays[self.position_path].reshape(-1).astype(np.int64)
        self.whole_next = segments is None
