"""What a run carries through the compiled loop: its state, its counts and the running sums of its metrics.

Plain data (flax struct dataclasses), below the trainer and the parts: the parts' hooks read a run's state, and
the trainer builds and steps it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ..common.config import HParams


def all_finite(tree: Any) -> jax.Array:
    """Whether every number of every leaf of ``tree`` is finite (a bool scalar)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def chunk_mean(total: jax.Array, count: jax.Array) -> jax.Array:
    """``total / count`` for a chunk's metric, NaN when nothing was counted in the chunk."""
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


@struct.dataclass
class ChunkStats:
    """Sums over the steps since the last metrics row, which turns them into means and resets them."""

    return_sum: jax.Array  # float32: returns of the episodes that ended
    episodes: jax.Array  # int32: episodes that ended
    loss_sum: jax.Array  # float32: TD loss of each update
    updates: jax.Array  # int32
    intrinsic_sum: jax.Array  # float32: mean intrinsic reward of each update's sampled steps

    @classmethod
    def zeros(cls) -> ChunkStats:
        zero_sum, zero_count = jnp.float32(0), jnp.int32(0)
        return cls(return_sum=zero_sum, episodes=zero_count, loss_sum=zero_sum, updates=zero_count,
                   intrinsic_sum=zero_sum)

    def add_episodes(self, returns_sum: jax.Array, ended: jax.Array) -> ChunkStats:
        """``ended`` episodes ended with returns summing to ``returns_sum``."""
        return self.replace(return_sum=self.return_sum + returns_sum, episodes=self.episodes + ended)

    def add_update(self, loss: jax.Array, intrinsic_mean: jax.Array) -> ChunkStats:
        return self.replace(loss_sum=self.loss_sum + loss, updates=self.updates + 1,
                            intrinsic_sum=self.intrinsic_sum + intrinsic_mean)

    def means(self) -> dict[str, jax.Array]:
        """The chunk's metrics rows: ``train_return``, ``episodes``, ``loss``, ``intrinsic_reward``."""
        return {
            "train_return": chunk_mean(self.return_sum, self.episodes),
            "episodes": self.episodes.astype(jnp.float32),
            "loss": chunk_mean(self.loss_sum, self.updates),
            "intrinsic_reward": chunk_mean(self.intrinsic_sum, self.updates),
        }


@struct.dataclass
class Diagnostics:
    """What shows learning going wrong, over the steps since the last metrics row (paths that record it: the pool).

    The largest TD error and |Q| of the chunk's updates, the parts' bonuses at the states the run acted in (summed
    over its real environment steps) and at the states its updates sampled (summed over updates, each the mean of
    its valid rows), and the share of sampled rows whose Monte Carlo return was still unknown.
    """

    td_error_max: jax.Array  # float32: max |y - Q(s, a)| over the valid rows of every update
    q_abs_max: jax.Array  # float32: max |Q(s, .)| over the valid rows' start states and every action
    acted_intrinsic_sum: jax.Array  # float32: intrinsic reward of each acted (s, a), counts just after the step
    acted_bonus_sum: jax.Array  # float32: action bonus of each chosen action, counts as the choice saw them
    acted_steps: jax.Array  # int32: real environment steps (EnvPool's reset steps excluded)
    sampled_bonus_sum: jax.Array  # float32: per update, the mean action bonus of the sampled (s_t, a_t)
    unknown_return_sum: jax.Array  # float32: per update, the share of valid rows with an unknown Monte Carlo return
    updates: jax.Array  # int32

    @classmethod
    def zeros(cls) -> Diagnostics:
        zero_sum, zero_count = jnp.float32(0), jnp.int32(0)
        return cls(td_error_max=zero_sum, q_abs_max=zero_sum, acted_intrinsic_sum=zero_sum, acted_bonus_sum=zero_sum,
                   acted_steps=zero_count, sampled_bonus_sum=zero_sum, unknown_return_sum=zero_sum,
                   updates=zero_count)

    def add_acted(self, intrinsic: jax.Array, bonus: jax.Array, real: jax.Array) -> Diagnostics:
        """One vectorised step: per environment ``[E]`` its intrinsic reward and bonus, and whether it was real."""
        return self.replace(acted_intrinsic_sum=self.acted_intrinsic_sum + jnp.sum(jnp.where(real, intrinsic, 0.0)),
                            acted_bonus_sum=self.acted_bonus_sum + jnp.sum(jnp.where(real, bonus, 0.0)),
                            acted_steps=self.acted_steps + jnp.sum(real.astype(jnp.int32)))

    def add_update(self, td_error_max: jax.Array, q_abs_max: jax.Array, bonus_mean: jax.Array,
                   unknown_share: jax.Array) -> Diagnostics:
        return self.replace(td_error_max=jnp.maximum(self.td_error_max, td_error_max),
                            q_abs_max=jnp.maximum(self.q_abs_max, q_abs_max),
                            sampled_bonus_sum=self.sampled_bonus_sum + bonus_mean,
                            unknown_return_sum=self.unknown_return_sum + unknown_share, updates=self.updates + 1)

    def means(self) -> dict[str, jax.Array]:
        """The chunk's rows (:data:`DIAGNOSTIC_METRICS`); NaN where the chunk made no update or took no real step."""
        trained = self.updates > 0
        return {
            "td_error_max": jnp.where(trained, self.td_error_max, jnp.nan),
            "q_abs_max": jnp.where(trained, self.q_abs_max, jnp.nan),
            "acted_intrinsic": chunk_mean(self.acted_intrinsic_sum, self.acted_steps),
            "acted_bonus": chunk_mean(self.acted_bonus_sum, self.acted_steps),
            "sampled_bonus": chunk_mean(self.sampled_bonus_sum, self.updates),
            "unknown_return_share": chunk_mean(self.unknown_return_sum, self.updates),
        }


DIAGNOSTIC_METRICS = ("td_error_max", "q_abs_max", "acted_intrinsic", "acted_bonus", "sampled_bonus",
                      "unknown_return_share")
"""The metrics :meth:`Diagnostics.means` returns, in the order they are written."""


@struct.dataclass
class RunStats:
    episode_return: jax.Array  # float32[E]: return of each running episode
    chunk: ChunkStats
    max_return: jax.Array
    visited: dict  # metric name -> bool[size]: what the path tracks (cells, cell-actions, rooms)
    nonfinite: jax.Array  # bool: the run's numbers were NaN or infinite at some chunk's end
    diagnostics: Diagnostics | None = None  # where the path records them (``Stepping.records_diagnostics``)


@struct.dataclass
class Counts:
    """The run's visit counts: a count-min sketch and what turns a state into its columns (the path's)."""

    sketch: jax.Array  # int32[num_actions, rows, width]
    features: Any
    probe: Any = None  # counts.CountProbe where the path measures the sketch's over-counting (the pool), else None


@struct.dataclass
class RunState:
    key: jax.Array
    hparams: HParams
    # the Q-network's weights and its optimiser's state: a subtree that the weight storage (agent/weights.py) defines
    # and alone reads; callers ask the storage for the weights they need
    weights: Any
    target_params: Any  # the target network as the forward passes read it: a copy, never stepped, so not the storage's
    env: Any  # the path's per-run environment data
    memory: Any  # the path's replay
    counts: Counts | None  # None when no part of the program counts
    stats: RunStats
    active_head: jax.Array  # int32[E]: the head acting in each environment's episode (0 with one head)
    parts: dict  # part name -> its state (parts without state are absent)
    target_table: jax.Array | None = None  # float32[num_cells, K, A]: the target network at every cell, or None


@struct.dataclass
class TrainState:
    step: jax.Array  # int32 scalar: scan iterations (each steps every environment of every run once)
    env: Any  # the path's state shared by all runs (EnvPool's handle), or None
    runs: RunState  # leading runs axis on every leaf
