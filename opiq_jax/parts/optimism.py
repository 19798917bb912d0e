"""OPIQ's optimism: ``Q+(s, a) = Q(s, a) + C / (N(s, a) + 1)^M``, when acting and when bootstrapping.

* Acting (``C_action``): the agent takes ``argmax_a Q+(s, a)``, so an action never tried in ``s`` gets
  the full bonus ``C_action`` whatever the (pessimistic) Q-values say.
* Bootstrapping (``C_bootstrap``): the n-step target bootstraps from ``max_a' Q+_target(s', a')`` with the
  counts read at training time, so optimism about unvisited actions propagates backwards.

With both scales 0 the part has no effect (DQN + PC is OPIQ with ``C_action = C_bootstrap = 0``); OPIQ
without optimistic bootstrapping sets ``C_bootstrap = 0``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..common.config import Option
from .base import Part


def optimism_bonus(counts: jax.Array, scale: jax.Array, exponent: jax.Array) -> jax.Array:
    """``scale / (counts + 1) ** exponent``; equals ``scale`` for an unvisited pair."""
    return scale / jnp.power(counts.astype(jnp.float32) + 1.0, exponent)


class Optimism(Part):
    """``C_action / (N + 1)^M`` added to Q when acting, ``C_bootstrap / (N + 1)^M`` to the bootstrap's Q."""

    name = "optimism"
    hparams = (
        Option("m", 2.0, "Exponent M of the optimism bonus C/(N+1)^M.", minimum=0.0),
        Option("c_action", 0.0, "C_action: optimism added to Q for action selection (0: act on plain Q).", minimum=0.0),
        Option("c_bootstrap", 0.0,
               "C_bootstrap: optimism added to the target's values when bootstrapping (0: plain max).", minimum=0.0),
    )
    uses_counts = True
    shares_program = True
    off = {"c_action": 0.0, "c_bootstrap": 0.0}

    def action_bonus(self, agent, run, obs, counts):
        return optimism_bonus(counts, run.hparams["c_action"], run.hparams["m"])

    def bootstrap_bonus(self, agent, run, batch):
        return optimism_bonus(batch.next_counts, run.hparams["c_bootstrap"], run.hparams["m"])


PART = Optimism()
