"""The pool path (Montezuma's) with every method the paper runs there, on a pure-JAX stand-in for EnvPool
(``tests/fake_pool.py``), so none of this needs EnvPool: the methods are selectable with the paper's
settings, RND's predictor trains on frames while its target stays fixed, and BSP's prior stays fixed."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import Agent, make_train
from opiq_jax.parts.rnd import RndPredictor, RndTarget
from opiq_jax.contracts.pool import PoolShapes
from opiq_jax.primitives.networks import init_variables
from opiq_jax.registry.environments import ENVIRONMENTS, register_environment, static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.train_programs import run_methods
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.runs.results_folder import read_metrics
from tests.fake_pool import FakePool

PAPER_MONTEZUMA = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn_pc", "dqn_rnd", "bsp")
SMALL = dict(total_steps=32, log_every=16, buffer_size=256, batch_size=8, train_every=4, target_update=32,
             sketch_width=512, bsp_heads=3, rnd_batch=8)


@pytest.fixture(scope="module", autouse=True)
def fake_montezuma():
    """``fake_montezuma``: Montezuma's settings and methods, stepped by a FakePool of 20-step episodes."""
    spec = ENVIRONMENTS["montezuma"]
    register_environment(dataclasses.replace(
        spec, name="fake_montezuma", make=lambda static, num_envs, seed, **kw: FakePool(num_envs, seed, 20, **kw),
    ))
    yield
    ENVIRONMENTS.pop("fake_montezuma")


@pytest.fixture(scope="module")
def trained_folder(tmp_path_factory):
    """Every method the paper runs on Montezuma, two seeds each, trained on the pool path (three programs)."""
    static = static_for_env("fake_montezuma", **SMALL)
    runs = tuple(RunSpec(m, "paper", s, method_hparams("fake_montezuma", m)) for m in PAPER_MONTEZUMA for s in range(2))
    experiment = Experiment(static, runs, seed=3)
    out = tmp_path_factory.mktemp("pool")
    states = run_methods(experiment, out, progress=False, keep_states=True)
    return experiment, states, out


@pytest.fixture(scope="module")
def trained(trained_folder):
    experiment, states, out = trained_folder
    return experiment, states, read_metrics(out)


def test_every_method_records_the_learning_diagnostics_and_the_plot_draws_them(trained_folder, drawn):
    """Each program's runs (RND's and BSP's too) write the diagnostics rows, and ``opiq-jax plot`` draws them as one
    figure beside the rooms and returns, a panel per diagnostic."""
    from opiq_jax.reporting.plotting import DIAGNOSTIC_PANELS, METRIC_LABELS, plot_folder
    from opiq_jax.primitives.state import DIAGNOSTIC_METRICS

    _, _, out = trained_folder
    rows = read_metrics(out)
    for method in PAPER_MONTEZUMA:
        names = {r["metric"] for r in rows if r["method"] == method}
        assert set(DIAGNOSTIC_METRICS) <= names and "qplus_start" not in names, method
        last = max(int(r["step"]) for r in rows if r["method"] == method)
        final = {r["metric"]: float(r["value"]) for r in rows if r["method"] == method and int(r["step"]) == last}
        assert final["td_error_max"] >= 0 and final["q_abs_max"] > 0, method  # it trained in the last chunk
        assert 0 <= final["unknown_return_share"] <= 1, method
    dqn_pc = {float(r["value"]) for r in rows if r["method"] == "dqn_pc" and r["metric"] == "acted_bonus"}
    assert dqn_pc == {0.0}  # DQN + PC acts on plain Q: no action bonus
    rnd = [float(r["value"]) for r in rows if r["method"] == "dqn_rnd" and r["metric"] == "acted_intrinsic"]
    assert all(v > 0 for v in rnd)  # RND's error at the states reached, where the run acted
    written = plot_folder(out, pooled=True)
    assert written[-1] == out / "plot_diagnostics.png" and written[-1].stat().st_size > 0
    panels = [ax for ax in drawn[-1].axes if ax.get_visible()]
    expected = [m for m in DIAGNOSTIC_PANELS if m in {r["metric"] for r in rows}]
    assert [ax.get_ylabel() for ax in panels] == [METRIC_LABELS[m] for m in expected]
    assert {"td_error_max", "sketch_overcount"} <= set(expected)


def run_keys(experiment, seeds=(0, 1)):
    return jax.vmap(lambda s: jax.random.fold_in(jax.random.key(experiment.seed), s))(jnp.array(seeds, jnp.uint32))


def test_the_papers_montezuma_methods_are_selectable_with_the_papers_settings(trained):
    # the values themselves are checked one by one against the sources in tests/test_paper_settings.py
    assert static_for_env("montezuma").part("rnd").outputs == 512  # Burda et al.'s
    with pytest.raises(ValueError, match="dqn_dora is not available on montezuma"):
        method_hparams("montezuma", "dqn_dora")
    # every one of them trains on the pool path; the numbers-only ones in one program
    _, states, rows = trained
    assert sorted(states) == ["bsp", "plain", "rnd"]
    assert {r["method"] for r in rows} == set(PAPER_MONTEZUMA)
    assert all(np.isfinite(r["value"]) for r in rows if r["metric"] in ("loss", "q_start", "rooms_visited"))


def test_rnd_predictor_trains_on_frames_and_its_target_stays_fixed(trained):
    experiment, states, rows = trained
    rnd = states["rnd"].runs.parts["rnd"]
    frames = jnp.zeros((1, 84, 84, 1), jnp.uint8)  # the networks read one frame, as Burda et al.'s
    predictor, target = RndPredictor(512), RndTarget(512)
    run0 = jax.tree.map(lambda x: x[0], rnd)
    assert jax.eval_shape(predictor.apply, run0.params, frames).shape == (1, 512)
    assert jax.eval_shape(target.apply, run0.target_params, frames).shape == (1, 512)
    # the fixed target equals a fresh initialisation from the run's own key (drawn as the run's --network-init); the
    # predictor moved away from its own
    keys, drawn_as = run_keys(experiment), experiment.static.network_init

    def fresh(network, name):
        return jax.jit(jax.vmap(lambda k: init_variables(network, Agent.init_key(k, name), frames, drawn_as)))(keys)

    fresh_target, fresh_predictor = fresh(target, "rnd_target"), fresh(predictor, "predictor")
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(fresh_target), rnd.target_params)
    moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), jax.device_get(fresh_predictor), rnd.params)
    assert all(jax.tree.leaves(moved))
    # the intrinsic reward is the predictor's error on frames: positive while it has not learned them
    assert all(r["value"] > 0 for r in rows if r["metric"] == "intrinsic_reward" and r["method"] == "dqn_rnd")


def test_bsp_prior_stays_fixed_on_the_pool_path(trained):
    experiment, states, _ = trained
    bsp_static = dataclasses.replace(experiment.static, parts=("pseudocounts", "optimism", "bsp"))
    agent = make_train(bsp_static, PoolShapes()).agent
    obs = jnp.zeros((1, 84, 84, 4), jnp.uint8)
    fresh_prior = jax.jit(jax.vmap(lambda k: init_variables(agent.q_network, Agent.init_key(k, "prior"), obs,
                                                            bsp_static.network_init)))(run_keys(experiment))
    runs = states["bsp"].runs
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(fresh_prior), runs.parts["bsp"])
    heads = agent.weights.master(runs)["params"]["heads"]
    assert heads["head"]["kernel"].shape[:2] == (2, 3)  # [runs, K heads, ...]


def test_a_pool_has_no_cell_values_and_says_so_in_one_line(trained_folder):
    """``Results.cell_values`` lists the cells of the chain and the maze; a pool's states cannot be listed."""
    import opiq_jax

    _, _, out = trained_folder
    with pytest.raises(opiq_jax.UsageError, match="fake_montezuma's states cannot be listed, so it has no cell values"):
        opiq_jax.load(out).cell_values("plain")
