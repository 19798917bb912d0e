"""Pseudocounts (Bellemare et al., 2016; DQN + PC): the intrinsic reward ``beta / sqrt(N(s, a))``.

It is recomputed from the current counts for every sampled step at training time, the intermediate
steps of an n-step target included, so a state's bonus shrinks as it is visited again even while its
transition sits in the replay. ``N >= 1`` for every stored step (counts are incremented before the
step is stored), so a first visit earns exactly ``beta``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..common.config import Option
from .base import Part


def intrinsic_reward(counts: jax.Array, beta: jax.Array) -> jax.Array:
    """``beta / sqrt(N)``. Counts below one (only possible for masked, invalid samples) read as one."""
    return beta * jax.lax.rsqrt(jnp.maximum(counts.astype(jnp.float32), 1.0))


class Pseudocounts(Part):
    """``beta / sqrt(N(s, a))`` added to every sampled step's reward."""

    name = "pseudocounts"
    hparams = (Option("beta", 0.0, "Scale of the pseudocount intrinsic reward beta/sqrt(N(s, a)) (0: none).",
                      minimum=0.0),)
    uses_counts = True
    shares_program = True
    off = {"beta": 0.0}

    def intrinsic_reward(self, agent, run, batch):
        return intrinsic_reward(batch.step_counts, run.hparams["beta"])


PART = Pseudocounts()
