"""Compiled trainers and chunks, cached: one place that turns a static configuration into programs.

:func:`trainer_for` gives the trainer of a configuration (cached for environments stepped in the program; built
around its pool for a pool environment); :func:`compile_chunk` compiles a chunk for a state's shapes and placement
once per process (:func:`chunk_program`: with the runs split over devices, each device steps its own runs).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from ..agent.trainer import Trainer, make_train
from ..common.config import StaticConfig
from ..parts import definition, get_part
from ..contracts.pool import PoolShapes, first_output
from ..registry.environments import started_by_host
from .devices import runs_mesh


def registered_parts(static: StaticConfig) -> tuple:
    """Which part objects ``static.parts`` names now (their definitions and identities: a part may be an unhashable
    dataclass): the caches below are keyed by them too, so a part registered again under its name (a corrected
    notebook cell) is never served a program built with the one before. The cached trainer holds the parts, so
    an identity is not reused while its entry lives."""
    return tuple((definition(part), id(part)) for part in map(get_part, static.parts))


def compiled_trainer(static: StaticConfig) -> tuple[Trainer, callable, callable]:
    """``make_train`` plus jitted ``init`` and a donated, jitted ``train_chunk`` (cached per config and parts;
    environments stepped in the program only: a pool environment's trainer needs its pool, see :func:`trainer_for`)."""
    return _compiled_trainer(static, registered_parts(static))


@functools.lru_cache(maxsize=16)
def _compiled_trainer(static: StaticConfig, parts: tuple) -> tuple[Trainer, callable, callable]:
    del parts  # part of the cache's key only
    trainer = make_train(static)
    return trainer, jax.jit(trainer.init), jax.jit(trainer.train_chunk, donate_argnums=0)


def trainer_for(static: StaticConfig, pool=None) -> tuple[Trainer, callable, callable]:
    """The compiled trainer of ``static``: cached for in-program environments, built around ``pool`` for a pool."""
    if pool is None:
        return compiled_trainer(static)
    trainer = make_train(static, pool)
    return trainer, jax.jit(trainer.init), jax.jit(trainer.train_chunk, donate_argnums=0)


def shape_trainer(static: StaticConfig) -> Trainer:
    """A trainer to trace for shapes alone (nothing runs): a pool environment's is built around
    :class:`~opiq_jax.contracts.pool.PoolShapes`, no emulator started."""
    return make_train(static, PoolShapes()) if started_by_host(static.env) else compiled_trainer(static)[0]


def start_shapes(static: StaticConfig, num_envs: int) -> tuple:
    """What ``init`` takes after the hyperparameters for ``num_envs`` environments: nothing, or a pool's first output
    (as zeros, for shapes)."""
    if not started_by_host(static.env):
        return ()
    return ((jnp.zeros((8,), jnp.uint8), first_output(num_envs)),)


def compile_chunk(trainer: Trainer, state, name: str, say: Callable[[str], None]):
    """``trainer.train_chunk`` compiled ahead of its first call (a line before, its duration after), for
    ``state``'s shapes and placement: the state keeps its placement (the runs axis sharded over the devices, or
    one device) from chunk to chunk, and the metrics follow the runs."""
    key = (id(trainer), str(jax.tree.map(lambda x: (x.shape, x.dtype, x.sharding), state)))
    if key not in _COMPILED:
        say(f"opiq-jax: compiling {name}...")
        started = time.monotonic()
        jitted = chunk_program(trainer.train_chunk, state)
        while len(_COMPILED) >= 16:  # a long session of many experiments keeps the newest executables
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = (trainer, jitted.lower(state).compile())  # the trainer is kept so that its id stays its own
        say(f"opiq-jax: compiled in {time.monotonic() - started:.1f} s")
    return _COMPILED[key][1]


_COMPILED: dict = {}


def chunk_program(train_chunk: Callable, state) -> Callable:
    """``train_chunk`` jitted (its state donated) for ``state``'s placement; the metrics follow the runs.

    With the runs split over several devices, each device runs the chunk on its own runs (``shard_map``):
    runs never communicate, so the program needs no collective. Leaving the split to XLA's partitioner
    (experiments/bench/multi_gpu_scaling.py measures it) gathers the inputs of every custom call, which it cannot
    partition: the maze's Pallas convolutions then ran on all runs on every device, and two H100s gave 1.31x one
    instead of about 1.9x.
    """
    shardings = jax.tree.map(lambda x: x.sharding, state)
    runs_sharding = jax.tree.leaves(shardings.runs)[0]
    mesh = runs_mesh(state)
    if mesh is None:
        return jax.jit(train_chunk, donate_argnums=0, out_shardings=(shardings, runs_sharding))
    specs = jax.tree.map(lambda x: x.sharding.spec, state)
    per_device = jax.shard_map(train_chunk, mesh=mesh, in_specs=(specs,), out_specs=(specs, PartitionSpec("runs")),
                               check_vma=False)  # the step counter is computed alike on every device
    return jax.jit(per_device, donate_argnums=0, out_shardings=(shardings, runs_sharding))
