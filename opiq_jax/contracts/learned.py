"""A learned pseudo-count of a state stepped in the program (``--count-features cfn``): the coin-flip network.

:mod:`opiq_jax.primitives.coin_flips` gives the estimator. Here it is one more :class:`~opiq_jax.contracts.Counting`,
so every part that reads counts (OPIQ's action and bootstrap bonuses, the pseudo-count reward) reads ``Ñ(s, a)`` in
place of the sketch's ``N(s, a)``, unchanged:

* *where a state is counted* (:meth:`LearnedCounting.columns`) is its observation, as the Q-network reads it;
* a run's counts are a network ``g`` with ``d`` outputs per action (``cfn_outputs``), its optimiser's state, a fixed
  random prior network of the same shape and the running moments of the prior's outputs at the states acted in;
* every step draws ``d`` signs (:meth:`~LearnedCounting.draw_targets`), which the replay stores with the step;
* every update takes one step of ``g`` on the update's own minibatch: the outputs of the action each row took
  regress that row's stored signs (:meth:`~LearnedCounting.learn`);
* ``Ñ(s, a) = 1 / mean_i f(s)_{a,i}²`` with ``f = g + normalised prior``.

So ``Ñ`` counts the visits that the replay still holds (the regression sees only those), and a pair never visited
starts near a count of one (the prior's unit variance). Why these choices: ``docs/choices.md``.
"""

from __future__ import annotations

from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from . import Batch, Counting, Decision, Outcome
from ..primitives import coin_flips
from ..primitives.networks import PatchConv, init_variables, make_network, network_for
from ..primitives.optimiser import make_optimiser, sgd_step
from ..primitives.state import all_finite


@struct.dataclass
class CoinFlipCounts:
    """One run's learned count (module docstring)."""

    params: Any  # the trained network g
    opt_state: Any  # its optimiser's state
    prior: Any  # the fixed random prior network's parameters
    moments: coin_flips.Moments  # the prior's outputs at the states acted in: their running mean and variance


class LearnedCounting(Counting):
    """The coin-flip network's pseudo-count of the stepping's observations (module docstring)."""

    options = ("count_features",)
    serves = "the chain, the maze and gymnax environments"
    learns = True
    metric_names = ("count_nonfinite",)

    def __init__(self, stepping: Any):
        static = self.static = stepping.static
        self.stepping = stepping
        self.num_actions, self.num_signs = stepping.num_actions, static.cfn_outputs
        self.optimiser = make_optimiser(static)
        self.network, what = self.counter_network(stepping)
        self.counted = f"a learned pseudo-count of {what} (coin-flip network, d = {self.num_signs} per action)"

    def counter_network(self, stepping: Any) -> tuple[nn.Module, str]:
        """The network g (and its prior's shape) for the stepping's observations, and what it reads, in words."""
        torso = network_for(self.static.cfn_torso, tuple(stepping.obs_shape))
        network = make_network(torso, self.num_actions * self.num_signs, self.static.cfn_hidden)
        return network, f"the observation, {torso}"

    # ------------------------------------------------------------------ the network

    def outputs(self, counts: CoinFlipCounts, params: Any, obs: jax.Array) -> jax.Array:
        """``f = g + normalised prior`` on a batch of observations: ``float32[B, A, d]`` (``params``: g's)."""
        shape = (obs.shape[0], self.num_actions, self.num_signs)
        trained = self.network.apply(params, obs).reshape(shape)
        prior = coin_flips.normalised(self.network.apply(counts.prior, obs), counts.moments)
        return trained + jax.lax.stop_gradient(prior).reshape(shape)

    def init(self, hash_key: jax.Array, env: Any, num_actions: int) -> CoinFlipCounts:
        """A fresh g and prior (each drawn as ``--network-init`` says, from keys of their own), zero moments."""
        del num_actions
        k_trained, k_prior = jax.random.split(hash_key)
        example = self.stepping_obs(env)
        params = init_variables(self.network, k_trained, example, self.static.network_init)
        prior = init_variables(self.network, k_prior, example, self.static.network_init)
        return CoinFlipCounts(params=params, opt_state=self.optimiser.init(params), prior=prior,
                              moments=coin_flips.Moments.zeros(self.num_actions * self.num_signs))

    def stepping_obs(self, env: Any) -> jax.Array:
        """``[1, *obs_shape]``: the run's current observation, as an example batch."""
        return env.obs[None].astype(jnp.float32)

    # ------------------------------------------------------------------ the counting contract

    def columns(self, run: Any, compact: jax.Array) -> jax.Array:
        """The observation of the state ``compact``: what the network reads."""
        return self.stepping.env.obs_from_compact(compact, run.env.params).astype(jnp.float32)

    def query_all(self, counts: CoinFlipCounts, obs: jax.Array) -> jax.Array:
        """``Ñ(s, .)``: float32[A]."""
        return coin_flips.pseudo_count(self.outputs(counts, counts.params, obs[None])[0])

    def query(self, counts: CoinFlipCounts, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``Ñ(s, a)``: float32."""
        return self.query_all(counts, obs)[action]

    def add(self, counts: CoinFlipCounts, decision: Decision, outcome: Outcome) -> CoinFlipCounts:
        """The prior's moments with the states acted in (a pool's ``first`` slot is no visit); g learns in
        :meth:`learn`, from the replay."""
        priors = self.network.apply(counts.prior, decision.columns)
        moments = counts.moments
        for e in range(decision.actions.shape[0]):
            moments = coin_flips.moments_update(moments, priors[e], ~outcome.first[e])
        return counts.replace(moments=moments)

    def draw_targets(self, key: jax.Array, envs: int) -> jax.Array:
        """``uint32[envs]``: each step's ``d`` signs, packed."""
        return jax.vmap(lambda k: coin_flips.draw_signs(k, self.num_signs))(jax.random.split(key, envs))

    def learn(self, run: Any, batch: Batch, key: jax.Array) -> CoinFlipCounts:
        """One clipped RMSProp step (``cfn_lr``) of g: each row's first step, its action's outputs against its
        signs."""
        del key
        counts = run.counts
        obs, actions = batch.step_columns[:, 0], batch.actions[:, 0]
        signs = coin_flips.signs_of(batch.count_targets[:, 0], self.num_signs)
        chex.assert_shape(signs, (actions.shape[0], self.num_signs))

        def loss(params):
            taken = jnp.take_along_axis(self.outputs(counts, params, obs), actions[:, None, None], axis=1)[:, 0]
            return coin_flips.coin_flip_loss(taken, signs, batch.weights)

        grads = jax.grad(loss)(counts.params)
        params, opt_state = sgd_step(self.optimiser, counts.params, counts.opt_state, grads,
                                     jnp.float32(self.static.cfn_lr))
        return counts.replace(params=params, opt_state=opt_state)

    def metrics(self, run: Any) -> dict[str, jax.Array]:
        """``count_nonfinite``: 1 where the learned count's numbers are NaN or infinite."""
        if run.counts is None:  # a program whose methods read no counts keeps none
            return {"count_nonfinite": jnp.float32(0)}
        return {"count_nonfinite": (~all_finite(run.counts)).astype(jnp.float32)}


class FrameConvCounter(nn.Module):
    """The learned count's network on single 84x84 frames (``[B, 84, 84, 1]`` uint8, scaled to [0, 1]): the Nature
    network's three convolutions and a linear layer, the authors' choice for Atari (no fully connected hidden
    layer)."""

    num_outputs: int

    @nn.compact
    def __call__(self, frames: jax.Array) -> jax.Array:
        x = frames.astype(jnp.float32) / 255.0
        x = nn.relu(PatchConv(32, (8, 8), (4, 4))(x))
        x = nn.relu(PatchConv(64, (4, 4), (2, 2))(x))
        x = nn.relu(PatchConv(64, (3, 3), (1, 1))(x))
        return nn.Dense(self.num_outputs)(jnp.reshape(x, (x.shape[0], -1)))


class FrameLearnedCounting(LearnedCounting):
    """The coin-flip network's pseudo-count of a pool's newest frame (Montezuma, ``atari:NAME``): the frame ring
    keeps each transition's signs beside its frame."""

    def counter_network(self, stepping: Any) -> tuple[nn.Module, str]:
        return FrameConvCounter(self.num_actions * self.num_signs), "the newest frame, three convolutions"

    def stepping_obs(self, env: Any) -> jax.Array:
        """``[1, 84, 84, 1]``: the run's first environment's newest frame, as an example batch."""
        return env.obs[:1, -1, :, :, None]

    def columns(self, run: Any, frame: jax.Array) -> jax.Array:
        """``[84, 84, 1]``: the newest frame, as the network reads it."""
        del run
        return frame[..., None]


__all__ = ["CoinFlipCounts", "FrameConvCounter", "FrameLearnedCounting", "LearnedCounting"]
