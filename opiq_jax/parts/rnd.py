"""RND (Burda et al., 2018; DQN + RND): random network distillation's error as intrinsic reward.

A fixed, randomly initialised target network and a predictor trained to match it; the predictor's
squared error ``beta_rnd * ||predictor(s') - target(s')||^2`` at the state a step reached is that step's
intrinsic reward, recomputed whenever a minibatch is sampled. The predictor takes one gradient step per
update on the ``rnd_batch`` most recently reached states (the paper's appendix).

Networks: on the chain and the maze the Q-network's architecture with ``rnd_outputs`` outputs (the
paper's appendix); on Montezuma Burda et al.'s (a smaller target than the predictor, ReLU, 512
outputs) on the newest frame, as RND reads one frame, scaled to [0, 1] (Burda et al. also normalise
observations and rewards by running statistics; the OPIQ paper does not mention it, and we do not).
"""

from __future__ import annotations

from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from ..common.config import Option
from ..primitives.networks import PatchConv
from .base import Part


class FrameConvs(nn.Module):
    """The Nature network's three convolutions on single 84x84 frames (``[B, 84, 84, 1]`` uint8) scaled to
    [0, 1], flattened: the torso of RND's networks on Montezuma."""

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        x = frames.astype(jnp.float32) / 255.0
        x = nn.relu(PatchConv(32, (8, 8), (4, 4))(x))
        x = nn.relu(PatchConv(64, (4, 4), (2, 2))(x))
        x = nn.relu(PatchConv(64, (3, 3), (1, 1))(x))
        return jnp.reshape(x, (x.shape[0], -1))


class RndTarget(nn.Module):
    """RND's fixed target network on Montezuma (Burda et al., 2018, with ReLU as the OPIQ paper says):
    :class:`FrameConvs` and a linear layer."""

    num_outputs: int = 512

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        return nn.Dense(self.num_outputs)(FrameConvs()(frames))


class RndPredictor(nn.Module):
    """RND's trained predictor on Montezuma: :class:`FrameConvs` and two more 512-unit layers (larger than the
    target, as Burda et al. make it)."""

    num_outputs: int = 512

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(512)(FrameConvs()(frames)))
        x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(self.num_outputs)(x)


def rnd_bonus(predicted: jax.Array, target: jax.Array, scale: jax.Array) -> jax.Array:
    """``scale * ||predicted - target||^2`` over the last axis (RND's intrinsic reward)."""
    chex.assert_equal_shape([predicted, target])
    return scale * jnp.sum(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1)


def rnd_loss(predicted: jax.Array, target: jax.Array, weights: jax.Array) -> jax.Array:
    """The predictor's loss: the squared error, averaged over the rows with weight (the target is fixed)."""
    chex.assert_equal_shape([predicted, target])
    chex.assert_shape(weights, predicted.shape[:1])
    errors = jnp.sum(jnp.square(predicted - jax.lax.stop_gradient(target)), axis=-1)
    return jnp.sum(errors * weights) / jnp.maximum(jnp.sum(weights), 1.0)


@struct.dataclass
class RndState:
    """RND's trained predictor, its optimiser and the fixed random target network."""

    params: Any
    opt_state: Any
    target_params: Any


class Rnd(Part):
    """The predictor and target networks, the predictor's update and the intrinsic reward."""

    name = "rnd"
    hparams = (Option("beta_rnd", 0.0, "DQN + RND: scale of the intrinsic reward beta_rnd * ||predictor(s') - "
                      "target(s')||^2.", minimum=0.0),)
    static_options = (
        Option("rnd_outputs", 128, "RND: outputs of its target and predictor networks.", minimum=1, type=int,
               environment_default=True),
        Option("rnd_batch", 32, "RND: the most recent states its predictor trains on at every update.", minimum=1,
               type=int),
    )
    random_streams = {"predictor": 2, "rnd_target": 3}

    def static_problems(self, static, name):
        batch = static.part("rnd").batch
        if batch <= static.buffer_size:
            return []
        return [f"{name['rnd_batch']} ({batch}) must not exceed {name['buffer_size']} ({static.buffer_size})"]

    def networks(self, agent):
        """``(predictor, target)`` for this agent's observations."""
        outputs = agent.static.part("rnd").outputs
        if agent.network_name == "nature":
            return RndPredictor(outputs), RndTarget(outputs)
        network = agent.make_network(outputs)
        return network, network

    def init(self, agent, run_key, example):
        predictor, target = self.networks(agent)
        obs = agent.stepping.bonus_obs(example.obs)[None]
        params = agent.init_variables(predictor, agent.init_key(run_key, "predictor"), obs)
        return RndState(params=params, opt_state=agent.optimiser.init(params),
                        target_params=agent.init_variables(target, agent.init_key(run_key, "rnd_target"), obs))

    def intrinsic_reward(self, agent, run, batch):
        """The error at the state each step reached (Burda et al.)."""
        state, (predictor, target) = run.parts[self.name], self.networks(agent)
        lead = batch.actions.ndim
        predicted = agent.apply_flat(predictor, state.params, batch.reached_obs, lead)
        fixed = agent.apply_flat(target, state.target_params, batch.reached_obs, lead)
        return rnd_bonus(predicted, fixed, run.hparams["beta_rnd"])

    def update(self, agent, run, batch, key):
        """One predictor step on the ``rnd_batch`` most recently reached states."""
        state, (predictor, target) = run.parts[self.name], self.networks(agent)
        obs, stored = agent.replay.recent(run, agent.static.part("rnd").batch)
        fixed = target.apply(state.target_params, obs)
        grads = jax.grad(lambda params: rnd_loss(predictor.apply(params, obs), fixed, stored))(state.params)
        params, opt_state = agent.sgd_step(state.params, state.opt_state, grads, run.hparams["lr"])
        return state.replace(params=params, opt_state=opt_state)


PART = Rnd()
