"""A checkpoint saves a pool's frame rings as what changed since the one before (:mod:`opiq_jax.store.frames`):
restoring gives the same state, a checkpoint writes only the new frames, a SIGKILL in the middle of a segment
or of the checkpoint that lists it loses nothing, a damaged segment falls back to the checkpoint before, and a
checkpoint that kept its rings inline (older versions) still loads. The pool is tests/fake_pool.py's."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import jax
import numpy as np
import pytest

from opiq_jax.common.config import stack_hparams
from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec, register_environment, static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.host_loop import restore_checkpoint, run_experiment
from opiq_jax.runs.experiment import Experiment, RunSpec, keys_to_data, run_keys_for
from opiq_jax.store import files as results
from opiq_jax.store.files import CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE, checkpoint_header, read_checkpoint_arrays
from opiq_jax.store.frames import SEGMENTS_FOLDER
from tests.fake_pool import FakePool

ROOT = Path(__file__).resolve().parents[1]
CAPACITY, CHUNK, CHUNKS = 48, 16, 10  # the ring wraps three times in 160 steps


def experiment() -> Experiment:
    """OPIQ and DQN + PC, a seed each, on a fake Atari game whose rings hold 48 frames (registered once)."""
    if "fake_rings" not in ENVIRONMENTS:
        register_environment(dataclasses.replace(
            environment_spec("montezuma"), name="fake_rings",
            make=lambda static, num_envs, seed, **kw: FakePool(num_envs, seed, 20, **kw)))
    static = static_for_env("fake_rings", total_steps=CHUNK * CHUNKS, log_every=CHUNK, buffer_size=CAPACITY,
                            batch_size=8, train_every=4, target_update=32, sketch_width=256)
    return Experiment(static, tuple(RunSpec(m, "paper", 0, method_hparams("fake_rings", m))
                                    for m in ("opiq", "dqn_pc")))


def listed_segments(path: Path) -> list[dict]:
    (leaf,) = [leaf for leaf in checkpoint_header(path)["leaves"] if "segments" in leaf]
    return leaf["segments"]


def test_a_checkpoint_writes_the_new_frames_only_and_restores_the_same_state(tmp_path):
    state = run_experiment(experiment(), tmp_path, progress=False, checkpoint_seconds=0)
    chunk, arrays = read_checkpoint_arrays(tmp_path / CHECKPOINT_FILE)
    saved = {jax.tree_util.keystr(p): np.asarray(x) for p, x in
             jax.tree_util.tree_flatten_with_path(keys_to_data(state.replace(env=None)))[0]}
    assert chunk == CHUNKS and set(arrays) == set(saved)
    for key, value in saved.items():  # every leaf, the frames rebuilt from their segments among them
        np.testing.assert_array_equal(arrays[key], value, err_msg=key)
    frames = saved[".runs.memory.frames"]
    assert frames.shape == (2, 1, CAPACITY, 84, 84) and frames.any()
    others = sum(v.nbytes for k, v in saved.items() if k != ".runs.memory.frames")
    assert (tmp_path / CHECKPOINT_FILE).stat().st_size - others < frames.nbytes / 4  # the rings are not inline
    segments = listed_segments(tmp_path / CHECKPOINT_FILE)
    assert segments[-1]["counts"] == [CHUNK, CHUNK]  # the last checkpoint wrote one chunk's frames per ring
    assert sum(s["counts"][0] for s in segments) < 2 * CAPACITY  # overwritten segments were dropped
    listed = {s["name"] for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE)
              for s in listed_segments(tmp_path / name)}
    assert {p.name for p in (tmp_path / SEGMENTS_FOLDER).iterdir()} == listed  # the others were deleted


def restored_arrays(out: Path) -> tuple[int, dict]:
    """The chunk and arrays that a resume of ``out`` starts from (the newest sound checkpoint)."""
    exp = experiment()
    restored = restore_checkpoint(out, exp, stack_hparams(exp.hparams()), *run_keys_for(exp), say=print)
    return restored.chunk, restored.file.arrays


CHILD = """
import os, signal, sys
from opiq_jax.store import files as results
kind, nth = os.environ["OPIQ_FAULT"].split(":")
nth, files = int(nth), [0]
write = results.write_all
def dying_write(f, data):  # in the middle of the first write into the nth file whose name holds kind
    if kind in os.path.basename(f.name) and f.tell() == 0:
        files[0] += 1
        if files[0] == nth:
            write(f, data[: len(data) // 2]); f.flush(); os.kill(os.getpid(), signal.SIGKILL)
    write(f, data)
results.write_all = dying_write
from tests.test_frame_checkpoints import experiment
from opiq_jax.host.host_loop import run_experiment
run_experiment(experiment(), sys.argv[1], progress=False, checkpoint_seconds=0)
"""


@pytest.fixture(scope="module")
def saved_at_chunk_3(tmp_path_factory):
    """The arrays an uninterrupted run saves at its 3rd chunk: what a run killed after it must restore."""
    uninterrupted = tmp_path_factory.mktemp("uninterrupted")
    run_experiment(experiment(), uninterrupted, progress=False, checkpoint_seconds=0, stop_after_chunks=3)
    return read_checkpoint_arrays(uninterrupted / CHECKPOINT_FILE)[1]


@pytest.mark.parametrize("fault", ["seg-:4", "checkpoint.msgpack:4"])
def test_a_sigkill_in_a_segment_or_in_the_checkpoint_listing_it_loses_nothing(tmp_path, fault, saved_at_chunk_3):
    """Killed in the middle of the 4th segment, or of the 4th checkpoint after its segment was written (both
    written from the background thread while the 5th chunk runs): the checkpoint before stays whole (its segments
    too), and the resume from it finishes."""
    out = tmp_path / "run, \"odd\" ✓"
    child = subprocess.run([sys.executable, "-c", CHILD, str(out)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "JAX_PLATFORMS": "cpu", "OPIQ_FAULT": fault}, timeout=600)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    chunk, arrays = restored_arrays(out)
    assert chunk == 3
    position = arrays[".runs.memory.position"].reshape(-1)
    assert list(position) == [(3 * CHUNK + 1) % CAPACITY] * 2  # 48 steps and the first frame: slot 1 again
    for key, value in saved_at_chunk_3.items():  # what the killed run restores is what it had saved at chunk 3
        np.testing.assert_array_equal(arrays[key], value, err_msg=key)
    run_experiment(experiment(), out, progress=False, checkpoint_seconds=0)
    chunk, _ = read_checkpoint_arrays(out / CHECKPOINT_FILE)
    assert chunk == CHUNKS
    leftovers = {p.name for p in (out / SEGMENTS_FOLDER).iterdir()} - {
        s["name"] for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE) for s in listed_segments(out / name)}
    assert not leftovers  # the cut segment was deleted


def block_swapped(data: bytes) -> bytes:
    """A segment whose first block is replaced by another that decompresses as well (zeros of the same size), the
    file otherwise as it was: only its checksum tells the frames are not the ones written."""
    (length,) = struct.unpack("<Q", data[8:16])
    first = 16 + length
    raw, packed = struct.unpack("<QQ", data[first: first + 16])
    other = zlib.compress(bytes(raw))
    return data[:first] + struct.pack("<QQ", raw, len(other)) + other + data[first + 16 + packed:]


@pytest.mark.parametrize("damage", ["cut-short", "block-swapped"])
def test_a_damaged_segment_falls_back_to_the_checkpoint_before(tmp_path, capsys, damage):
    run_experiment(experiment(), tmp_path, progress=False, checkpoint_seconds=0, stop_after_chunks=4)
    newest = listed_segments(tmp_path / CHECKPOINT_FILE)[-1]["name"]
    segment = tmp_path / SEGMENTS_FOLDER / newest
    data = segment.read_bytes()
    segment.write_bytes(data[:-100] if damage == "cut-short" else block_swapped(data))
    chunk, _ = restored_arrays(tmp_path)
    assert chunk == 3
    err = capsys.readouterr().out
    assert f"cannot be restored: its frame segment {newest} is" in err and "looking for the checkpoint before" in err


def test_a_checkpoint_with_its_rings_inline_loads_and_the_next_writes_them_whole(tmp_path, monkeypatch):
    """As older versions wrote them: the whole state in checkpoint.msgpack."""
    exp = experiment()
    with monkeypatch.context() as patch:
        patch.setattr("opiq_jax.contracts.pool.FrameRingReplay.rings_apart", None)
        run_experiment(exp, tmp_path, progress=False, checkpoint_seconds=0, stop_after_chunks=4)
    assert not (tmp_path / SEGMENTS_FOLDER).exists()
    assert all("segments" not in leaf for leaf in checkpoint_header(tmp_path / CHECKPOINT_FILE)["leaves"])
    chunk, inline = restored_arrays(tmp_path)
    assert chunk == 4 and inline[".runs.memory.frames"].any()
    run_experiment(exp, tmp_path, progress=False, checkpoint_seconds=0, stop_after_chunks=1)
    segments = listed_segments(tmp_path / CHECKPOINT_FILE)
    assert [s["counts"] for s in segments] == [[CAPACITY, CAPACITY]]  # whole rings once, then what changed
    state = run_experiment(exp, tmp_path, progress=False, checkpoint_seconds=0, stop_after_chunks=1)
    # a chunk's frames, and the first frame of the fresh episodes that a resume starts
    assert [s["counts"] for s in listed_segments(tmp_path / CHECKPOINT_FILE)] == [[CAPACITY] * 2, [CHUNK + 1] * 2]
    # the newer segment overwrites part of the whole rings: restored in the order written, it wins there
    _, restored = restored_arrays(tmp_path)
    np.testing.assert_array_equal(restored[".runs.memory.frames"], np.asarray(state.runs.memory.frames))


def test_the_frames_a_chunk_writes_are_bounded_by_its_steps():
    from opiq_jax.store.frames import still_needed, written_ranges, Segment

    starts, counts = written_ranges(np.array([40, 40]), np.array([8, 8]), 48, bound=20)
    assert starts.tolist() == [40, 40] and counts.tolist() == [16, 16]  # across the wrap
    starts, counts = written_ranges(np.array([40]), np.array([40]), 48, bound=48)
    assert counts.tolist() == [48]  # a whole ring (or more) since: the positions cannot tell, all is written
    segments = [Segment(str(i), [0], [c], "") for i, c in enumerate([30, 20, 20, 10])]
    assert [s.name for s in still_needed(segments, 48)] == ["1", "2", "3"]  # 50 written after "0"


def checkpoint_files(folder: Path) -> dict[str, dict[str, np.ndarray]]:
    """The newest two checkpoints' arrays (the frames rebuilt from their segments), by file name."""
    return {name: read_checkpoint_arrays(folder / name)[1] for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE)}


def test_a_checkpoint_written_while_training_goes_on_is_the_one_written_at_once(tmp_path, monkeypatch):
    """The interval's checkpoints are written from a thread of their own while the next chunks run, their state
    donated to them: what they hold is the state at their chunk, as a checkpoint written at once holds it."""
    writers, write = [], results.write_all

    def noting_thread(f, data):
        writers.append((os.path.basename(f.name), threading.current_thread() is threading.main_thread()))
        write(f, data)

    monkeypatch.setattr(results, "write_all", noting_thread)
    run_experiment(experiment(), tmp_path / "background", progress=False, checkpoint_seconds=0, stop_after_chunks=5)
    assert any(name.startswith(".seg-") and not main for name, main in writers)  # segments off the main thread
    assert any(CHECKPOINT_FILE in name and not main for name, main in writers)
    run_experiment(experiment(), tmp_path / "at-once", progress=False, checkpoint_seconds=0, stop_after_chunks=5,
                   background_checkpoints=False)
    background, at_once = checkpoint_files(tmp_path / "background"), checkpoint_files(tmp_path / "at-once")
    for name, arrays in at_once.items():
        assert set(background[name]) == set(arrays)
        for key, value in arrays.items():
            np.testing.assert_array_equal(background[name][key], value, err_msg=f"{name} {key}")
    assert read_checkpoint_arrays(tmp_path / "background" / CHECKPOINT_FILE)[0] == 5


def test_the_last_checkpoint_is_written_at_once_after_the_one_in_the_background(tmp_path, monkeypatch):
    """The last chunk's checkpoint waits for the one still being written, then is written by the loop itself."""
    writers, write = [], results.write_all

    def noting_thread(f, data):
        if CHECKPOINT_FILE in os.path.basename(f.name) and f.tell() == 0:
            writers.append(threading.current_thread() is threading.main_thread())
        write(f, data)

    monkeypatch.setattr(results, "write_all", noting_thread)
    run_experiment(experiment(), tmp_path, progress=False, checkpoint_seconds=0)
    assert writers == [False] * (CHUNKS - 1) + [True]
    assert read_checkpoint_arrays(tmp_path / CHECKPOINT_FILE)[0] == CHUNKS
    assert read_checkpoint_arrays(tmp_path / PREVIOUS_CHECKPOINT_FILE)[0] == CHUNKS - 1


def test_a_background_write_that_fails_stops_the_run_and_keeps_the_checkpoint_before(tmp_path, monkeypatch):
    """A full disk in the middle of the 3rd segment: the run stops with that error, raised in the loop, and the
    2nd checkpoint is what a resume starts from."""
    segments, write = [0], results.write_all

    def full_disk(f, data):
        if os.path.basename(f.name).startswith(".seg-") and f.tell() == 0:
            segments[0] += 1
            if segments[0] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        write(f, data)

    monkeypatch.setattr(results, "write_all", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_experiment(experiment(), tmp_path, progress=False, checkpoint_seconds=0)
    monkeypatch.setattr(results, "write_all", write)
    chunk, _ = restored_arrays(tmp_path)
    assert chunk == 2
    assert not [p for p in (tmp_path / SEGMENTS_FOLDER).iterdir() if p.name.startswith(".")]  # no temporary left
