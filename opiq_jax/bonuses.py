"""The baselines' bonus sources that need networks (DORA, RND) and BSP's head arithmetic, as pure functions.

* DORA (Choshen et al., 2018): an E-value network with a sigmoid output, trained by SARSA on zero
  rewards, so that ``E(s, a)`` decays from its start of 0.5 as ``(s, a)`` and what follows it are
  visited. ``-log E`` behaves like a generalised count; the bonus is ``beta / sqrt(-log E(s, a))``.
  We keep the network's pre-sigmoid output (the logit) and compute ``-log E = softplus(-logit)``,
  which stays finite where ``E`` rounds to 1 or 0.
* RND (Burda et al., 2018): the squared error between a trained predictor and a fixed random target
  network, ``beta * ||predictor(s) - target(s)||^2``.
* BSP (Osband et al., 2018): ``K`` heads, each ``Q_k + beta_bsp * p_k`` with a fixed random prior
  ``p_k``; a head is drawn per episode and test actions are a majority vote.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from .targets import window_mask


def dora_neg_log_e(e_logits: jax.Array) -> jax.Array:
    """``-log E`` for ``E = sigmoid(logit)``: DORA's generalised count up to a constant."""
    return jax.nn.softplus(-e_logits)


def dora_bonus(e_logits: jax.Array, scale: jax.Array) -> jax.Array:
    """``scale / sqrt(-log E(s, a))`` (the paper's DQN + DORA reward and DORA OA's action bonus)."""
    return scale * jax.lax.rsqrt(jnp.maximum(dora_neg_log_e(e_logits), 1e-12))


def dora_sarsa_target(
    next_e_values: jax.Array, actions: jax.Array, done: jax.Array, terminated: jax.Array, exists: jax.Array,
    gamma: float,
) -> tuple[jax.Array, jax.Array]:
    """The n-step SARSA target of the E-values with zero reward, for one window of ``n + 1`` steps.

    Args:
      next_e_values: ``[n + 1, A]``: ``E(s', .)`` of each step's next state ``s'``.
      actions: ``int32[n + 1]``: the action taken at each step.
      done, terminated, exists: ``bool[n + 1]`` as stored, and whether each step is stored yet.
      gamma: DORA's ``gamma_E``.
    Returns:
      ``(target, bootstrap_index)``: ``gamma^L E(s_L, a_L)`` where ``L <= n`` steps are used. The
      window stops at the end of the episode or at the newest stored step; the action ``a_L`` taken
      in ``s_L`` is the next stored step's. Where it is unknown (the episode was truncated at step
      ``L - 1``, or step ``L - 1`` is the newest stored) we bootstrap from the mean of ``E(s_L, .)``
      over actions; a terminated episode bootstraps 0.
    """
    chex.assert_rank(next_e_values, 2)
    window = actions.shape[0]
    n = window - 1
    chex.assert_shape([actions, done, terminated, exists], (window,))
    included = window_mask(done, exists)  # steps of the first step's episode that are stored
    transitions = jnp.arange(window) < n
    used = included & transitions
    steps = jnp.sum(used.astype(jnp.int32))  # L >= 1 (step 0 is always included)
    last = steps - 1
    ended = done[last]
    # a_L is known when step L exists and is still in the episode
    next_known = included[steps] & ~ended  # steps <= n indexes the window
    e_next = next_e_values[last]
    known_value = next_e_values[last, actions[steps]]
    value = jnp.where(next_known, known_value, jnp.mean(e_next))
    value = jnp.where(terminated[last], 0.0, value)
    return (gamma ** steps.astype(jnp.float32)) * value, last


def rnd_bonus(predicted: jax.Array, target: jax.Array, scale: jax.Array) -> jax.Array:
    """``scale * ||predicted - target||^2`` over the last axis (RND's intrinsic reward)."""
    chex.assert_equal_shape([predicted, target])
    return scale * jnp.sum(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1)


def rnd_loss(predicted: jax.Array, target: jax.Array) -> jax.Array:
    """The predictor's loss: the squared error averaged over the batch (the target is fixed)."""
    return jnp.mean(jnp.sum(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1))


def with_prior(q_heads: jax.Array, prior_heads: jax.Array, beta_bsp: jax.Array) -> jax.Array:
    """BSP's head outputs ``Q_k + beta_bsp * p_k``; the prior gets no gradient."""
    chex.assert_equal_shape([q_heads, prior_heads])
    return q_heads + beta_bsp * jax.lax.stop_gradient(prior_heads)


def majority_vote(q_heads: jax.Array) -> jax.Array:
    """The action most heads rank first (``q_heads``: ``[K, A]``); ties go to the lowest action index."""
    chex.assert_rank(q_heads, 2)
    votes = jnp.sum(jax.nn.one_hot(jnp.argmax(q_heads, axis=-1), q_heads.shape[-1]), axis=0)
    return jnp.argmax(votes).astype(jnp.int32)
