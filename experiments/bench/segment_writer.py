"""How fast a checkpoint writes Montezuma's frame segments, against the writer's threads.

A checkpoint stores the frames written since the one before as a segment (:mod:`opiq_jax.store.frames`): blocks
fetched from the device and zlib-compressed by a pool of threads. This times the writer itself, as a checkpoint
calls it (``FrameRings.save`` into a fresh folder, file synced and renamed), on real frames: a raw EnvPool pool of
Montezuma with the paper's settings plays random actions, and each environment's consecutive newest frames fill
one ring (as in a run with several environments per run), repeated until the rings hold ``--frames`` frames.

For each thread count of ``--threads``, and once with compression off (zlib's level 0, one thread: the bytes of
the uncompressed format), it reports the frames' MB/s (uncompressed bytes over the wall-clock of the save) and the
bytes on disk. ``--repeats`` saves per setting, the median taken. Writes ``summary.md``, ``summary.json`` and
``run_info.json`` into ``--out``.

Run: ``python -m experiments.bench.segment_writer --out docs/results/segment-writer``.

Reaches inside: opiq_jax.store.frames, whose writer it times, and opiq_jax.envs.montezuma for the raw pool.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from opiq_jax.store import frames as frame_store
from opiq_jax.store.files import atomic_write_chunks
from opiq_jax.reporting import source_revision
from experiments.tools.command_line import command_line


@dataclass
class Args:
    out: Path
    """Where summary.md, summary.json and run_info.json go."""
    frames: int = 200_000
    """Frames in the segment (the 2026-11 measurement of the uncompressed writer saved 200,000)."""
    rings: int = 8
    """Rings they are split over (environments of a run)."""
    played: int = 2_000
    """Random steps of each environment of the pool that makes the frames."""
    threads: tuple[int, ...] = (1, 2, 4, 8)
    repeats: int = 3
    scratch: Path | None = None
    """Folder the segments are written into (default: a temporary folder; a real disk, not memory, is what counts)."""


def played_frames(rings: int, steps: int) -> np.ndarray:
    """``uint8[rings, steps, 84, 84]``: each environment's newest frames, step after step, in random play."""
    from opiq_jax.envs.montezuma import make_envpool

    env = make_envpool(rings, seed=0)
    obs, _ = env.reset()
    rng = np.random.default_rng(0)
    frames = np.empty((rings, steps, *obs.shape[-2:]), np.uint8)
    for t in range(steps):
        obs, *_ = env.step(rng.integers(0, env.action_space.n, rings))
        frames[:, t] = obs[:, -1]
    return frames


def timed_save(frames: jax.Array, threads: int, level: int, folder: Path) -> tuple[float, int]:
    """Seconds of one save of every ring whole, and the bytes it wrote."""
    frame_store.COMPRESSION_LEVEL = level
    path = folder / "seg.bin"
    starts = np.zeros(frames.shape[0], np.int64)
    counts = np.full(frames.shape[0], frames.shape[-3], np.int64)
    started = time.perf_counter()
    atomic_write_chunks(path, frame_store.segment_chunks(frames, starts, counts, threads))
    seconds = time.perf_counter() - started
    size = path.stat().st_size
    path.unlink()
    return seconds, size


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    played = played_frames(args.rings, args.played)
    per_ring = args.frames // args.rings
    tiled = np.concatenate([played] * (per_ring // args.played + 1), axis=1)[:, :per_ring]
    frames = jax.device_put(jnp.asarray(tiled[:, None]))  # [rings, 1, capacity, 84, 84], on the default device
    raw_mb = tiled.nbytes / 1e6
    folder = Path(tempfile.mkdtemp(dir=args.scratch))
    rows = []
    try:
        settings = [("uncompressed (zlib level 0)", 1, 0)] + [("zlib level 1", t, 1) for t in args.threads]
        for name, threads, level in settings:
            runs = [timed_save(frames, threads, level, folder) for _ in range(args.repeats)]
            seconds = statistics.median(s for s, _ in runs)
            rows.append({"writer": name, "threads": threads, "seconds": round(seconds, 3),
                         "frames_mb_per_s": round(raw_mb / seconds, 1), "bytes_on_disk": runs[0][1],
                         "ratio": round(tiled.nbytes / runs[0][1], 2)})
            print(rows[-1], flush=True)
    finally:
        frame_store.COMPRESSION_LEVEL = 1
        shutil.rmtree(folder, ignore_errors=True)
    device = f"{jax.devices()[0].device_kind} ({jax.default_backend()}), {os.cpu_count()} CPU cores"
    lines = [f"# The frame segment writer: {args.frames:,} Montezuma frames ({raw_mb:,.0f} MB) in {args.rings} rings",
             "", f"On {device}; median of {args.repeats} saves each.", "",
             "| writer | threads | seconds | frames' MB/s | on disk (MB) | compression |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['writer']} | {r['threads']} | {r['seconds']} | {r['frames_mb_per_s']:,} | "
              f"{r['bytes_on_disk'] / 1e6:,.1f} | {r['ratio']}x |" for r in rows]
    (args.out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = {"frames": args.frames, "rings": args.rings, "played": args.played, "threads": list(args.threads),
                "repeats": args.repeats, "block_frames": frame_store.BLOCK_FRAMES, "zlib_level": 1}
    (args.out / "summary.json").write_text(json.dumps({"settings": settings, "rows": rows, "frames_mb": raw_mb},
                                                      indent=1), encoding="utf-8")
    (args.out / "run_info.json").write_text(json.dumps({
        "command": command_line("experiments.bench.segment_writer", argv), **source_revision(),
        "device": device, "machine": platform.machine(), "date": time.strftime("%Y-%m-%d"),
        "wall_seconds": round(time.monotonic() - started, 1)}, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
