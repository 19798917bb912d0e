"""Randomised Chain (OPIQ, ICLR 2020) as a gymnax environment.

A chain of ``length`` states 0..length-1. Episodes start in state 1 and end
only at the horizon (a truncation: bootstrap through it). Each state has a
flip bit; the effective move of action ``a`` in state ``s`` is
``(a + flips[s]) % 2`` with 0 = left, 1 = right. An effective left in state 0
pays 0.001 and an effective right in the last state pays 1.0, on every step
spent there. The observation is a thermometer code: ``obs[:s + 1] = 1``.

With the default length 100 and horizon 109, the best return is 11.0
(98 steps to the right end, then +1 on each of the last 11 steps) and the
always-left return is 0.108.
"""

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from .base import CompactEnvironment

START_POS = 1
LEFT_REWARD = 0.001
RIGHT_REWARD = 1.0


@struct.dataclass(kw_only=True)
class ChainState(environment.EnvState):
    """Position on the chain and steps taken in the current episode."""

    pos: jax.Array  # int32 scalar
    time: jax.Array  # int32 scalar


@struct.dataclass(kw_only=True)
class ChainParams(environment.EnvParams):
    """Per-state flip bits (int32[length], 0/1) and the horizon."""

    flips: jax.Array
    max_steps_in_episode: int = 109


def thermometer(pos: jax.Array, length: int) -> jax.Array:
    """float32[length] with ones at indices 0..pos."""
    return (jnp.arange(length, dtype=jnp.int32) <= pos).astype(jnp.float32)


def chain_transition(
    pos: jax.Array, action: jax.Array, flips: jax.Array, length: int
) -> tuple[jax.Array, jax.Array]:
    """Next position and reward for one step from ``pos``."""
    move = (action + flips[pos]) % 2  # 0 = left, 1 = right, in effect
    reward = jnp.where(
        (move == 0) & (pos == 0),
        LEFT_REWARD,
        jnp.where((move == 1) & (pos == length - 1), RIGHT_REWARD, 0.0),
    ).astype(jnp.float32)
    next_pos = jnp.clip(pos + 2 * move - 1, 0, length - 1).astype(jnp.int32)
    return next_pos, reward


class RandomisedChain(CompactEnvironment):
    """The OPIQ randomised chain. Never terminates; truncates at the horizon."""

    compact_dim = 1
    has_cell_table = True

    def __init__(self, length: int = 100, horizon: int | None = None):
        super().__init__()
        if horizon is None:
            horizon = length + 9
        if int(length) != length or length < 2:
            raise ValueError(f"chain length must be an integer >= 2, got {length!r}")
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"chain horizon must be an integer >= 1, got {horizon!r}")
        self.length = int(length)
        self.horizon = int(horizon)

    # ------------------------------------------------------------------ sizes
    @property
    def name(self) -> str:
        return "RandomisedChain"

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def num_cells(self) -> int:
        """Size of the integer cell-id space (one id per chain state)."""
        return self.length

    @property
    def num_open_cells(self) -> int:
        """Number of reachable cells (every chain state)."""
        return self.length

    # ----------------------------------------------------------------- params
    @property
    def default_params(self) -> ChainParams:
        """No flips: action 0 moves left and action 1 right everywhere."""
        return ChainParams(
            flips=jnp.zeros((self.length,), jnp.int32),
            max_steps_in_episode=self.horizon,
        )

    def sample_params(self, key: jax.Array) -> ChainParams:
        """Flip bits ~ Bernoulli(0.5) per state, drawn from ``key``."""
        flips = jax.random.bernoulli(key, 0.5, (self.length,)).astype(jnp.int32)
        return ChainParams(flips=flips, max_steps_in_episode=self.horizon)

    # ---------------------------------------------------------------- dynamics
    def step_env(
        self,
        key: jax.Array,
        state: ChainState,
        action: int | float | jax.Array,
        params: ChainParams,
    ) -> tuple[jax.Array, ChainState, jax.Array, jax.Array, dict[Any, Any]]:
        """One transition. ``info`` carries the (pre-reset) compact state."""
        del key
        action = jnp.asarray(action, jnp.int32)
        chex.assert_shape(action, ())
        chex.assert_shape(params.flips, (self.length,))
        next_pos, reward = chain_transition(
            state.pos, action, params.flips, self.length
        )
        state = ChainState(pos=next_pos, time=state.time + 1)
        compact = self.compact_state(state)
        info = {"compact": compact, "cell_id": self.cell_id(compact)}
        return (
            self.get_obs(state, params),
            state,
            reward,
            self.is_terminated(state, params),
            info,
        )

    def reset_env(
        self, key: jax.Array, params: ChainParams
    ) -> tuple[jax.Array, ChainState]:
        """Deterministic start in state 1."""
        del key
        state = ChainState(
            pos=jnp.asarray(START_POS, jnp.int32), time=jnp.asarray(0, jnp.int32)
        )
        return self.get_obs(state, params), state

    def get_obs(self, state: ChainState, params=None, key=None) -> jax.Array:
        """Thermometer code of the position."""
        del params, key
        return thermometer(state.pos, self.length)

    def is_terminated(self, state: ChainState, params: ChainParams) -> jax.Array:
        """The chain has no terminal state."""
        del state, params
        return jnp.asarray(False)

    # ---------------------------------------------------------- compact state
    def compact_state(self, state: ChainState) -> jax.Array:
        """int32[1]: the position."""
        return jnp.reshape(state.pos, (1,)).astype(jnp.int32)

    def obs_from_compact(self, compact: jax.Array, params: ChainParams) -> jax.Array:
        """The observation ``step``/``reset`` return at this position."""
        del params
        chex.assert_shape(compact, (self.compact_dim,))
        return thermometer(compact[0], self.length)

    def cell_id(self, compact: jax.Array) -> jax.Array:
        """int32 scalar in [0, num_cells): the position."""
        chex.assert_shape(compact, (self.compact_dim,))
        return compact[0].astype(jnp.int32)

    def all_compacts(self) -> jax.Array:
        """int32[num_cells, 1]: the compact state of every cell id, in cell-id order."""
        return jnp.arange(self.length, dtype=jnp.int32)[:, None]

    def start_compact(self, params: ChainParams) -> jax.Array:
        """Compact state of the start position."""
        del params
        return jnp.array([START_POS], jnp.int32)

    # ----------------------------------------------------------------- spaces
    def action_space(self, params: ChainParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params: ChainParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.length,), jnp.float32)
