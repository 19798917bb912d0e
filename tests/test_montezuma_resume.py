"""Montezuma's Revenge resumes: a small run killed with SIGKILL restarts from its checkpoint, with the agent, the
frame replay, the counts and every part's state as they were saved; the emulators start fresh episodes (marked by
``env_restarts``), and the run finishes. EnvPool needed (CI installs the Atari extra)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("envpool")

from opiq_jax.common.config import stack_hparams  # noqa: E402
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams  # noqa: E402
from opiq_jax.host.host_loop import restore_checkpoint, run_experiment, start_pool
from opiq_jax.runs.compiled import trainer_for
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for
from opiq_jax.runs.results_folder import is_finished, read_metrics
from opiq_jax.store.files import CHECKPOINT_FILE, read_checkpoint_arrays  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# A batch of 8 (Montezuma's is 32) and an update every 8 steps keep the updates, most of a chunk's time on a CPU,
# cheap; the run still trains (four updates a chunk) before it is killed.
STATIC = static_for_env("montezuma", total_steps=160, log_every=40, buffer_size=400, batch_size=8, train_every=8,
                        sketch_width=1024, bsp_heads=2)
# BSP's heads and fixed prior are a part's state of their own: the resume must keep them too.
EXPERIMENT = Experiment(STATIC, tuple(RunSpec("bsp", "paper", s, method_hparams("montezuma", "bsp")) for s in range(2)))

CHILD = """
import sys
from tests.test_montezuma_resume import EXPERIMENT
from opiq_jax.host import host_loop
chunks, finished = int(sys.argv[2]), host_loop.wait_for
computed = []

def pausing(metrics):  # the chunk after the awaited checkpoint's waits here (its checkpoint finishing) until the kill
    computed.append(metrics)
    if len(computed) == chunks + 1:
        sys.stdin.read()
    return finished(metrics)

host_loop.wait_for = pausing
host_loop.run_experiment(EXPERIMENT, sys.argv[1], progress=False, checkpoint_seconds=0, max_episode_steps=30)
"""


def kill_after_checkpoint(out: Path, chunks: int) -> None:
    """Trains in a child until its checkpoint holds ``chunks`` chunks, then SIGKILLs it: the child waits in the chunk
    after them, so the kill lands there however fast or loaded the machine is."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(chunks)], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.monotonic() + 600
    while True:
        assert child.poll() is None, child.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        try:
            if read_checkpoint_arrays(out / CHECKPOINT_FILE)[0] >= chunks:
                break
        except Exception:  # not written yet, or being replaced
            pass
        time.sleep(0.2)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)


def test_a_killed_montezuma_run_resumes_with_the_saved_agent_and_finishes(tmp_path):
    out = tmp_path / "montezuma"
    kill_after_checkpoint(out, chunks=2)
    chunk, saved = read_checkpoint_arrays(out / CHECKPOINT_FILE)
    assert chunk == 2

    hparams = stack_hparams(EXPERIMENT.hparams())
    run_keys, env_keys = run_keys_for(EXPERIMENT)
    checkpoint = restore_checkpoint(out, EXPERIMENT, hparams, run_keys, env_keys, say=print)
    restored, restored_chunk = checkpoint.state, checkpoint.chunk
    assert restored_chunk == chunk
    pool = start_pool(EXPERIMENT, chunk, max_episode_steps=30)
    trainer = trainer_for(EXPERIMENT.static, pool)[0]
    resumed = jax.device_get(trainer.stepping.restart(restored, pool))

    # The agent as saved: networks and optimiser (as the weight storage keeps them), counts, BSP's heads and prior,
    # keys, hyperparameters.
    for name in ("weights", "target_params", "counts", "parts", "hparams"):
        leaves = jax.tree_util.tree_flatten_with_path(getattr(resumed.runs, name))[0]
        assert leaves, name
        for path, value in leaves:
            key = ".runs." + name + jax.tree_util.keystr(path)
            np.testing.assert_array_equal(value, saved[key], err_msg=key)
    assert "bsp" in resumed.runs.parts
    # The frame replay as saved, plus each environment's fresh first frame in the next slot.
    memory = jax.tree_util.tree_flatten_with_path(restored.runs.memory)[0]
    for path, value in memory:
        np.testing.assert_array_equal(value, saved[".runs.memory" + jax.tree_util.keystr(path)])
    assert np.all(resumed.runs.memory.size == np.asarray(restored.runs.memory.size) + 1)
    assert np.all(resumed.runs.env.restarts == 1)

    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, max_episode_steps=30)
    rows = read_metrics(out)
    assert is_finished(out) and max(r["step"] for r in rows) == 160
    restarts = {r["step"]: r["value"] for r in rows if r["metric"] == "env_restarts" and r["run"] == 0}
    assert restarts[chunk * 40] == 0 and restarts[160] == 1  # the metrics mark the resume
