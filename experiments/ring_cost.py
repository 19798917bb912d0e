"""Does a Montezuma step cost more with a larger frame ring? Per-step time of the compiled trainer on the CPU.

Before the fix the trainer read the ring (to sample the batch) before it wrote the step's frame into it, in
the same step. XLA cannot update a buffer in place while a read of its old value is still pending, so it
copied the whole ring at every step: about 1.1 ms per 1,000 frames. The trainer now records the pending
outcome first and samples after (``trainer.overlapped_step``), and the ring is updated in place.

This script times chunks of one OPIQ run on Montezuma for each ``--buffers`` size, with this checkout, and
with an older checkout given by ``--before`` (a folder holding that revision's ``opiq_jax`` and ``envs``:
``git archive <rev> | tar -x -C <folder>``; revisions before the agent was built from parts have
``opiq_jax/atari.py`` and are timed through it). The maze's replay is timed the same way (``--maze``).
Writes ``ring_cost.md`` and ``ring_cost.json`` into ``--out``. Needs EnvPool.

    python -m experiments.ring_cost --out docs/results/ring-cost --before /tmp/old

Reaches inside: the compiled trainer (in a script run in each revision), to time one chunk's replay writes across
revisions.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]

# Times one configuration in a fresh interpreter whose first sys.path entry is the checkout under test.
TIMER = r"""
import sys, time, json
root, env, buffer, log_every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
import jax
import opiq_jax
assert opiq_jax.__file__.startswith(root), opiq_jax.__file__
old = __import__("os").path.exists(root + "/opiq_jax/atari.py")
steps = 6 * log_every
if old:  # the revision with a trainer of its own for Montezuma
    import opiq_jax.atari as atari
    from opiq_jax.common.config import static_for_env, stack_hparams
    from opiq_jax.registry.methods import method_hparams
    from opiq_jax.running.host_loop import Experiment, RunSpec, run_keys_for, compiled_trainer
else:
    from opiq_jax.common.config import stack_hparams
    from opiq_jax.registry.environments import method_hparams, static_for_env
    from opiq_jax.running.host_loop import Experiment, RunSpec, run_keys_for, compiled_trainer, trainer_for, start_pool
extra = dict(sketch_width=1024) if env == "montezuma" else dict(batch_size=32)
static = static_for_env(env, total_steps=steps, log_every=log_every, buffer_size=buffer, **extra)
experiment = Experiment(static, (RunSpec("opiq", "paper", 0, method_hparams(env, "opiq")),))
keys, env_keys = run_keys_for(experiment)
hparams = stack_hparams([r.hparams for r in experiment.runs]) if old else stack_hparams(experiment.hparams())
if env == "montezuma" and old:
    from envs.montezuma import MontezumaPool
    pool = MontezumaPool(num_envs=1, seed=0, max_episode_steps=30)
    trainer = atari.make_atari_train(static, pool)
    handle, first = pool.reset()
    state = jax.jit(trainer.init)(keys, hparams, handle, first)
elif env == "montezuma":
    pool = start_pool(experiment, 0, max_episode_steps=30)
    trainer = trainer_for(static, pool)[0]
    state = jax.jit(trainer.init)(keys, env_keys, hparams, pool.reset())
else:
    trainer = compiled_trainer(static)[0]
    state = jax.jit(trainer.init)(keys, env_keys, hparams)
chunk = jax.jit(trainer.train_chunk, donate_argnums=0).lower(state).compile()
state, metrics = chunk(state); jax.block_until_ready(metrics)  # warm-up: the replay's first batch
times = []
for _ in range(3):
    started = time.perf_counter(); state, metrics = chunk(state); jax.block_until_ready(metrics)
    times.append(time.perf_counter() - started)
print(json.dumps({"ms_per_step": min(times) / log_every * 1e3, "chunks_s": times}))
"""


@dataclass
class Args:
    out: Path = Path("results/ring-cost")
    """Folder for ring_cost.md and ring_cost.json."""
    before: Path | None = None
    """A folder holding an older revision's opiq_jax and envs (timed beside this checkout)."""
    buffers: tuple[int, ...] = (4_000, 100_000)
    """Ring sizes (frames) timed on Montezuma."""
    maze_buffers: tuple[int, ...] = (5_000, 250_000)
    """Replay sizes (steps) timed on the maze; empty to skip."""
    log_every: int = 100
    """Steps per timed chunk."""


def time_one(root: Path, env: str, buffer: int, log_every: int) -> dict:
    """One configuration timed in a fresh CPU process: ms per step (fastest of three chunks)."""
    run = subprocess.run([sys.executable, "-c", TIMER, str(root), env, str(buffer), str(log_every)],
                         capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=root)
    if run.returncode:
        raise SystemExit(f"ring_cost: {env} at {buffer} in {root} failed: {run.stderr.strip().splitlines()[-1]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| checkout | environment | replay size | ms per step | per 1,000 extra frames |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['checkout']} | {r['env']} | {r['buffer']:,} | {r['ms_per_step']:.1f} | "
                     f"{r['slope_ms_per_1000'] if r['slope_ms_per_1000'] is not None else ''} |")
    return "\n".join(lines)


def with_slopes(rows: list[dict]) -> list[dict]:
    """Each row with the growth in ms per step per 1,000 more frames, against the smallest size of its group."""
    for r in rows:
        base = min((s for s in rows if s["checkout"] == r["checkout"] and s["env"] == r["env"]),
                   key=lambda s: s["buffer"])
        grow = (r["ms_per_step"] - base["ms_per_step"]) / max(r["buffer"] - base["buffer"], 1) * 1000
        r["slope_ms_per_1000"] = None if r is base else round(grow, 3)
    return rows


def main(args: Args) -> list[dict]:
    checkouts = [("this", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    started, rows = time.time(), []
    for name, root in checkouts:
        # The maze is timed on this checkout only: its replay never copied (checked when the ring's copy was found).
        for env, sizes in (("montezuma", args.buffers), ("maze", args.maze_buffers if name == "this" else ())):
            for buffer in sizes:
                timed = time_one(root, env, buffer, args.log_every)
                rows.append(dict(checkout=name, env=env, buffer=buffer, **timed))
                print(f"ring_cost: {name} {env} {buffer:,}: {timed['ms_per_step']:.1f} ms/step", flush=True)
    rows = with_slopes(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    info = dict(device=platform.processor() or platform.machine(), platform="cpu", cpus=os.cpu_count(),
                seconds=round(time.time() - started, 1), command=" ".join(["python -m experiments.ring_cost",
                                                                           *sys.argv[1:]]))
    (args.out / "ring_cost.json").write_text(json.dumps(dict(rows=rows, **info), indent=1))
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1))
    (args.out / "ring_cost.md").write_text(table(rows) + "\n")
    print(table(rows))
    return rows


if __name__ == "__main__":
    main(tyro.cli(Args))
