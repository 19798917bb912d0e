"""BSP (Osband et al., 2018): bootstrapped DQN with randomised prior functions.

``K`` Q-heads on one shared torso (the paper's BSP architecture: the maze's and Atari's convolutions;
for the chain's MLP, whose split the paper does not give, the first hidden layer). Each head acts and
bootstraps on ``Q_k + beta_bsp * p_k``, where ``p_k`` is a fixed, randomly initialised network of the
same architecture (the reference code lets its optimiser update the "prior"; here it is never trained).
Every head learns from every sample (no bootstrap masks, as the paper's appendix says), and the
gradients of the shared torso are scaled by ``1 / K`` at every update (the reference code does so only
at the first). Which head acts is drawn per episode, and test episodes take the heads' majority vote;
both are the trainer's own behaviour for any number of heads.

The prior is a fixed function of the observation, so where the environment lists every cell (chain, maze) its
values can be computed once per cell, at initialisation, and looked up wherever the caller knows the cells (the
loss's sampled states, the targets' bootstrap states): ``prior_values``, ``auto`` doing so in bfloat16 as the target
table does. The values are the same; what differs is when the prior network runs.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ..common.config import Option, uses_cell_table
from .base import AgentView, Part


def scale_torso_gradients(grads: chex.ArrayTree, factor: float) -> chex.ArrayTree:
    """Multiplies the gradients of BSP's shared torso by ``factor`` (the paper normalises them by 1/K)."""
    params = grads["params"]
    torso = jax.tree.map(lambda g: g * factor, params["torso"])
    return {**grads, "params": {**params, "torso": torso}}


def with_prior(q_heads: jax.Array, prior_heads: jax.Array, beta_bsp: jax.Array) -> jax.Array:
    """BSP's head outputs ``Q_k + beta_bsp * p_k``; the prior gets no gradient."""
    chex.assert_equal_shape([q_heads, prior_heads])
    return q_heads + beta_bsp * jax.lax.stop_gradient(prior_heads)


PRIOR_TABLE = "cell_values"
"""The prior table's key beside the prior network's ``params`` in the part's state, where it is tabulated:
float32[num_cells, K, A]. Without the table the state is the network's variables alone, exactly as before the
table existed, so those programs and checkpoints are unchanged."""


def uses_prior_table(agent: AgentView) -> bool:
    """Whether the prior's values are looked up per cell (``prior_values``; ``auto``: as for the target table)."""
    return uses_cell_table(agent.static, "prior_values", agent.stepping.has_cell_table)


class Bsp(Part):
    """K heads, each with its fixed random prior; the shared torso's gradients scaled by 1/K."""

    name = "bsp"
    hparams = (Option("beta_bsp", 0.0, "BSP: scale of each head's fixed random prior, Q_k + beta_bsp * p_k.",
                      minimum=0.0),)
    static_options = (
        Option("bsp_heads", 10, "BSP: Q-heads on the shared torso.", minimum=2, type=int),
        Option("prior_values", "auto", "BSP: the prior's values, as a table of every cell computed once (chain, "
               "maze) and looked up for the sampled states, or the prior network on every batch, or auto (the table "
               "in bfloat16).", choices=("auto", "table", "network"), type=str),
    )
    random_streams = {"prior": 0}

    def heads(self, static):
        return static.part("bsp").heads

    def init(self, agent, run_key, example):
        """The prior: a second K-headed network of the same architecture, never trained; with the prior table, also
        its values at every cell."""
        variables = agent.init_variables(agent.q_network, agent.init_key(run_key, "prior"), example.obs[None])
        if not uses_prior_table(agent):
            return variables
        table = agent.q_network.apply(variables, example.cell_obs).astype(jnp.float32)
        chex.assert_shape(table, (example.cell_obs.shape[0], agent.num_heads, agent.num_actions))
        return {**variables, PRIOR_TABLE: table}

    def resolved(self, agent):
        return {"prior_values": "table" if uses_prior_table(agent) else "network"}

    def head_values(self, agent, run, q, obs, cells):
        prior = run.parts[self.name]
        if cells is not None and PRIOR_TABLE in prior:
            prior_heads = prior[PRIOR_TABLE][cells]
        else:
            prior_heads = agent.q_network.apply({"params": prior["params"]}, obs)
        return with_prior(q, prior_heads, run.hparams["beta_bsp"])

    def scale_gradients(self, agent, grads):
        return scale_torso_gradients(grads, 1.0 / agent.num_heads)


PART = Bsp()
