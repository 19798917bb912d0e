"""The paper's counting: a count-min sketch per run, of the columns a state's code hashes to.

:class:`SketchCounting` keeps the sketch (``int32[actions, rows, width]``, :mod:`opiq_jax.primitives.counts`) and,
where its subclass measures it, a probe of exact counts against which the sketch's over-counting is reported. A
subclass says what is counted: :meth:`SketchCounting.init_features` (what turns one run's states into codes, its
SimHash projection say) and :meth:`~opiq_jax.contracts.Counting.columns`. The compact stepping's (SimHash of the
observation, or the environment's exact cell id) and the pool's (the frame feature) are the two.
"""

from __future__ import annotations

import abc
from typing import Any

import jax

from . import Counting, Decision, Outcome
from ..common.config import StaticConfig
from ..primitives import counts
from ..primitives.state import Counts


class SketchCounting(Counting):
    """A count-min sketch of ``static.sketch_rows`` rows of ``static.sketch_width`` columns per action (module
    docstring)."""

    def __init__(self, static: StaticConfig):
        self.static = static

    @abc.abstractmethod
    def init_features(self, hash_key: jax.Array, env: Any) -> Any:
        """What turns one run's states into sketch columns (``run.counts.features``)."""

    def init_probe(self, num_actions: int) -> Any:
        """A ``counts.CountProbe`` for one run, where the sketch's over-counting is measured (its codes come from
        :meth:`code`); None (the default) measures nothing."""
        del num_actions
        return None

    def code(self, key: jax.Array) -> jax.Array:
        """The ``uint32`` code of one state's count key (counters with a probe only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no count probe")

    def init(self, hash_key: jax.Array, env: Any, num_actions: int) -> Counts:
        sketch = counts.init_sketch(num_actions, self.static.sketch_rows, self.static.sketch_width)
        return Counts(sketch=sketch, features=self.init_features(hash_key, env), probe=self.init_probe(num_actions))

    def add(self, run_counts: Counts, decision: Decision, outcome: Outcome) -> Counts:
        """Each real ``(s_t, a_t)`` into the sketch (one agent, one sketch: every environment's visits) and into the
        probe's exact counts, where there is one."""
        # ``real`` once for the probe and ``~first[e]`` per environment for the sketch, as the trainer wrote them
        # before the counting was a contract: every program lowers to the text it had (program_identity)
        sketch, probe, real = run_counts.sketch, run_counts.probe, ~outcome.first
        for e in range(decision.actions.shape[0]):
            sketch = counts.update(sketch, decision.columns[e], decision.actions[e], ~outcome.first[e])
            if probe is not None:
                probe = counts.probe_update(probe, self.code(decision.before[e]), decision.actions[e], real[e])
        return run_counts.replace(sketch=sketch, probe=probe)

    def query(self, run_counts: Counts, columns: jax.Array, action: jax.Array) -> jax.Array:
        return counts.query(run_counts.sketch, columns, action)

    def query_all(self, run_counts: Counts, columns: jax.Array) -> jax.Array:
        return counts.query_all_actions(run_counts.sketch, columns)


__all__ = ["SketchCounting"]
