"""The two count-based quantities of OPIQ, as tiny functions used everywhere a bonus is needed.

* ``optimism_bonus``: ``C / (N + 1) ** M``, added to Q for action selection (``C_action``) and for
  the bootstrap (``C_bootstrap``): Q+ of the paper's equation (1).
* ``intrinsic_reward``: ``beta / sqrt(N)``, the pseudocount reward of DQN + PC, recomputed from the
  current counts whenever a target is built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def optimism_bonus(counts: jax.Array, scale: jax.Array, exponent: jax.Array) -> jax.Array:
    """``scale / (counts + 1) ** exponent``; equals ``scale`` for an unvisited pair."""
    return scale / jnp.power(counts.astype(jnp.float32) + 1.0, exponent)


def intrinsic_reward(counts: jax.Array, beta: jax.Array) -> jax.Array:
    """``beta / sqrt(N)``. Counts below one (only possible for masked, invalid samples) read as one."""
    return beta * jax.lax.rsqrt(jnp.maximum(counts.astype(jnp.float32), 1.0))


def q_plus(q_values: jax.Array, counts: jax.Array, scale: jax.Array, exponent: jax.Array) -> jax.Array:
    """OPIQ's ``Q+(s, .) = Q(s, .) + scale / (N(s, .) + 1) ** exponent``."""
    return q_values + optimism_bonus(counts, scale, exponent)


def linear_epsilon(step: jax.Array, start: jax.Array, end: jax.Array, decay_steps: jax.Array) -> jax.Array:
    """Linear decay from ``start`` to ``end`` over ``decay_steps`` environment steps, then ``end``.

    ``decay_steps <= 0`` means a fixed ``end``.
    """
    fraction = jnp.where(decay_steps > 0, jnp.clip(step / jnp.maximum(decay_steps, 1), 0.0, 1.0), 1.0)
    return start + (end - start) * fraction
