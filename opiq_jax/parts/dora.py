"""DORA (Choshen et al., 2018): generalised counts from an E-value network; DQN + DORA and DORA OA.

An E-value network with a sigmoid output, its final layer initialised to zero (so ``E = 0.5``
everywhere at the start), is trained by n-step SARSA on zero rewards with its own discount
``gamma_E``, on a small ring of the most recent steps. As ``(s, a)`` and what follows it are visited,
``E(s, a)`` decays, and ``-log E`` behaves like a count. The bonus ``beta / sqrt(-log E(s, a))`` is
DQN + DORA's intrinsic reward (``beta_dora``) and, for DORA OA, also added to Q when acting
(``beta_dora_action``).

The network's pre-sigmoid output (the logit) is kept and ``-log E = softplus(-logit)`` is computed
from it, which stays finite where ``E`` rounds to 1 or 0. The reference code takes ``log E`` without the
minus sign in its all-actions bonus, which makes that bonus a constant; this follows the papers.

DORA's ring stores the in-program environments' compact steps, so it runs on the chain, the maze and
gymnax environments (the paper has no DORA on Montezuma).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from ..common.config import Option
from ..primitives import replay
from ..primitives.networks import zero_final_layer
from ..primitives.targets import td_loss, window_mask
from .base import Part


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


@struct.dataclass
class DoraState:
    """DORA's E-value network (logits; E = sigmoid), its optimiser and its small ring of recent steps."""

    params: Any
    opt_state: Any
    buffer: replay.ReplayBuffer


class Dora(Part):
    """The E-value network, its SARSA update, its intrinsic reward and (DORA OA) its action bonus."""

    name = "dora"
    hparams = (
        Option("beta_dora", 0.0, "DQN + DORA: scale of the intrinsic reward beta_dora / sqrt(-log E(s, a)).",
               minimum=0.0),
        Option("beta_dora_action", 0.0, "DQN + DORA OA: scale of the action-selection bonus "
               "beta_dora_action / sqrt(-log E(s, a)).", minimum=0.0),
    )
    static_options = (
        Option("dora_buffer_factor", 4, "DORA: its E-network's ring holds this many batches of recent steps.",
               minimum=1, type=int),
        Option("dora_gamma", 0.99, "DORA: discount of the E-values' SARSA.", minimum=0.0, maximum=1.0),
    )
    random_streams = {"e_network": 1}
    keeps_steps = True

    def network(self, agent):
        """The E-network: the Q-network's architecture with one logit per action, computing as the Q-network does
        (float32 weights; bfloat16 hidden layers under mixed precision; a float32 output)."""
        return agent.make_network(agent.num_actions)

    def init(self, agent, run_key, example):
        e_params = zero_final_layer(agent.init_variables(self.network(agent), agent.init_key(run_key, "e_network"),
                                                         example.obs[None]))
        ring = replay.init(example.item, agent.static.part("dora").buffer_factor * agent.static.batch_size)
        return DoraState(params=e_params, opt_state=agent.optimiser.init(e_params), buffer=ring)

    def action_bonus(self, agent, run, obs, counts):
        return dora_bonus(self.network(agent).apply(run.parts[self.name].params, obs), run.hparams["beta_dora_action"])

    def after_step(self, agent, run, step):
        state = run.parts[self.name]
        return state.replace(buffer=replay.add(state.buffer, step.item))

    def intrinsic_reward(self, agent, run, batch):
        logits = agent.apply_flat(self.network(agent), run.parts[self.name].params, batch.step_obs, batch.actions.ndim)
        taken = jnp.take_along_axis(logits, batch.actions[..., None], axis=-1)[..., 0]
        return dora_bonus(taken, run.hparams["beta_dora"])

    def update(self, agent, run, batch, key):
        """One n-step SARSA step of the E-values (zero reward) on a batch from DORA's ring of recent steps."""
        state, static, network = run.parts[self.name], agent.static, self.network(agent)
        items, exists = replay.sample_windows(state.buffer, key, static.batch_size, static.n_step + 1)
        windows = agent.replay.steps(items)
        lead = windows.action.ndim
        next_e = jax.nn.sigmoid(agent.apply_flat(network, state.params, agent.replay.obs_of(run, windows.reached),
                                                 lead))
        targets, _ = jax.vmap(dora_sarsa_target, in_axes=(0, 0, 0, 0, 0, None))(
            next_e, windows.action, windows.done, windows.terminated, exists, static.part("dora").gamma
        )
        obs = agent.replay.obs_of(run, windows.state[:, 0])

        def loss_fn(params):
            logits = network.apply(params, obs)
            e_taken = jax.nn.sigmoid(jnp.take_along_axis(logits, windows.action[:, :1], axis=1)[:, 0])
            return td_loss(e_taken, targets)

        grads = jax.grad(loss_fn)(state.params)
        params, opt_state = agent.sgd_step(state.params, state.opt_state, grads, run.hparams["lr"])
        return state.replace(params=params, opt_state=opt_state)


PART = Dora()
