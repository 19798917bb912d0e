"""Tabular OPIQ (Algorithm 1 of Rashid et al., ICLR 2020) and UCB-H (Jin et al., 2018) in JAX.

Setting
-------
Finite-horizon tabular MDPs with **time-dependent** dynamics and rewards, as in the paper's
appendix "Tabular Reinforcement Learning": ``P[t, s, a, s']`` and ``R[t, s, a]`` for
``t = 0, ..., H-1`` (the paper's ``t = 1, ..., H``). A time-homogeneous MDP is the special case of
identical slices (``random_mdp(..., time_homogeneous=True)``). ``R`` holds the *mean* reward in
``[0, 1]``; where ``bernoulli[t, s, a]`` is set the sampled reward is ``Bernoulli(R[t, s, a])``,
otherwise it is exactly ``R[t, s, a]``. Every episode starts in ``start_state``.

Algorithms (one code path, selected by :class:`TabularConfig`)
--------------------------------------------------------------
* OPIQ: ``Q_t`` initialised at 0; ``Q+_t(s, a) = Q_t(s, a) + H / (N(s, a, t) + 1)^M`` is used for
  acting and for bootstrapping;
  ``Q_t(s,a) <- (1 - eta_N) Q_t(s,a) + eta_N (r + b_N + min{H, max_a' Q+_{t+1}(s', a')})`` with
  ``eta_N = (H + 1) / (H + N)`` and ``b_N = c sqrt(H^3 log(SAT/p) / N)`` (paper: ``c = 2``),
  ``T = K H`` for a run of ``K`` episodes.
* UCB-H: ``Q_t`` initialised at ``H``; the same update with ``Q`` in place of ``Q+``.
* Ablations (flags): acting greedily on plain ``Q`` (appendix "Necessity for Optimism During Action
  Selection"), bootstrapping from plain ``Q``, and dropping ``b_N`` (appendix "Necessity for
  Intrinsic Motivation Bonus").

Greedy actions break ties uniformly at random. The value after the last step is zero,
``V_{H+1} = 0``, as in the proof of Theorem 1 (taking Algorithm 1's initialisation of
``N(., ., H+1) = 0`` literally would make ``Q+_{H+1} = H`` and add ``H`` to every last-step target).

Regret of episode ``k`` is ``V*_1(s_1) - V^{pi_k}_1(s_1)``, computed exactly by backward induction
for the policy ``pi_k`` the agent acts with during episode ``k``: greedy on its acting values at the
start of the episode, with ties spread uniformly (a stochastic policy exactly when there are ties).
Within an episode the update at step ``t`` only touches ``Q_t`` and ``N(., ., t)``, which are never
read again in that episode, so the acting policy and the bootstrap values are fixed for the whole
episode and are computed once at its start.

Everything is vmapped over hyperparameters x MDPs x seeds (:func:`run_batched`,
:func:`run_episodes_batched`) and jitted; an episode is a ``lax.scan`` over ``t`` and a run a
``lax.scan`` over episodes.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import chex
import jax
import jax.numpy as jnp
from flax import struct

Algorithm = Literal["opiq", "ucb_h"]


# --------------------------------------------------------------------------------------------------
# MDPs and exact dynamic programming
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class TabularMDP:
    """A finite-horizon tabular MDP with time-dependent transitions and rewards.

    Attributes:
        P: ``[H, S, A, S]`` transition probabilities ``P_t(s' | s, a)``.
        R: ``[H, S, A]`` mean rewards in ``[0, 1]``.
        bernoulli: ``[H, S, A]`` bool; where true the reward is ``Bernoulli(R)``, else exactly ``R``.
        start_state: ``[]`` int32, the state every episode starts in.
    """

    P: jax.Array
    R: jax.Array
    bernoulli: jax.Array
    start_state: jax.Array

    @property
    def horizon(self) -> int:
        return self.P.shape[-4]

    @property
    def num_states(self) -> int:
        return self.P.shape[-1]

    @property
    def num_actions(self) -> int:
        return self.P.shape[-2]


def make_mdp(P, R, bernoulli=None, start_state: int = 0) -> TabularMDP:
    """Builds a :class:`TabularMDP` from arrays, checking shapes (``bernoulli`` defaults to all false)."""
    P = jnp.asarray(P, jnp.float32)
    R = jnp.asarray(R, jnp.float32)
    bernoulli = jnp.zeros(R.shape, bool) if bernoulli is None else jnp.asarray(bernoulli, bool)
    mdp = TabularMDP(P=P, R=R, bernoulli=bernoulli, start_state=jnp.asarray(start_state, jnp.int32))
    _check_mdp(mdp)
    return mdp


@functools.partial(
    jax.jit,
    static_argnames=("num_states", "num_actions", "horizon", "bernoulli_rewards", "time_homogeneous"),
)
def random_mdp(
    key: chex.PRNGKey,
    num_states: int,
    num_actions: int,
    horizon: int,
    *,
    dirichlet_alpha: float = 1.0,
    bernoulli_rewards: bool = True,
    time_homogeneous: bool = False,
) -> TabularMDP:
    """Samples a random MDP.

    Each ``P_t(. | s, a)`` is ``Dirichlet(dirichlet_alpha)`` (small alpha: near-deterministic
    transitions), each mean reward ``R_t(s, a)`` is ``Uniform[0, 1]``, rewards are Bernoulli with that
    mean if ``bernoulli_rewards`` and deterministic otherwise, and the start state is 0.
    ``time_homogeneous`` draws one ``(P, R)`` and repeats it over ``t``.
    """
    k_p, k_r = jax.random.split(key)
    steps = 1 if time_homogeneous else horizon
    alpha = jnp.full((num_states,), dirichlet_alpha, jnp.float32)
    P = jax.random.dirichlet(k_p, alpha, (steps, num_states, num_actions))
    R = jax.random.uniform(k_r, (steps, num_states, num_actions))
    P = jnp.broadcast_to(P, (horizon, num_states, num_actions, num_states))
    R = jnp.broadcast_to(R, (horizon, num_states, num_actions))
    bernoulli = jnp.full(R.shape, bernoulli_rewards)
    return TabularMDP(P=P, R=R, bernoulli=bernoulli, start_state=jnp.zeros((), jnp.int32))


def stack_mdps(mdps) -> TabularMDP:
    """Stacks same-shaped MDPs along a new leading axis (for the batched runners)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *mdps)


def _check_mdp(mdp: TabularMDP, batch_dims: int = 0) -> None:
    """Shape checks: ``P [..., H, S, A, S]``, ``R`` and ``bernoulli [..., H, S, A]``, ``start_state [...]``."""
    chex.assert_rank(mdp.P, 4 + batch_dims)
    *batch, H, S, A, _ = mdp.P.shape
    chex.assert_shape(mdp.P, (*batch, H, S, A, S))
    chex.assert_shape([mdp.R, mdp.bernoulli], (*batch, H, S, A))
    chex.assert_shape(mdp.start_state, tuple(batch))


def _backward_induction(mdp: TabularMDP, state_value) -> tuple[jax.Array, jax.Array]:
    """Generic backward induction: ``Q_t = R_t + P_t V_{t+1}``, ``V_t = state_value(t, Q_t)``, ``V_{H+1} = 0``.

    Returns ``(Q [H, S, A], V [H + 1, S])``.
    """

    def backup(v_next, t):
        q_t = mdp.R[t] + mdp.P[t] @ v_next
        v_t = state_value(t, q_t)
        return v_t, (q_t, v_t)

    v_end = jnp.zeros((mdp.num_states,), mdp.R.dtype)
    _, (q, v) = jax.lax.scan(backup, v_end, jnp.arange(mdp.horizon), reverse=True)
    return q, jnp.concatenate([v, v_end[None]], axis=0)


def optimal_values(mdp: TabularMDP) -> tuple[jax.Array, jax.Array]:
    """Exact ``Q* [H, S, A]`` and ``V* [H + 1, S]`` (with ``V*_{H+1} = 0``)."""
    return _backward_induction(mdp, lambda t, q_t: q_t.max(-1))


def policy_values(mdp: TabularMDP, policy: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Exact ``Q^pi [H, S, A]`` and ``V^pi [H + 1, S]`` of a time-dependent policy.

    ``policy`` is either deterministic, ``[H, S]`` integer actions, or stochastic, ``[H, S, A]``
    action probabilities.
    """
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    if jnp.issubdtype(policy.dtype, jnp.integer):
        chex.assert_shape(policy, (H, S))
        policy = jax.nn.one_hot(policy, A, dtype=mdp.R.dtype)
    chex.assert_shape(policy, (H, S, A))
    return _backward_induction(mdp, lambda t, q_t: jnp.sum(policy[t] * q_t, -1))


# --------------------------------------------------------------------------------------------------
# Agent: configuration, hyperparameters, state
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TabularConfig:
    """Static (compile-time) configuration of a tabular run.

    Attributes:
        num_episodes: ``K``; also sets ``T = K H`` inside ``b_N``'s ``log(SAT/p)``.
        algorithm: ``"opiq"`` (pessimistic init at 0, acts/bootstraps on ``Q+``) or ``"ucb_h"``
            (optimistic init at ``H``, acts/bootstraps on ``Q``).
        optimistic_acting: OPIQ only; if false act greedily on plain ``Q`` instead of ``Q+``.
        optimistic_bootstrap: OPIQ only; if false bootstrap from plain ``Q`` instead of ``Q+``.
        use_bonus: if false drop the count-based intrinsic reward ``b_N``.
    """

    num_episodes: int
    algorithm: Algorithm = "opiq"
    optimistic_acting: bool = True
    optimistic_bootstrap: bool = True
    use_bonus: bool = True

    def __post_init__(self):
        if self.algorithm not in ("opiq", "ucb_h"):
            raise ValueError(f"unknown algorithm {self.algorithm!r}")
        if self.num_episodes < 1:
            raise ValueError("num_episodes must be positive")


@struct.dataclass
class Hyperparams:
    """Traced hyperparameters (arrays, so they can be vmapped).

    Attributes:
        M: exponent of OPIQ's optimism term ``H / (N + 1)^M`` (ignored by UCB-H).
        p: failure probability inside ``b_N``'s ``log(SAT/p)``.
        bonus_scale: ``c`` in ``b_N = c sqrt(H^3 log(SAT/p) / N)`` (the paper uses ``c = 2``).
    """

    M: jax.Array
    p: jax.Array
    bonus_scale: jax.Array

    @classmethod
    def create(cls, M=1.0, p=0.05, bonus_scale=2.0) -> "Hyperparams":
        """Broadcasts scalars or 1-D sequences into a (possibly batched) set of hyperparameters."""
        M, p, c = jnp.broadcast_arrays(*(jnp.asarray(x, jnp.float32) for x in (M, p, bonus_scale)))
        return cls(M=M, p=p, bonus_scale=c)


@struct.dataclass
class AgentState:
    """Per-run learner state.

    Attributes:
        q: ``[H, S, A]`` the (pessimistically or optimistically initialised) Q-values.
        counts: ``[H, S, A]`` int32 visit counts ``N(s, a, t)``.
        optimism: ``[H, S, A]`` cache of OPIQ's ``H / (N + 1)^M`` (all zero for UCB-H, for which
            ``Q+ = Q``), updated only at the visited entry: recomputing the power over the whole
            table every episode dominated the run time.
        key: PRNG key.
    """

    q: jax.Array
    counts: jax.Array
    optimism: jax.Array
    key: jax.Array


def init_state(config: TabularConfig, mdp: TabularMDP, key: chex.PRNGKey) -> AgentState:
    """Q at 0 for OPIQ (pessimistic), at ``H`` for UCB-H (optimistic); all counts 0."""
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    ucb_h = config.algorithm == "ucb_h"
    return AgentState(
        q=jnp.full((H, S, A), float(H) if ucb_h else 0.0, jnp.float32),
        counts=jnp.zeros((H, S, A), jnp.int32),
        optimism=jnp.full((H, S, A), 0.0 if ucb_h else float(H), jnp.float32),  # H / (0 + 1)^M
        key=key,
    )


# --------------------------------------------------------------------------------------------------
# Small pure pieces of the update
# --------------------------------------------------------------------------------------------------


def learning_rate(n: jax.Array, horizon: int) -> jax.Array:
    """``eta_N = (H + 1) / (H + N)``; ``eta_1 = 1`` so the first visit overwrites the initial value."""
    return (horizon + 1.0) / (horizon + n.astype(jnp.float32))


def bonus_coefficient(
    hp: Hyperparams, horizon: int, num_states: int, num_actions: int, total_steps: int
) -> jax.Array:
    """``c sqrt(H^3 log(S A T / p))``, so that ``b_N = bonus_coefficient / sqrt(N)``."""
    log_term = jnp.log(num_states * num_actions * total_steps / hp.p)
    return hp.bonus_scale * jnp.sqrt(horizon**3 * log_term)


def exploration_bonus(n: jax.Array, coefficient: jax.Array) -> jax.Array:
    """``b_N = c sqrt(H^3 log(S A T / p) / N)`` for ``N >= 1``, given :func:`bonus_coefficient`."""
    return coefficient * jax.lax.rsqrt(n.astype(jnp.float32))


def count_optimism(counts: jax.Array, M: jax.Array, horizon: int) -> jax.Array:
    """OPIQ's optimism term ``H / (N + 1)^M``."""
    return horizon / (counts.astype(jnp.float32) + 1.0) ** M


def q_plus(q: jax.Array, counts: jax.Array, M: jax.Array, horizon: int) -> jax.Array:
    """``Q+ = Q + H / (N + 1)^M``."""
    return q + count_optimism(counts, M, horizon)


def acting_values(config: TabularConfig, state: AgentState) -> jax.Array:
    """Values the agent is greedy on: ``Q+`` for OPIQ (unless the ablation), else ``Q``."""
    return state.q + state.optimism if config.optimistic_acting else state.q


def capped_max(values: jax.Array, horizon: int) -> jax.Array:
    """``min{H, max_a values[..., a]}``: the capped state value used for bootstrapping."""
    return jnp.minimum(float(horizon), values.max(-1))


def bootstrap_values(config: TabularConfig, state: AgentState) -> jax.Array:
    """``V_t(s) = min{H, max_a Qb_t(s, a)}`` for ``t = 1..H`` and ``V_{H+1} = 0``: ``[H + 1, S]``.

    ``Qb`` is ``Q+`` for OPIQ (unless the ablation), else ``Q``.
    """
    H = state.q.shape[0]
    v = capped_max(state.q + state.optimism if config.optimistic_bootstrap else state.q, H)
    return jnp.concatenate([v, jnp.zeros_like(v[:1])], axis=0)


def td_target(reward, bonus, next_value) -> jax.Array:
    """``r + b_N + V_{t+1}(s')`` with ``V_{t+1}`` from :func:`bootstrap_values` (already capped)."""
    return reward + bonus + next_value


def q_update(q_sa, target, n, horizon: int) -> jax.Array:
    """``(1 - eta_N) Q + eta_N target`` with ``N`` the count *after* incrementing."""
    eta = learning_rate(n, horizon)
    return (1.0 - eta) * q_sa + eta * target


def greedy_mask(values: jax.Array) -> jax.Array:
    """Boolean mask of the maximising actions along the last axis (exact ties all kept)."""
    return values == values.max(-1, keepdims=True)


def greedy_policy(values: jax.Array) -> jax.Array:
    """Greedy action probabilities with ties spread uniformly, same shape as ``values``."""
    mask = greedy_mask(values).astype(jnp.float32)
    return mask / mask.sum(-1, keepdims=True)


def sample_from_mask(mask: jax.Array, u: jax.Array) -> jax.Array:
    """Uniform choice among the true entries of a 1-D ``mask`` using one ``u ~ U[0, 1)``."""
    count = mask.sum()
    j = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask) > j)


def sample_from_cdf(cdf: jax.Array, u: jax.Array) -> jax.Array:
    """Inverse-CDF sample given a 1-D cumulative distribution; never returns a zero-probability index."""
    return jnp.argmax(cdf > u * cdf[-1])


def sample_reward(mean, bernoulli, u) -> jax.Array:
    """``Bernoulli(mean)`` via ``u < mean`` where ``bernoulli``, else the deterministic ``mean``."""
    return jnp.where(bernoulli, (u < mean).astype(jnp.float32), mean)


# --------------------------------------------------------------------------------------------------
# Episodes and runs (single run; see the batched wrappers below)
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class RunConstants:
    """Per-(MDP, hyperparameter) quantities hoisted out of the episode loop."""

    v_star_start: jax.Array  # V*_1(s_1)
    transition_cdf: jax.Array  # cumsum of P over s'
    bonus_coefficient: jax.Array  # b_N * sqrt(N)


def run_constants(config: TabularConfig, mdp: TabularMDP, hp: Hyperparams) -> RunConstants:
    """``V*_1(s_1)``, the transition CDFs and ``b_N``'s coefficient for one (MDP, hyperparameters)."""
    H, S, A = mdp.horizon, mdp.num_states, mdp.num_actions
    _, v_star = optimal_values(mdp)
    return RunConstants(
        v_star_start=v_star[0, mdp.start_state],
        transition_cdf=jnp.cumsum(mdp.P, -1),
        bonus_coefficient=bonus_coefficient(hp, H, S, A, config.num_episodes * H),
    )


def run_episode(
    config: TabularConfig,
    mdp: TabularMDP,
    hp: Hyperparams,
    consts: RunConstants,
    state: AgentState,
    uniforms: jax.Array,
) -> tuple[AgentState, jax.Array]:
    """One episode (a ``lax.scan`` over ``t``); returns the new state and the episode's exact regret.

    ``uniforms [H, 3]`` are the episode's ``U[0, 1)`` draws: action tie-break, next state, reward.
    """
    H = mdp.horizon
    act_values = acting_values(config, state)
    act_mask = greedy_mask(act_values)  # pi_k: fixed within the episode
    next_v = bootstrap_values(config, state)  # [H + 1, S], fixed within the episode
    _, v_pi = policy_values(mdp, greedy_policy(act_values))
    regret = consts.v_star_start - v_pi[0, mdp.start_state]

    def step(s, xs):
        # Step t only reads/writes the time-t slices, so the scan maps over them and emits the new ones.
        q_t, n_t, opt_t, mask_t, cdf_t, R_t, bern_t, v_next, u = xs
        a = sample_from_mask(mask_t[s], u[0])
        s_next = sample_from_cdf(cdf_t[s, a], u[1])
        r = sample_reward(R_t[s, a], bern_t[s, a], u[2])
        n = n_t[s, a] + 1
        bonus = exploration_bonus(n, consts.bonus_coefficient) if config.use_bonus else 0.0
        target = td_target(r, bonus, v_next[s_next])
        q_t = q_t.at[s, a].set(q_update(q_t[s, a], target, n, H))
        if config.algorithm == "opiq":
            opt_t = opt_t.at[s, a].set(count_optimism(n, hp.M, H))
        return s_next, (q_t, n_t.at[s, a].set(n), opt_t)

    xs = (state.q, state.counts, state.optimism, act_mask, consts.transition_cdf, mdp.R,
          mdp.bernoulli, next_v[1:], uniforms)
    _, (q, counts, optimism) = jax.lax.scan(step, mdp.start_state, xs, unroll=True)
    return state.replace(q=q, counts=counts, optimism=optimism), regret


_EPISODES_PER_DRAW = 256  # uniforms are drawn for this many episodes at once: much faster than per episode


def run_episodes(
    config: TabularConfig, mdp: TabularMDP, hp: Hyperparams, state: AgentState, num_episodes: int
) -> tuple[AgentState, jax.Array]:
    """``num_episodes`` episodes (a ``lax.scan``); returns the state and the regrets ``[num_episodes]``."""
    episode = functools.partial(run_episode, config, mdp, hp, run_constants(config, mdp, hp))

    def block(state, n):
        key, sub = jax.random.split(state.key)
        uniforms = jax.random.uniform(sub, (n, mdp.horizon, 3))  # tie-break, next state, reward
        return jax.lax.scan(episode, state.replace(key=key), uniforms)

    num_blocks, rest = divmod(num_episodes, _EPISODES_PER_DRAW)
    regrets = []
    if num_blocks:
        state, r = jax.lax.scan(
            lambda st, _: block(st, _EPISODES_PER_DRAW), state, None, length=num_blocks
        )
        regrets.append(r.reshape(-1))
    if rest:
        state, r = block(state, rest)
        regrets.append(r)
    return state, jnp.concatenate(regrets)


def run(
    config: TabularConfig, mdp: TabularMDP, hp: Hyperparams, key: chex.PRNGKey
) -> tuple[AgentState, jax.Array]:
    """A full run of ``config.num_episodes`` episodes from a fresh agent."""
    _check_mdp(mdp)
    return run_episodes(config, mdp, hp, init_state(config, mdp, key), config.num_episodes)


# --------------------------------------------------------------------------------------------------
# Batched (hyperparameters x MDPs x seeds), jitted
# --------------------------------------------------------------------------------------------------


def _check_batch(mdps: TabularMDP, hparams: Hyperparams, keys: jax.Array | None = None) -> None:
    """Shape checks for MDPs ``[n_mdp, ...]``, hyperparameters ``[n_hp]`` and keys ``[n_mdp, n_seed]``
    (typed keys, or ``[n_mdp, n_seed, 2]`` raw ``uint32`` key data)."""
    n_mdp = mdps.P.shape[0]
    _check_mdp(mdps, batch_dims=1)
    chex.assert_rank([hparams.M, hparams.p, hparams.bonus_scale], 1)
    chex.assert_equal_shape([hparams.M, hparams.p, hparams.bonus_scale])
    if keys is not None:
        typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        chex.assert_shape(keys, (n_mdp, None) if typed else (n_mdp, None, 2))


@functools.partial(jax.jit, static_argnames=("config",))
def init_states_batched(
    config: TabularConfig, mdps: TabularMDP, hparams: Hyperparams, keys: chex.PRNGKey
) -> AgentState:
    """Fresh states ``[n_hp, n_mdp, n_seed]``.

    ``keys [n_mdp, n_seed]`` (or raw ``[n_mdp, n_seed, 2]``) are shared across hyperparameters, so
    every hyperparameter setting sees the same random numbers.
    """
    _check_batch(mdps, hparams, keys)
    n_hp = hparams.M.shape[0]
    init = jax.vmap(jax.vmap(functools.partial(init_state, config), (None, 0)), (0, 0))
    states = init(mdps, keys)
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n_hp,) + x.shape), states)


@functools.partial(jax.jit, static_argnames=("config", "num_episodes"))
def run_episodes_batched(
    config: TabularConfig,
    mdps: TabularMDP,
    hparams: Hyperparams,
    states: AgentState,
    num_episodes: int,
) -> tuple[AgentState, jax.Array]:
    """Continues ``states [n_hp, n_mdp, n_seed]`` for ``num_episodes`` episodes.

    Returns the new states and the per-episode regrets ``[n_hp, n_mdp, n_seed, num_episodes]``.
    """
    _check_batch(mdps, hparams)
    n_mdp, n_hp = mdps.P.shape[0], hparams.M.shape[0]
    chex.assert_shape(states.q, (n_hp, n_mdp, None) + mdps.R.shape[1:])
    fn = functools.partial(run_episodes, config, num_episodes=num_episodes)
    over_seeds = jax.vmap(fn, in_axes=(None, None, 0))
    over_mdps = jax.vmap(over_seeds, in_axes=(0, None, 0))
    over_hps = jax.vmap(over_mdps, in_axes=(None, 0, 0))
    states, regrets = over_hps(mdps, hparams, states)
    chex.assert_shape(regrets, states.q.shape[:3] + (num_episodes,))
    return states, regrets


def run_batched(
    config: TabularConfig, mdps: TabularMDP, hparams: Hyperparams, keys: chex.PRNGKey
) -> tuple[AgentState, jax.Array]:
    """Full runs for every (hyperparameter, MDP, seed); regrets ``[n_hp, n_mdp, n_seed, K]``."""
    states = init_states_batched(config, mdps, hparams, keys)
    return run_episodes_batched(config, mdps, hparams, states, config.num_episodes)
