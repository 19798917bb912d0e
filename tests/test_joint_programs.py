"""Several programs in one scan (``experiments.joint_programs.joint_train_chunk``) train each program's runs exactly as
a program of their own does: every state leaf and every metric bit-identical, chunk after chunk."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from experiments.joint_programs import joint_train_chunk
from opiq_jax.common.config import stack_hparams
from opiq_jax.running.plan import plan_experiment
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import run_keys_for, split_by_program
from tests.conftest import xla_flags_without

# The chain with small networks; 40 steps per chunk, so the first chunk fills the replay past one batch
# (batch 16) and the second trains at every step and copies the target (every 40 steps).
OPTIONS = dict(steps=120, log_every=40, chain_length=6, hidden=(8,), buffer_size=100, batch_size=16, target_update=40)


@pytest.fixture(scope="module")
def programs():
    experiment = plan_experiment("chain", ("opiq", "bsp"), 2, options=OPTIONS)
    return split_by_program(experiment)


def initial_state(experiment):
    _, init, _ = compiled_trainer(experiment.static)
    return init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))


def test_joint_chunks_equal_each_programs_own_chunks():
    """In a Python process of its own, with XLA's default CPU fusion emitters: the test session's older emitters
    (tests/conftest.py) fuse the joint program and the separate ones differently, one float32 unit apart."""
    flags = xla_flags_without(("--xla_cpu_use_fusion_emitters",))
    code = "from tests.test_joint_programs import check_joint_chunks_equal_separate as c; c()"
    run = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "joint chunks equal" in run.stdout


def check_joint_chunks_equal_separate():
    programs = split_by_program(plan_experiment("chain", ("opiq", "bsp"), 2, options=OPTIONS))
    assert list(programs) == ["plain", "bsp"]  # OPIQ's counts and optimism; BSP's heads, prior and part state
    separate = {name: initial_state(e) for name, e in programs.items()}
    joint = tuple(initial_state(e) for e in programs.values())
    agents = tuple(compiled_trainer(e.static)[0].agent for e in programs.values())
    joint_chunk = jax.jit(lambda states: joint_train_chunk(agents, states))
    for _ in range(3):
        separate_metrics = {}
        for name, experiment in programs.items():
            separate[name], separate_metrics[name] = compiled_trainer(experiment.static)[2](separate[name])
        joint, joint_metrics = joint_chunk(joint)
        for name, state, metrics in zip(programs, joint, joint_metrics):
            assert int(state.step) == int(separate[name].step)
            assert metrics.keys() == separate_metrics[name].keys()
            for key in metrics:
                np.testing.assert_array_equal(metrics[key], separate_metrics[name][key], err_msg=f"{name}: {key}")
            own = jax.tree.leaves(jax.random.key_data(separate[name].runs.key)) + jax.tree.leaves(separate[name].runs.params)
            together = jax.tree.leaves(jax.random.key_data(state.runs.key)) + jax.tree.leaves(state.runs.params)
            for a, b in zip(own, together):
                np.testing.assert_array_equal(a, b, err_msg=name)
    assert all(float(np.min(m["loss"])) > 0 for m in joint_metrics)  # the runs trained in the last chunk
    print("joint chunks equal")


def test_programs_with_different_schedules_are_refused(programs):
    plain = compiled_trainer(programs["plain"].static)[0].agent
    other = plan_experiment("chain", ("dqn_rnd",), 2, options={**OPTIONS, "target_update": 20})
    rnd = compiled_trainer(other.static)[0].agent
    state = initial_state(programs["plain"])
    with pytest.raises(ValueError, match="cannot train in one scan: their target_update differ"):
        joint_train_chunk((plain, rnd), (state, initial_state(other)))
