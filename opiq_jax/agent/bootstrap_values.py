"""Where the targets' bootstrap values come from, one strategy each, chosen once when the agent is built.

* :class:`NetworkTargets`: the target network evaluated on every sampled bootstrap state;
* :class:`TableTargets` (``target_values="table"``, or ``auto`` in bfloat16 on the chain and the maze): the target
  network's values at every cell of the environment, computed when the target is copied, then looked up per
  sampled bootstrap cell. The values are the same; what differs is when the network runs.

Each strategy owns what a target copy computes, the values the targets read and its bytes and forward passes
for the bench's work model.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp

from ..common.config import StaticConfig, uses_cell_table
from ..contracts import Batch, Stepping
from ..primitives.state import RunState


class AgentView(Protocol):
    """What a strategy reads of the trainer's agent: its stepping, and the heads' values of some weights."""

    stepping: Stepping

    def head_values(self, run: RunState, params: Any, obs: jax.Array, cells: jax.Array | None = None) -> jax.Array:
        """``[B, K, A]``: what each head acts and bootstraps on (``cells``: the cell ids of ``obs``, if known)."""

    def batch_cells(self, batch: Batch, name: str) -> jax.Array | None:
        """The batch's cell ids ``name`` where the stepping has a cell table, else None."""


class TargetValues(abc.ABC):
    """Where the bootstrap values of the targets come from (module docstring)."""

    name: ClassVar[str]
    description: ClassVar[str]

    @abc.abstractmethod
    def copied(self, agent: AgentView, run: RunState) -> RunState:
        """``run`` right after ``run.target_params`` became a copy of the online network."""

    @abc.abstractmethod
    def next_values(self, agent: AgentView, run: RunState, batch: Batch) -> jax.Array:
        """``[B, K, A]``: the target network's values at the batch's bootstrap states, per head."""


class NetworkTargets(TargetValues):
    name = "network"
    description = "the target network on every batch"

    def copied(self, agent: AgentView, run: RunState) -> RunState:
        del agent
        return run

    def next_values(self, agent: AgentView, run: RunState, batch: Batch) -> jax.Array:
        return agent.head_values(run, run.target_params, batch.next_obs, agent.batch_cells(batch, "next_cells"))


class TableTargets(TargetValues):
    name = "table"
    description = "the target network's values per cell"

    def copied(self, agent: AgentView, run: RunState) -> RunState:
        obs = agent.stepping.cell_table_obs(run)
        cells = jnp.arange(obs.shape[0], dtype=jnp.int32)
        return run.replace(target_table=agent.head_values(run, run.target_params, obs, cells))

    def next_values(self, agent: AgentView, run: RunState, batch: Batch) -> jax.Array:
        del agent
        return run.target_table[batch.next_cells]


def uses_target_table(static: StaticConfig, stepping: Stepping) -> bool:
    """Whether the targets look the target network's values up per cell (``Execution.target_values``)."""
    return uses_cell_table(static, "target_values", stepping.has_cell_table)


def target_values(static: StaticConfig, stepping: Stepping) -> TargetValues:
    """The strategy ``static`` asks for on ``stepping``, built once with the agent."""
    return TableTargets() if uses_target_table(static, stepping) else NetworkTargets()


__all__ = ["NetworkTargets", "TableTargets", "TargetValues", "target_values", "uses_target_table"]
