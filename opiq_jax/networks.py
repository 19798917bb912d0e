"""Q-networks of the paper (flax.linen), and parameter initialisation with an optional final bias.

* ``MLP``: the chain network, hidden layers of 256 and 256 with ReLU.
* ``MazeConv``: two 3x3 stride-2 convolutions of 16 channels without padding (24 -> 11 -> 5),
  FC 400 with ReLU, FC 200 *without* ReLU (as the paper's appendix lists it), then the outputs.
* ``NatureDQN``: the Atari torso of Mnih et al. (2015) with a 512 unit layer.

Every network names its output layer ``head`` so that the optimistic-initialisation baseline
(DQN Bias) can set exactly that layer's bias.
"""

from __future__ import annotations

from collections.abc import Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

HEAD = "head"


class MLP(nn.Module):
    """A ReLU multilayer perceptron over the flattened observation."""

    num_outputs: int
    hidden: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = jnp.reshape(obs, (obs.shape[0], -1)).astype(jnp.float32)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_outputs, name=HEAD)(x)


class MazeConv(nn.Module):
    """The maze network of the paper's appendix (input ``[B, 24, 24, 1]``)."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2), padding="VALID")(x))
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2), padding="VALID")(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        x = nn.relu(nn.Dense(400)(x))
        x = nn.Dense(200)(x)
        return nn.Dense(self.num_outputs, name=HEAD)(x)


class NatureDQN(nn.Module):
    """The Nature DQN network for stacks of 84x84 uint8 frames (``[B, 84, 84, 4]``)."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32) / 255.0
        x = nn.relu(nn.Conv(32, (8, 8), strides=(4, 4), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (4, 4), strides=(2, 2), padding="VALID")(x))
        x = nn.relu(nn.Conv(64, (3, 3), strides=(1, 1), padding="VALID")(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        x = nn.relu(nn.Dense(512)(x))
        return nn.Dense(self.num_outputs, name=HEAD)(x)


def make_network(name: str, num_outputs: int, hidden: Sequence[int] = (256, 256)) -> nn.Module:
    """Builds a network by name: ``mlp``, ``maze_conv`` or ``nature``."""
    if name == "mlp":
        return MLP(num_outputs=num_outputs, hidden=tuple(hidden))
    if name == "maze_conv":
        return MazeConv(num_outputs=num_outputs)
    if name == "nature":
        return NatureDQN(num_outputs=num_outputs)
    raise ValueError(f"unknown network {name!r}; choose mlp, maze_conv or nature")


def set_final_bias(params: chex.ArrayTree, bias: jax.Array) -> chex.ArrayTree:
    """Sets every entry of the output layer's bias to ``bias`` (the DQN Bias baseline)."""
    head = params["params"][HEAD]
    new_head = {**head, "bias": jnp.full_like(head["bias"], bias)}
    return {**params, "params": {**params["params"], HEAD: new_head}}


def init_params(network: nn.Module, key: chex.PRNGKey, example_obs: jax.Array, final_bias: jax.Array) -> chex.ArrayTree:
    """Initialises ``network`` on one example observation and sets its output bias."""
    params = network.init(key, example_obs[None])
    return set_final_bias(params, final_bias)
