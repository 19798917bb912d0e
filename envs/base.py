"""The contract between an environment and the opiq-jax trainer, as code.

An environment that the trainer steps inside its compiled program (the chain, the maze, any gymnax
environment through :class:`~opiq_jax.envs.gymnax_adapter.GymnaxAdapter`, or one of your own)
subclasses :class:`CompactEnvironment`: gymnax's ``Environment`` API plus what replay and counting
need. The trainer stores the *compact state* of every step (a chain position, maze coordinates: a few
integers) instead of its observation, and rebuilds observations when it samples a minibatch; that is
what lets thousands of runs keep their replay on one device.

Required, beyond gymnax's ``reset``/``step``/``action_space``/``observation_space``/``default_params``:

* ``num_actions``, ``compact_dim`` (length of a compact state) and ``num_cells`` (size of the
  integer cell-id space used for "distinct states visited");
* ``sample_params(key)``: one run's environment parameters (the chain's flips, the maze's action
  permutations); the default returns ``default_params``;
* ``step(...)``'s ``info`` carries ``"compact"`` and ``"cell_id"``: the compact state reached and its
  cell, *before* any auto-reset (what a truncated episode bootstraps from);
* ``compact_state(state)``, ``obs_from_compact(compact, params)``, ``cell_id(compact)`` and
  ``start_compact(params)``;
* ``step_in_episode(...)`` where a reset is costly: a step without the auto-reset, for an episode whose
  values after its end are never read (the default is ``step``).

Optional capabilities are declared, never guessed:

* ``has_cell_table = True`` and ``all_compacts()``: the compact state of every cell id, in order. The
  trainer then computes each cell's count code once, and in bfloat16 keeps the target network's values
  per cell (one forward pass over all cells per target copy instead of one per minibatch).
"""

from __future__ import annotations

import abc
from typing import ClassVar

import jax
from ._imports import plotting_imports_deferred

with plotting_imports_deferred():  # gymnax's environments import their renderers' libraries
    from gymnax.environments import environment


class CompactEnvironment(environment.Environment, abc.ABC):
    """A gymnax environment with compact states: what the trainer's in-program path needs (module docstring)."""

    has_cell_table: ClassVar[bool] = False
    """Whether :meth:`all_compacts` lists every cell (declare it; the trainer never probes for it)."""

    compact_dim: int
    """Length of a compact state (int32 coordinates, or a flattened float32 observation)."""

    @property
    @abc.abstractmethod
    def num_actions(self) -> int:
        """Number of discrete actions."""

    @property
    @abc.abstractmethod
    def num_cells(self) -> int:
        """Size of the cell-id space (``cell_id`` lies in ``[0, num_cells)``)."""

    def sample_params(self, key: jax.Array):
        """One run's environment parameters, drawn from ``key`` (default: ``default_params``, no randomisation)."""
        del key
        return self.default_params

    @abc.abstractmethod
    def compact_state(self, state) -> jax.Array:
        """``[compact_dim]``: the compact form of ``state``."""

    @abc.abstractmethod
    def obs_from_compact(self, compact: jax.Array, params) -> jax.Array:
        """The observation ``reset``/``step`` return in the state ``compact`` stands for."""

    @abc.abstractmethod
    def cell_id(self, compact: jax.Array) -> jax.Array:
        """int32 scalar in ``[0, num_cells)``: which cell ``compact`` is in."""

    @abc.abstractmethod
    def start_compact(self, params) -> jax.Array:
        """The compact state of a reset (where ``q_start`` is measured)."""

    def step_in_episode(self, key: jax.Array, state, action, params):
        """``(obs, state, reward, terminated, truncated)``: one step of an episode played to its end and no further
        (the greedy test episode), the same as ``step``'s until the episode ends; after that its values are
        never read, so an environment may skip the reset there. The default is ``step`` itself; an environment
        whose reset is costly (Craftax generates a world) overrides it with a step that does not reset."""
        obs, state, reward, terminated, truncated, _ = self.step(key, state, action, params)
        return obs, state, reward, terminated, truncated

    def all_compacts(self) -> jax.Array:
        """``int32[num_cells, compact_dim]``: every cell's compact state (only with ``has_cell_table``)."""
        raise TypeError(f"{type(self).__name__} declares no cell table (has_cell_table is False)")


__all__ = ["CompactEnvironment"]
