"""The compiled core as pure functions: ``make_train`` gives one experiment's ``init`` and ``train_chunk`` and their
inputs, for a caller who wants the loop in their own hands (``jax.jit`` it, time it, put it in a larger program)::

    import jax
    import opiq_jax

    program = opiq_jax.make_train(env="chain", methods=["opiq", "dqn_pc"], seeds=8, steps=2_000, chain_length=10,
                                  log_every=500)
    state = jax.jit(program.init)(program.run_keys, program.env_keys, program.hparams)
    step = jax.jit(program.train_chunk, donate_argnums=0)
    for _ in range(program.chunks):
        state, metrics = step(state)          # metrics["test_return"]: one value per run

The runs (methods x settings x seeds) lie on one leading axis: ``init`` and ``train_chunk`` vmap the per-run
functions over it themselves, keeping what all runs share (the step counter, when to train and to copy the target)
outside the vmap, where it stays a real branch. ``opiq_jax.train`` compiles these same functions (the trainer of
each program of an experiment) and adds the host's work: checkpoints, metrics files, figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from .agent.trainer import make_train as trainer_of
from .common.config import StaticConfig, stack_hparams
from .common.errors import UsageError
from .host.plan import plan_experiment
from .runs.experiment import RunSpec, run_keys_for, split_by_program
from .registry.environments import started_by_host


@dataclass(frozen=True)
class Program:
    """One compiled experiment's pure functions and what they take.

    ``init(run_keys, env_keys, hparams) -> state``: every run's initial state, stacked on a leading runs axis.
    ``train_chunk(state) -> (state, metrics)``: ``static.log_every`` environment steps of every run (a
    ``lax.scan``); ``metrics`` maps each of ``metric_names`` to one value per run.
    """

    init: Callable
    train_chunk: Callable
    run_keys: jax.Array
    env_keys: jax.Array
    hparams: Mapping[str, jax.Array]
    runs: tuple[RunSpec, ...]
    static: StaticConfig
    metric_names: tuple[str, ...]

    @property
    def chunks(self) -> int:
        """Calls of ``train_chunk`` to the last step."""
        return self.static.total_steps // self.static.log_every


def make_train(env: str = "chain", methods: Sequence[str] = ("opiq",), seeds: int | Sequence[int] = 4, *,
               steps: int | None = None, grid: Mapping[str, Sequence[float]] | None = None, seed: int = 0,
               **options: Any) -> Program:
    """The :class:`Program` of ``methods`` x ``seeds`` (x every setting of ``grid``) on ``env``, planned and checked
    as :func:`opiq_jax.train` plans it (same arguments and options; a bad one raises
    :class:`~opiq_jax.common.errors.UsageError`). The methods must share one program (DORA, RND and BSP each make
    their own), and the environment must step inside it (a pool of emulators, Montezuma's, steps from the host)."""
    if steps is not None:
        options = {"steps": steps, **options}
    experiment = plan_experiment(env, methods, seeds, seed=seed, grid=grid, options=options)
    programs = split_by_program(experiment)
    if len(programs) > 1:
        raise UsageError(f"methods {', '.join(methods)} make {len(programs)} programs ({', '.join(programs)}): call "
                         "make_train once for each program's methods, or opiq_jax.train for all of them")
    if started_by_host(experiment.static.env):
        raise UsageError(f"{env} steps a pool of emulators from the host, which the pure functions cannot hold: "
                         "train it with opiq_jax.train")
    trainer = trainer_of(experiment.static)
    run_keys, env_keys = run_keys_for(experiment)
    return Program(init=trainer.init, train_chunk=trainer.train_chunk, run_keys=run_keys, env_keys=env_keys,
                   hparams=stack_hparams(experiment.hparams()), runs=experiment.runs, static=experiment.static,
                   metric_names=tuple(trainer.metric_names))
