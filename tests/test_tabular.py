"""Tests for tabular OPIQ / UCB-H (``opiq_jax.tabular``), including the paper's two counterexamples.

Every jitted configuration is compiled once per module: the counterexample MDPs share shapes
(S = 1, A = 2, H = 1) and the number of episodes, so OPIQ with ``b_N`` compiles once for both.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.paper import tabular as T

# ------------------------------------------------------------------------------------------------
# Exact dynamic programming
# ------------------------------------------------------------------------------------------------


def _hand_mdp() -> T.TabularMDP:
    """2 states, 2 actions, H = 2, same dynamics at both steps.

    s0: a0 -> s0 (r = 0);   a1 -> s1 or s0 with prob 1/2 each (r = 0.2)
    s1: a0 -> s1 (r = 1);   a1 -> s0 (r = 0.5)
    """
    P = np.zeros((2, 2, 2, 2), np.float32)
    P[:, 0, 0, 0] = 1.0
    P[:, 0, 1, :] = 0.5
    P[:, 1, 0, 1] = 1.0
    P[:, 1, 1, 0] = 1.0
    R = np.broadcast_to(np.array([[0.0, 0.2], [1.0, 0.5]], np.float32), (2, 2, 2))
    return T.make_mdp(P, R)


def test_backward_induction_matches_hand_computation():
    mdp = _hand_mdp()
    q_star, v_star = T.optimal_values(mdp)
    # t = 2: Q = R, V = [0.2, 1].  t = 1: Q(s0) = [0 + 0.2, 0.2 + (1 + 0.2) / 2], Q(s1) = [1 + 1, 0.5 + 0.2].
    np.testing.assert_allclose(q_star[1], [[0.0, 0.2], [1.0, 0.5]], atol=1e-6)
    np.testing.assert_allclose(q_star[0], [[0.2, 0.8], [2.0, 0.7]], atol=1e-6)
    np.testing.assert_allclose(v_star, [[0.8, 2.0], [0.2, 1.0], [0.0, 0.0]], atol=1e-6)

    # Deterministic "always a0": V_2 = [0, 1], V_1 = [0, 2].
    _, v_a0 = T.policy_values(mdp, jnp.zeros((2, 2), jnp.int32))
    np.testing.assert_allclose(v_a0, [[0.0, 2.0], [0.0, 1.0], [0.0, 0.0]], atol=1e-6)

    # Uniform random: V_2 = [0.1, 0.75]; Q_1(s0) = [0.1, 0.2 + (0.75 + 0.1) / 2], Q_1(s1) = [1.75, 0.6].
    q_u, v_u = T.policy_values(mdp, jnp.full((2, 2, 2), 0.5))
    np.testing.assert_allclose(q_u[0], [[0.1, 0.625], [1.75, 0.6]], atol=1e-6)
    np.testing.assert_allclose(v_u[0], [0.3625, 1.175], atol=1e-6)

    # The optimal greedy policy attains V*.
    _, v_greedy = T.policy_values(mdp, T.greedy_policy(q_star))
    np.testing.assert_allclose(v_greedy, v_star, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# Pieces of the update
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("horizon", [1, 3, 10])
def test_learning_rate_is_one_on_first_visit(horizon):
    assert float(T.learning_rate(jnp.asarray(1), horizon)) == 1.0
    n = np.arange(1, 5)
    np.testing.assert_allclose(T.learning_rate(jnp.asarray(n), horizon), (horizon + 1) / (horizon + n))
    # eta_1 = 1: the first update discards the initial value entirely (UCB-H's H, OPIQ's 0).
    q_new = T.q_update(jnp.asarray(float(horizon)), jnp.asarray(0.3), jnp.asarray(1), horizon)
    assert float(q_new) == pytest.approx(0.3)


def test_bonus_and_optimism_formulas():
    hp = T.Hyperparams.create(M=2.0, p=0.1, bonus_scale=2.0)
    H, S, A, K = 4, 3, 2, 50
    n = jnp.arange(1, 6)
    expected_b = 2.0 * np.sqrt(H**3 * np.log(S * A * K * H / 0.1) / np.arange(1, 6))
    b = T.exploration_bonus(n, T.bonus_coefficient(hp, H, S, A, K * H))
    np.testing.assert_allclose(b, expected_b, rtol=1e-5)
    expected_opt = H / (np.arange(4) + 1.0) ** 2
    np.testing.assert_allclose(T.count_optimism(jnp.arange(4), hp.M, H), expected_opt, rtol=1e-6)


def test_bootstrap_is_capped_at_horizon():
    np.testing.assert_allclose(T.capped_max(jnp.array([[5.0, 100.0], [0.5, 1.0]]), 3), [3.0, 1.0])

    # Through the real update: H = 2, one state, deterministic reward 0.5; Q_2 holds a huge value.
    H = 2
    mdp = T.make_mdp(jnp.ones((H, 1, 1, 1)), jnp.full((H, 1, 1), 0.5))
    config = T.TabularConfig(num_episodes=1, use_bonus=False)
    hp = T.Hyperparams.create(M=1.0)
    state = T.init_state(config, mdp, jax.random.key(0))
    state = state.replace(q=state.q.at[1].set(50.0))
    next_v = T.bootstrap_values(config, state)
    np.testing.assert_allclose(next_v, [[H], [H], [0.0]])  # min{H, .} at t = 1, 2 and V_{H+1} = 0
    consts = T.run_constants(config, mdp, hp)
    new_state, _ = T.run_episode(config, mdp, hp, consts, state, jnp.full((H, 3), 0.5))
    # eta_1 = 1, so Q_1 = r + min{H, max Q+_2} = 0.5 + 2 (not 0.5 + 50 + 1/2), and Q_2 = r + V_3 = 0.5.
    np.testing.assert_allclose(new_state.q[:, 0, 0], [0.5 + H, 0.5], atol=1e-6)


def test_ties_are_broken_uniformly():
    mask = jnp.array([True, False, True, True])
    us = jnp.linspace(0.0, 1.0, 3000, endpoint=False)
    picks = np.asarray(jax.vmap(T.sample_from_mask, (None, 0))(mask, us))
    np.testing.assert_array_equal(np.bincount(picks, minlength=4), [1000, 0, 1000, 1000])
    np.testing.assert_allclose(T.greedy_policy(jnp.array([1.0, 2.0, 2.0])), [0.0, 0.5, 0.5])


# ------------------------------------------------------------------------------------------------
# Runs on small random MDPs
# ------------------------------------------------------------------------------------------------

SMALL = dict(num_states=3, num_actions=2, horizon=3)
SMALL_EPISODES, SMALL_CHUNK, SMALL_SEEDS = 400, 40, 8  # shared shapes: one compile per algorithm


@pytest.fixture(scope="module")
def small_mdps() -> T.TabularMDP:
    """Two small random MDPs with deterministic rewards (the setting of the paper's proof)."""
    keys = jax.random.split(jax.random.key(42), 2)
    return T.stack_mdps([T.random_mdp(k, **SMALL, bernoulli_rewards=False) for k in keys])


def _seed_keys(num_mdps: int, num_seeds: int, seed: int = 0) -> jax.Array:
    keys = jax.random.split(jax.random.key(seed), num_mdps * num_seeds)
    return jax.random.key_data(keys).reshape(num_mdps, num_seeds, -1)


@pytest.mark.parametrize("algorithm", ["opiq", "ucb_h"])
def test_vmapped_seeds_give_different_trajectories(small_mdps, algorithm):
    config = T.TabularConfig(num_episodes=SMALL_EPISODES, algorithm=algorithm)
    hp = T.Hyperparams.create(M=[1.0], p=0.05, bonus_scale=0.1)
    states = T.init_states_batched(config, small_mdps, hp, _seed_keys(2, SMALL_SEEDS))
    states, regrets = T.run_episodes_batched(config, small_mdps, hp, states, SMALL_CHUNK)
    assert regrets.shape == (1, 2, SMALL_SEEDS, SMALL_CHUNK)
    assert np.all(np.isfinite(regrets)) and np.all(np.asarray(regrets) >= -1e-5)
    counts = np.asarray(states.counts)[0]
    assert counts.sum() == 2 * SMALL_SEEDS * SMALL_CHUNK * SMALL["horizon"]
    for m in range(2):
        for i in range(SMALL_SEEDS):
            for j in range(i + 1, SMALL_SEEDS):
                assert not np.array_equal(counts[m, i], counts[m, j]), (algorithm, m, i, j)
                assert not np.array_equal(regrets[0, m, i], regrets[0, m, j]), (algorithm, m, i, j)


def test_opiq_q_plus_is_optimistic_during_a_run(small_mdps):
    """Lemma 3 (proof of Theorem 1): with probability at least 1 - p, Q+_t >= Q*_t for all (s, a, t, k).

    Checked at every entry (unvisited ones have Q+ = H >= Q* trivially, so only visited entries are
    informative) after every chunk of episodes, for 2 MDPs x 8 seeds (16 runs), with the paper's c = 2 and
    deterministic rewards as in the proof. The guarantee is probabilistic (fails w.p. <= p per run),
    so we assert on the fraction of violating runs; in practice the bound is loose and none violate.
    """
    config = T.TabularConfig(num_episodes=SMALL_EPISODES)
    hp = T.Hyperparams.create(M=[1.0], p=0.05, bonus_scale=2.0)
    q_star = np.asarray(jax.vmap(T.optimal_values)(small_mdps)[0])  # [n_mdp, H, S, A]
    states = T.init_states_batched(config, small_mdps, hp, _seed_keys(2, SMALL_SEEDS, seed=1))
    violated = np.zeros((2, SMALL_SEEDS), bool)
    visited_checked = 0
    for _ in range(SMALL_EPISODES // SMALL_CHUNK):
        states, _ = T.run_episodes_batched(config, small_mdps, hp, states, SMALL_CHUNK)
        q_plus = np.asarray(T.q_plus(states.q, states.counts, hp.M[0], SMALL["horizon"]))[0]
        np.testing.assert_allclose(q_plus, np.asarray(states.q + states.optimism)[0], rtol=1e-6)  # the cache
        visited = np.asarray(states.counts)[0] > 0
        visited_checked += visited.sum()
        violated |= np.any((q_plus < q_star[:, None] - 1e-4) & visited, axis=(2, 3, 4))
    assert visited_checked > 0
    assert violated.mean() <= hp.p[0], violated


# ------------------------------------------------------------------------------------------------
# Counterexamples of the appendix (S = 1, A = 2, H = 1)
# ------------------------------------------------------------------------------------------------

CEX_EPISODES, CEX_SEEDS = 2048, 400  # a multiple of 256 compiles a single episode loop


def _one_state_mdp(rewards, bernoulli) -> T.TabularMDP:
    mdp = T.make_mdp(jnp.ones((1, 1, 2, 1)), jnp.array([[rewards]]), jnp.array([[bernoulli]]))
    return T.stack_mdps([mdp])


def _fraction_settled_on_worse(config, mdps, hp, gap) -> float:
    """Fraction of seeds whose policy picks the worse action more than half the time over the last
    quarter of episodes; with one state and H = 1 the exact per-episode regret is gap * pi_k(worse)."""
    _, regrets = T.run_batched(config, mdps, hp, _seed_keys(1, CEX_SEEDS, seed=7))
    last = np.asarray(regrets)[0, 0, :, -CEX_EPISODES // 4 :].mean(-1) / gap
    return float(np.mean(last > 0.5))


def test_greedy_pessimistic_q_learning_fails_half_the_time_opiq_never():
    """Appendix "Necessity for Optimism During Action Selection": left pays 0.1, right pays 1.

    Acting greedily on the pessimistic Q, the first (uniformly random) pick gets a positive Q and is
    never abandoned, so about half the seeds stay on the left action forever; OPIQ never does.
    """
    mdps = _one_state_mdp([0.1, 1.0], [False, False])
    hp = T.Hyperparams.create(M=[1.0], p=0.01, bonus_scale=2.0)
    greedy = T.TabularConfig(CEX_EPISODES, optimistic_acting=False)
    frac_greedy = _fraction_settled_on_worse(greedy, mdps, hp, gap=0.9)
    frac_opiq = _fraction_settled_on_worse(T.TabularConfig(CEX_EPISODES), mdps, hp, gap=0.9)
    assert 0.35 <= frac_greedy <= 0.65, frac_greedy
    assert frac_opiq == 0.0, frac_opiq


def test_opiq_without_bonus_fails_with_probability_above_p():
    """Appendix "Necessity for Intrinsic Motivation Bonus": left pays 1 w.p. a (else 0), right pays a/lambda.

    Parameters: p = 0.01, a = 0.5, lambda = 2, M = 1 (the Theorem's M >= 1 regime). They satisfy the
    appendix's requirements lambda > 1, p < 1 - a and M > log(lambda/a) / log(log p / log(1-a)) = 0.73.

    Inconsistency in the appendix: it says such a lambda can always be picked "because log(lambda/a)
    can get arbitrarily close to 0", but with lambda > 1 (needed for the right action to be the worse
    one) log(lambda/a) > log(1/a), so lambda alone cannot shrink the bound; a must be chosen too, and
    even then the condition only holds for M > inf_a log(1/a) / log(log p / log(1-a)) (about 0.35
    for p = 0.05, 0.11 for p = 0.01), not for every M > 0. We therefore pick (a, lambda) for the given
    (p, M) rather than lambda alone, which is the closest faithful reading.

    Failure is implied by the first R0 left pulls all paying 0, where R0 is the smallest integer with
    1/(R0 + 1)^M < a/lambda (then Q+(L) <= 1/(R0 + 1)^M < a/lambda <= Q+(R) forever): probability
    (1 - a)^R0 = 0.5^4 = 0.0625 > p. With b_N (c = 2), OPIQ settles on the better action in every seed.
    """
    p, a, lam, M = 0.01, 0.5, 2.0, 1.0
    assert lam > 1 and p < 1 - a and M > math.log(lam / a) / math.log(math.log(p) / math.log(1 - a))
    r0 = next(r for r in range(1, 1000) if 1.0 / (r + 1) ** M < a / lam)
    assert (1 - a) ** r0 > p

    mdps = _one_state_mdp([a, a / lam], [True, False])
    hp = T.Hyperparams.create(M=[M], p=p, bonus_scale=2.0)
    no_bonus = T.TabularConfig(CEX_EPISODES, use_bonus=False)
    frac_no_bonus = _fraction_settled_on_worse(no_bonus, mdps, hp, a - a / lam)
    frac_bonus = _fraction_settled_on_worse(T.TabularConfig(CEX_EPISODES), mdps, hp, a - a / lam)
    assert frac_no_bonus > max(p, (1 - a) ** r0 / 2), frac_no_bonus
    assert frac_bonus <= p, frac_bonus
