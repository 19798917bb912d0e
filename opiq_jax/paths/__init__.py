"""Observation paths: what differs between environments in how they are stepped, stored and seen.

The one trainer (:mod:`opiq_jax.trainer`) is written against a path object; two exist:

* :class:`~opiq_jax.paths.compact.CompactPath`: environments stepped inside the compiled program, one
  per run under ``vmap`` (chain, maze, gymnax environments, your own); the replay stores compact
  states and rebuilds observations when it samples;
* :class:`~opiq_jax.paths.pool.PoolPath`: one EnvPool pool holding every run's emulators (Montezuma),
  stepped through EnvPool's XLA interface; the replay stores single frames and rebuilds stacks.

A path keeps per-run environment data (``run.env``), per-run replay (``run.memory``) and, for the pool,
the pool's handle shared by all runs (``TrainState.env``). Acting sees ``envs_per_run`` environments per
run (``E``, 1 for compact paths). This module holds the types the trainer and the parts share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import struct


@struct.dataclass
class Decision:
    """What a run decided before the environment step (per run, ``E`` environments)."""

    actions: jax.Array  # int32[E]
    columns: jax.Array | None  # int32[E, rows]: sketch columns of the current states (None without counts)
    before: jax.Array  # the current states as the path remembers them ([E, compact_dim] or frames [E, H, W])
    env_key: jax.Array  # the run's key for this environment step


@struct.dataclass
class Outcome:
    """What the environment step returned (per run, ``E`` environments)."""

    obs: jax.Array  # [E, ...]: the next observation to act on (after any auto-reset)
    reward: jax.Array  # float32[E]: the environment's reward (unclipped)
    terminated: jax.Array  # bool[E]: a true terminal (no bootstrap)
    truncated: jax.Array  # bool[E]: the time limit (bootstrap from the last real state)
    first: jax.Array  # bool[E]: no transition led here (EnvPool's reset step): not counted, not stored as one
    extra: dict  # the path's own fields (the compact path: next_compact, cell_id; the pool: room)


@struct.dataclass
class StepRecord:
    """One environment step of one run, as :meth:`Part.after_step` sees it."""

    decision: Decision
    outcome: Outcome
    item: Any  # what the path's replay stored (the compact path's Transition), or None


class Batch:
    """A minibatch of ``n``-step windows (``B`` rows), as the trainer and every part see it, whatever the replay.

    Always present: ``actions`` (int32[B, n]), ``rewards`` (float32[B, n], the stored training rewards),
    ``terminated`` and ``included`` (bool[B, n]: the steps of the first step's episode), ``weights``
    (float32[B] or None: rows a sampler could not fill count 0) and ``mc_return`` (float32[B] or None,
    where the replay keeps Monte Carlo returns).

    Computed on first use (and then kept), so a program pays only for what its parts read:
    ``obs`` and ``next_obs`` (the network inputs of ``s_t`` and of the bootstrap state ``s_{t+L}``),
    ``step_obs`` and ``reached_obs`` (``[B, n, ...]``: each step's state and the state it reached, as bonus
    networks read them), ``step_columns`` / ``next_columns`` (count-min sketch columns), ``next_cells``
    (cell ids of the bootstrap states, for the target table), and from the trainer ``step_counts``
    (``N(s_{t+i}, a_{t+i})``, int32[B, n]) and ``next_counts`` (``N(s_{t+L}, .)``, int32[B, A]).
    """

    def __init__(self, *, actions, rewards, terminated, included, weights=None, mc_return=None,
                 lazy: dict[str, Callable[[], Any]]):
        self.actions, self.rewards, self.terminated, self.included = actions, rewards, terminated, included
        self.weights, self.mc_return = weights, mc_return
        self._lazy = dict(lazy)

    def add_lazy(self, **fields: Callable[[], Any]) -> None:
        """More fields computed on first use."""
        self._lazy.update(fields)

    def __getattr__(self, name: str) -> Any:
        lazy = self.__dict__.get("_lazy", {})
        if name not in lazy:
            raise AttributeError(f"this batch has no {name!r} (its path provides {', '.join(sorted(lazy)) or 'nothing lazy'})")
        value = lazy.pop(name)()
        setattr(self, name, value)
        return value


__all__ = ["Batch", "Decision", "Outcome", "StepRecord"]
