"""The frame segments' writer (:mod:`opiq_jax.store.frames`): blocks fetched and compressed by a pool of threads,
written in order, read back as the frames they were, whatever the number of threads; segments of the raw format
that came before still load; a damaged block is a damaged segment; the thread count is checked. The SIGKILL tests
of the writer as checkpoints use it are in ``tests/test_frame_checkpoints.py``."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib

import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.store import frames as frame_store
from opiq_jax.store.files import atomic_write_chunks
from opiq_jax.store.frames import COMPRESSED_MAGIC, SEGMENT_MAGIC, DamagedSegment, Segment, assemble, read_segment

FRAME = (6, 6)


def rings(seed: int = 0) -> np.ndarray:
    """Two rings of 50 frames: flat frames with a few bright pixels, as Atari frames are mostly flat colour."""
    rng = np.random.default_rng(seed)
    frames = np.full((2, 1, 50, *FRAME), 40, np.uint8)
    frames[..., 2, 3] = rng.integers(0, 256, frames.shape[:-2], dtype=np.uint8)
    return frames


def save(folder, frames: np.ndarray, starts, counts, threads: int) -> Segment:
    last = {}

    def remembering(stream):
        for piece in stream:
            last["piece"] = piece
            yield piece

    (folder / frame_store.SEGMENTS_FOLDER).mkdir(exist_ok=True)
    chunks = frame_store.segment_chunks(jnp.asarray(frames), np.asarray(starts), np.asarray(counts), threads)
    atomic_write_chunks(folder / frame_store.SEGMENTS_FOLDER / "seg.bin", remembering(chunks))
    return Segment("seg.bin", list(starts), list(counts), last["piece"].hex())


@pytest.mark.parametrize("threads", [1, 3])
def test_blocks_written_by_any_number_of_threads_read_back_in_order(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(frame_store, "BLOCK_FRAMES", 7)  # several blocks per ring, more than the threads
    frames = rings()
    starts, counts = [45, 10], [20, 33]  # the first range wraps past the end of its ring
    segment = save(tmp_path, frames, starts, counts, threads)
    data = (tmp_path / frame_store.SEGMENTS_FOLDER / "seg.bin").read_bytes()
    assert data.startswith(COMPRESSED_MAGIC) and len(data) < sum(counts) * np.prod(FRAME)  # compressed
    got = read_segment(tmp_path / frame_store.SEGMENTS_FOLDER / "seg.bin", segment, FRAME, np.uint8)
    for ring, (start, count) in enumerate(zip(starts, counts)):
        np.testing.assert_array_equal(got[ring], frames[ring, 0, (start + np.arange(count)) % 50])
    whole = assemble(tmp_path, frames.shape, np.uint8, [segment])
    expected = np.zeros_like(frames)
    for ring, (start, count) in enumerate(zip(starts, counts)):
        expected[ring, 0, (start + np.arange(count)) % 50] = frames[ring, 0, (start + np.arange(count)) % 50]
    np.testing.assert_array_equal(whole, expected)


def raw_segment(frames: np.ndarray, starts, counts) -> bytes:
    """A segment in the first format (``OPIQSEG1``: the frames raw), written out by hand."""
    header = json.dumps({"starts": starts, "counts": counts, "frame_shape": list(FRAME), "dtype": "uint8"}).encode()
    body = SEGMENT_MAGIC + struct.pack("<Q", len(header)) + header
    for ring, (start, count) in enumerate(zip(starts, counts)):
        body += frames[ring, 0, (start + np.arange(count)) % 50].tobytes()
    return body + hashlib.sha256(body).digest()


def test_a_segment_of_raw_frames_from_an_earlier_version_still_loads(tmp_path):
    frames = rings(1)
    data = raw_segment(frames, [0, 30], [50, 25])
    (tmp_path / frame_store.SEGMENTS_FOLDER).mkdir()
    (tmp_path / frame_store.SEGMENTS_FOLDER / "old.bin").write_bytes(data)
    segment = Segment("old.bin", [0, 30], [50, 25], data[-32:].hex())
    whole = assemble(tmp_path, frames.shape, np.uint8, [segment])
    np.testing.assert_array_equal(whole[0], frames[0])
    np.testing.assert_array_equal(whole[1, 0, 30:], frames[1, 0, 30:])


def test_a_block_that_does_not_decompress_is_a_damaged_segment(tmp_path, monkeypatch):
    """Even with a checksum that matches (written so on purpose), a broken block or a short one is refused."""
    monkeypatch.setattr(frame_store, "BLOCK_FRAMES", 7)
    segment = save(tmp_path, rings(), [0, 0], [50, 50], 2)
    path = tmp_path / frame_store.SEGMENTS_FOLDER / "seg.bin"
    data = bytearray(path.read_bytes()[:-32])
    (length,) = struct.unpack("<Q", data[8:16])
    first_block = 16 + length
    data[first_block + 16 + 2] ^= 0xFF  # inside the first block's zlib stream
    path.write_bytes(bytes(data) + hashlib.sha256(bytes(data)).digest())
    damaged = Segment(segment.name, segment.starts, segment.counts, hashlib.sha256(bytes(data)).hexdigest())
    with pytest.raises(DamagedSegment, match="is damaged"):
        read_segment(path, damaged, FRAME, np.uint8)
    # a whole block left out: the frames fall short of what the checkpoint lists
    raw, packed = struct.unpack("<QQ", data[first_block: first_block + 16])
    short = bytes(data[:first_block]) + bytes(data[first_block + 16 + packed:])
    path.write_bytes(short + hashlib.sha256(short).digest())
    damaged = Segment(segment.name, segment.starts, segment.counts, hashlib.sha256(short).hexdigest())
    with pytest.raises(DamagedSegment, match="fewer frames"):
        read_segment(path, damaged, FRAME, np.uint8)
    assert zlib.decompress(zlib.compress(b"x"))  # zlib is the stdlib's: nothing to install


@pytest.mark.parametrize("value, expected", [("3", 3), ("", None), ("0", "error"), ("four", "error")])
def test_the_writer_threads_come_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("OPIQ_JAX_WRITER_THREADS", value)
    if expected == "error":
        with pytest.raises(ValueError, match="OPIQ_JAX_WRITER_THREADS must be a whole number >= 1"):
            frame_store.writer_threads()
    elif expected is None:
        assert 1 <= frame_store.writer_threads() <= 16
    else:
        assert frame_store.writer_threads() == expected
