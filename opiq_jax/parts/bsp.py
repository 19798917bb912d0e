"""BSP (Osband et al., 2018): bootstrapped DQN with randomised prior functions.

``K`` Q-heads on one shared torso (the paper's BSP architecture: the maze's and Atari's convolutions;
for the chain's MLP, whose split the paper does not give, the first hidden layer). Each head acts and
bootstraps on ``Q_k + beta_bsp * p_k``, where ``p_k`` is a fixed, randomly initialised network of the
same architecture (the reference code lets its optimiser update the "prior"; here it is never trained).
Every head learns from every sample (no bootstrap masks, as the paper's appendix says), and the
gradients of the shared torso are scaled by ``1 / K`` at every update (the reference code does so only
at the first). Which head acts is drawn per episode, and test episodes take the heads' majority vote;
both are the trainer's own behaviour for any number of heads.
"""

from __future__ import annotations

import chex
import jax

from ..config import Option
from .base import Part


def scale_torso_gradients(grads: chex.ArrayTree, factor: float) -> chex.ArrayTree:
    """Multiplies the gradients of BSP's shared torso by ``factor`` (the paper normalises them by 1/K)."""
    params = grads["params"]
    torso = jax.tree.map(lambda g: g * factor, params["torso"])
    return {**grads, "params": {**params, "torso": torso}}


def with_prior(q_heads: jax.Array, prior_heads: jax.Array, beta_bsp: jax.Array) -> jax.Array:
    """BSP's head outputs ``Q_k + beta_bsp * p_k``; the prior gets no gradient."""
    chex.assert_equal_shape([q_heads, prior_heads])
    return q_heads + beta_bsp * jax.lax.stop_gradient(prior_heads)


class Bsp(Part):
    """K heads, each with its fixed random prior; the shared torso's gradients scaled by 1/K."""

    name = "bsp"
    hparams = (Option("beta_bsp", 0.0, "BSP: scale of each head's fixed random prior, Q_k + beta_bsp * p_k.",
                      minimum=0.0),)
    static_options = (Option("bsp_heads", 10, "BSP: Q-heads on the shared torso.", minimum=2, type=int),)
    random_streams = {"prior": 0}

    def heads(self, static):
        return static.bsp_heads

    def init(self, agent, run_key, example):
        """The prior: a second K-headed network of the same architecture, never trained."""
        return agent.q_network.init(agent.init_key(run_key, "prior"), example.obs[None])

    def head_values(self, agent, run, q, obs):
        return with_prior(q, agent.q_network.apply(run.parts[self.name], obs), run.hparams["beta_bsp"])

    def scale_gradients(self, agent, grads):
        return scale_torso_gradients(grads, 1.0 / agent.num_heads)


PART = Bsp()
