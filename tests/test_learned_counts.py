"""The learned pseudo-count (``--count-features cfn``, the coin-flip network): its signs, its formulas by hand, its
calibration against known visit counts, and the trainer reading it in all three of OPIQ's uses.

The calibration trains the count as the trainer does (one step per minibatch of 64 drawn uniformly from a replay)
on a tabular stream whose states were visited 1 to 1,000 times, and checks that ``Ñ`` follows ``N``: within a
factor of 3 at every count, and with rank correlation >= 0.9. It checks no learning result of an agent.
"""

from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import opiq_jax
from opiq_jax.common.config import StaticConfig
from opiq_jax.common.errors import UsageError
from opiq_jax.contracts import Batch
from opiq_jax.contracts.learned import LearnedCounting
from opiq_jax.parts.optimism import optimism_bonus
from opiq_jax.parts.pseudocounts import intrinsic_reward
from opiq_jax.primitives import coin_flips
from opiq_jax.primitives.networks import HEAD
from opiq_jax.reporting.stats import rank_correlation
from tests.test_properties import WINDOWS, one_run
from tests.training import batch_of


# ------------------------------------------------------------------------------------ signs and formulas


def test_the_signs_are_fair_independent_and_packed_below_d():
    packed = jax.vmap(lambda k: coin_flips.draw_signs(k, 20))(jax.random.split(jax.random.key(0), 20_000))
    assert packed.dtype == jnp.uint32 and int(jnp.max(packed)) < 2 ** 20
    signs = np.asarray(coin_flips.signs_of(packed, 20))
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert np.all(np.abs(signs.mean(axis=0)) < 0.03)  # each sign fair: 4 sigma of 20,000 flips is 0.028
    correlation = np.corrcoef(signs.T)[np.triu_indices(20, 1)]
    assert np.all(np.abs(correlation) < 0.03)  # and independent of the others
    assert coin_flips.signs_of(jnp.uint32(0b101), 3).tolist() == [1.0, -1.0, 1.0]
    assert int(coin_flips.draw_signs(jax.random.key(1), 32)) >= 0  # 32 signs fill the word


def test_draw_signs_refuses_more_than_a_word():
    with pytest.raises(ValueError, match="between 1 and 32"):
        coin_flips.draw_signs(jax.random.key(0), 33)


def test_the_pseudo_count_and_the_three_bonuses_by_hand():
    outputs = jnp.array([[0.5, -0.5], [0.1, 0.1]])  # mean f² = 0.25 and 0.01
    counts = coin_flips.pseudo_count(outputs)
    np.testing.assert_allclose(counts, [4.0, 100.0], rtol=1e-6)
    np.testing.assert_allclose(optimism_bonus(counts, jnp.float32(0.5), jnp.float32(2.0)), [0.5 / 25, 0.5 / 101 ** 2],
                               rtol=1e-6)
    np.testing.assert_allclose(intrinsic_reward(counts, jnp.float32(0.1)), [0.05, 0.01], rtol=1e-6)
    loss = coin_flips.coin_flip_loss(jnp.array([[0.5, -0.5]]), jnp.array([[1.0, -1.0]]))
    np.testing.assert_allclose(loss, 0.25, rtol=1e-6)


def test_the_running_moments_are_welfords_and_skip_what_is_not_real():
    samples = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    real = np.arange(50) % 5 != 0
    moments = coin_flips.Moments.zeros(3)
    for sample, is_real in zip(samples, real):
        moments = coin_flips.moments_update(moments, jnp.asarray(sample), jnp.bool_(is_real))
    assert float(moments.count) == real.sum()
    np.testing.assert_allclose(moments.mean, samples[real].mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moments.variance(), samples[real].var(axis=0), rtol=1e-4)
    assert coin_flips.Moments.zeros(2).variance().tolist() == [1.0, 1.0]  # no spread known yet: unit scale


# ------------------------------------------------------------------------------------ calibration

VISITS = np.array([1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000])
UNVISITED = 4


@pytest.fixture(scope="module")
def calibrated():
    """The learned count at its defaults after 20,000 minibatches of 64 from a replay holding a tabular stream:
    state i (a one-hot observation) visited ``VISITS[i]`` times with action 0, ``UNVISITED`` more states never."""
    states = len(VISITS) + UNVISITED

    class OneHot:
        def obs_from_compact(self, compact, params):
            return jax.nn.one_hot(compact[0], states)

    static = StaticConfig(env="chain", count_features="cfn")
    counting = LearnedCounting(types.SimpleNamespace(static=static, num_actions=2, obs_shape=(states,), env=OneHot()))
    counts = counting.init(jax.random.key(0), types.SimpleNamespace(obs=jnp.zeros((states,))), 2)
    stream = jax.nn.one_hot(jnp.asarray(np.repeat(np.arange(len(VISITS)), VISITS)), states)
    signs = jax.vmap(lambda k: coin_flips.draw_signs(k, static.cfn_outputs))(
        jax.random.split(jax.random.key(1), stream.shape[0]))
    moments = jax.lax.scan(lambda m, x: (coin_flips.moments_update(m, x, jnp.bool_(True)), None), counts.moments,
                           counting.network.apply(counts.prior, stream))[0]
    counts = counts.replace(moments=moments)

    @jax.jit
    def train(counts):
        def update(counts, key):
            rows = jax.random.randint(key, (64,), 0, stream.shape[0])
            lazy = dict(step_columns=lambda: stream[rows][:, None], count_targets=lambda: signs[rows][:, None])
            batch = Batch(actions=jnp.zeros((64, 1), jnp.int32), rewards=None, terminated=None, included=None,
                          lazy=lazy)
            return counting.learn(types.SimpleNamespace(counts=counts), batch, key), None
        return jax.lax.scan(update, counts, jax.random.split(jax.random.key(2), 20_000))[0]

    counts = train(counts)
    return np.asarray(jax.vmap(lambda obs: counting.query_all(counts, obs))(jnp.eye(states)))


def test_the_learned_count_tracks_known_visit_counts_from_1_to_1000(calibrated):
    estimated = calibrated[:len(VISITS), 0]
    ratio = estimated / VISITS
    assert np.all((ratio > 1 / 3) & (ratio < 3)), dict(zip(VISITS.tolist(), ratio.round(2).tolist()))
    assert rank_correlation(estimated, VISITS) >= 0.9


def test_never_visited_pairs_read_as_at_most_about_one_visit(calibrated):
    """The prior's unit variance: an unvisited state, and the untaken action of a visited one, start near a count of
    one, below the counts of pairs visited 50 times or more."""
    never = np.concatenate([calibrated[len(VISITS):, 0], calibrated[:len(VISITS) - 3, 1]])
    assert np.all(never < 2.0), never.round(2)
    assert np.all(calibrated[list(VISITS).index(50):len(VISITS), 0] > 20)


# ------------------------------------------------------------------------------------ the trainer reads it


def hand_set(counts, biases: jnp.ndarray):
    """``counts`` whose network outputs ``biases`` everywhere and whose prior outputs 0."""
    zero = jax.tree.map(jnp.zeros_like, counts.params)
    params = {**zero, "params": {**zero["params"], HEAD: {**zero["params"][HEAD], "bias": biases}}}
    return counts.replace(params=params, prior=jax.tree.map(jnp.zeros_like, counts.prior))


def test_opiq_acts_bootstraps_and_rewards_with_the_learned_counts():
    """f = 0.5 for action 0 (Ñ = 4) and 0.25 for action 1 (Ñ = 16) everywhere: acting adds C_action / (Ñ + 1)^M,
    the bootstrap reads Ñ(s', .), the pseudo-count reward reads Ñ(s, a)."""
    trainer, _, run = one_run(count_features="cfn", cfn_hidden=(8,))
    d = trainer.static.cfn_outputs
    run = run.replace(counts=hand_set(run.counts, jnp.concatenate([jnp.full((d,), 0.5), jnp.full((d,), 0.25)])))
    hp, agent = run.hparams, trainer.agent
    obs = agent.stepping.observations(run.env)
    q = agent.head_values(run, agent.forward_params(run), obs)[:, 0]
    bonus = trainer.action_values(run, obs) - q
    expected = hp["c_action"] / jnp.array([5.0, 17.0]) ** hp["m"]
    np.testing.assert_allclose(bonus[0], expected, rtol=1e-5)
    batch = jax.jit(lambda r: (lambda b: (b.next_counts, b.step_counts))(
        batch_of(trainer, r, WINDOWS, jnp.ones((2, 3), bool))))(run)
    np.testing.assert_allclose(batch[0], [[4.0, 16.0], [4.0, 16.0]], rtol=1e-5)
    np.testing.assert_allclose(batch[1], np.where(np.asarray(WINDOWS.action) == 0, 4.0, 16.0), rtol=1e-5)


def test_every_stored_step_keeps_its_signs_and_the_count_learns_from_them():
    trainer, state, run = one_run(count_features="cfn", cfn_hidden=(8,), total_steps=100, log_every=100)
    after, _ = jax.jit(trainer.train_chunk)(state)
    items = after.runs.memory.items
    assert items.count_target.dtype == jnp.uint32 and items.count_target.shape[:2] == (1, 100)
    assert len(np.unique(np.asarray(items.count_target[0]))) > 90  # 100 draws of 20 bits: all but a few differ
    changed = jax.tree.map(lambda a, b: not np.array_equal(a[0], b), after.runs.counts.params, run.counts.params)
    assert all(jax.tree.leaves(changed))  # g stepped on its minibatches
    assert float(after.runs.counts.moments.count[0]) == 100  # every step acted in moved the prior's moments


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("options, message", [
    (dict(cfn_outputs=0), "cfn_outputs must be >= 1"),
    (dict(cfn_outputs=33), r"cfn_outputs must lie in \[1, 32\], got 33"),
    (dict(cfn_hidden=(16, 0)), "cfn_hidden widths must be >= 1"),
    (dict(cfn_lr=0.0), "cfn_lr must be > 0"),
    (dict(count_features="simhash", cfn_outputs=8), "need count_features cfn"),
])
def test_a_learned_count_that_cannot_work_is_refused_before_compiling(options, message):
    with pytest.raises(UsageError, match=message):
        StaticConfig(**{"env": "chain", "count_features": "cfn", **options}).validate()


def test_a_learned_count_gone_nonfinite_flags_its_run_and_says_so(tmp_path, capsys):
    results = opiq_jax.train("chain", ["opiq"], 1, steps=300, out=tmp_path / "r", progress=False,
                             count_features="cfn", cfn_lr=1e30, cfn_hidden=(8,), chain_length=6, log_every=100)
    said = capsys.readouterr()
    assert "has a NaN or infinite learned count by step" in said.out + said.err
    flagged = {(r["metric"], r["step"]) for r in results.metrics
               if r["metric"].endswith("nonfinite") and r["value"] > 0}
    assert ("count_nonfinite", 300) in flagged and ("nonfinite", 300) in flagged


def test_a_learned_count_gone_nonfinite_flags_its_run_even_while_q_is_finite():
    """NaN in the count's network alone (Q, its loss and its parameters finite): the chunk's metrics flag the run."""
    from opiq_jax.agent.trainer import with_chunk_metrics

    trainer, state, _ = one_run(count_features="cfn", cfn_hidden=(8,))
    counts = state.runs.counts
    poisoned = counts.replace(params=jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), counts.params))
    _, metrics = jax.jit(lambda s: with_chunk_metrics(trainer.agent, s))(
        state.replace(runs=state.runs.replace(counts=poisoned)))
    assert float(metrics["count_nonfinite"][0]) == 1.0 and float(metrics["nonfinite"][0]) == 1.0
    _, clean = jax.jit(lambda s: with_chunk_metrics(trainer.agent, s))(state)
    assert float(clean["nonfinite"][0]) == 0.0


# ------------------------------------------------------------------------------------ a pool (Montezuma's stepping)


@pytest.fixture(scope="module")
def fake_pool_env():
    """``fake_montezuma_cfn``: Montezuma's spec stepped by a FakePool of 20-step episodes."""
    import dataclasses

    from opiq_jax.registry.environments import ENVIRONMENTS, register_environment
    from tests.fake_pool import FakePool

    register_environment(dataclasses.replace(
        ENVIRONMENTS["montezuma"], name="fake_montezuma_cfn",
        make=lambda static, num_envs, seed, **kw: FakePool(num_envs, seed, 20, **kw)))
    yield "fake_montezuma_cfn"
    ENVIRONMENTS.pop("fake_montezuma_cfn")


def test_a_pool_keeps_each_transitions_signs_beside_its_frame_and_learns_the_count(fake_pool_env, tmp_path):
    from opiq_jax.host.train_programs import run_methods
    from opiq_jax.registry.environments import static_for_env
    from opiq_jax.registry.methods import method_hparams, program_parts
    from opiq_jax.runs.experiment import Experiment, RunSpec

    static = static_for_env(fake_pool_env, total_steps=64, log_every=32, buffer_size=256, batch_size=8, train_every=4,
                            target_update=32, count_features="cfn", parts=program_parts(["opiq"]))
    experiment = Experiment(static, (RunSpec("opiq", "paper", 0, method_hparams(fake_pool_env, "opiq")),), seed=1)
    state = run_methods(experiment, tmp_path / "pool", progress=False, keep_states=True)["plain"]
    ring, counts = state.runs.memory, state.runs.counts
    stored = np.asarray(ring.count_target[0, 0, :int(ring.size[0, 0])])
    assert ring.count_target.dtype == jnp.uint32 and np.count_nonzero(stored) > 0.9 * (len(stored) - 1)
    assert float(counts.moments.count[0]) == 64 - 3  # every real step moved the prior's moments (3 reset steps)
    assert "newest frame" in json.loads((tmp_path / "pool" / "config.json").read_text())["resolved"]["counted"]


def test_a_pool_refuses_exact_counts_in_one_line(fake_pool_env):
    from opiq_jax.host.plan import plan_experiment

    with pytest.raises(UsageError, match="it has no exact cell ids"):
        plan_experiment(fake_pool_env, ("opiq",), 1, options={"count_features": "exact"})
