"""Bootstrapped targets as pure functions over sampled windows of ``n`` consecutive steps.

For a window starting at step ``t`` the n-step target of the paper is

    y_t = sum_{k < L} gamma^k (r_{t+k} + beta / sqrt(N(s_{t+k}, a_{t+k})))
          + gamma^L (1 - terminal) max_a' [Q_target(s_{t+L}, a') + C_bootstrap / (N(s_{t+L}, a') + 1)^M]

where ``L <= n`` stops early at the end of an episode. An episode that *terminated* contributes no
bootstrap; one that was *truncated* (time limit) bootstraps from its last real observation, which
is the ``next`` state stored with that step. A window that runs past the newest stored step is cut
there and bootstraps from the newest next state (a shorter, still valid, n-step return).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def window_mask(done: jax.Array, exists: jax.Array) -> jax.Array:
    """Which steps of a window belong to the first step's episode: ``bool[..., n]``.

    Step ``k`` counts when it exists and no earlier step of the window ended its episode.
    """
    chex.assert_equal_shape([done, exists])
    ended_before = jnp.cumsum(done.astype(jnp.int32), axis=-1) - done.astype(jnp.int32)
    return exists & (ended_before == 0)


def n_step_return(
    rewards: jax.Array, terminated: jax.Array, included: jax.Array, gamma: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Discounted sum of the included rewards, the bootstrap discount and the last included index.

    Args:
      rewards: ``[n]`` total reward (extrinsic + intrinsic) of each step of the window.
      terminated: ``bool[n]``: the step ended its episode in a true terminal state.
      included: ``bool[n]`` from :func:`window_mask`; step 0 must be included.
      gamma: discount.
    Returns:
      ``(partial_return, bootstrap_discount, last)``: ``gamma ** (last + 1)`` times zero if step
      ``last`` terminated, and the index of the step whose ``next`` state is bootstrapped from.
    """
    chex.assert_rank([rewards, terminated, included], 1)
    n = rewards.shape[0]
    powers = gamma ** jnp.arange(n, dtype=jnp.float32)
    partial = jnp.sum(jnp.where(included, powers * rewards, 0.0))
    last = jnp.sum(included.astype(jnp.int32)) - 1
    discount = gamma ** (last + 1).astype(jnp.float32) * (1.0 - terminated[last].astype(jnp.float32))
    return partial, discount, last


def bootstrap_value(q_next: jax.Array, bonus_next: jax.Array) -> jax.Array:
    """``max_a' [Q(s', a') + bonus(s', a')]``: Q+ bootstrapping (bonus zero: plain DQN)."""
    chex.assert_equal_shape([q_next, bonus_next])
    return jnp.max(q_next + bonus_next, axis=-1)


def mixed_monte_carlo(target: jax.Array, mc_return: jax.Array, beta_mmc: jax.Array) -> jax.Array:
    """``(1 - beta) y + beta * G_mc``; the caller passes ``G_mc = 0`` while an episode is unfinished."""
    return (1.0 - beta_mmc) * target + beta_mmc * mc_return


def td_loss(q_taken: jax.Array, target: jax.Array) -> jax.Array:
    """Mean squared TD error (the paper uses MSE, not Huber); the target is not differentiated."""
    chex.assert_equal_shape([q_taken, target])
    return jnp.mean(jnp.square(q_taken - jax.lax.stop_gradient(target)))
