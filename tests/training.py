"""Training an experiment in the tests: the runner's compiled trainer, chunk after chunk, kept on the host; the
trainer's targets of hand-made minibatches (the trainer's internals, which only the tests read this way)."""

import jax

from opiq_jax.agent.trainer import targets_for, with_counts
from opiq_jax.common.config import stack_hparams
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, run_keys_for


def train_chunks(experiment: Experiment, chunks: int | None = None):
    """``(initial state, final state, metrics of each chunk)`` of ``experiment``, as host copies, after
    ``chunks`` chunks (default: all of ``total_steps``)."""
    static = experiment.static
    _, init, train_chunk = compiled_trainer(static)
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    initial = jax.device_get(state)
    history = []
    for _ in range(static.total_steps // static.log_every if chunks is None else chunks):
        state, metrics = train_chunk(state)
        history.append(jax.device_get(metrics))
    return initial, jax.device_get(state), history


def targets_of(trainer, run, batch):
    """The n-step targets of one run's ``batch``, as the trainer computes them (``trainer.targets_for``)."""
    return targets_for(trainer.agent, run, batch)


def batch_of(trainer, run, windows, exists):
    """The minibatch of hand-picked compact ``windows`` of one run, as the trainer would sample it (its counts
    read as the trainer reads them)."""
    return with_counts(trainer.agent, run, trainer.stepping.replay.batch_of(run, windows, exists))


def compiled_targets(trainer):
    """``(run, windows, exists) -> targets_of(trainer, run, batch_of(trainer, run, windows, exists))`` compiled as
    one program: called op by op, each of its many operations would compile on its own."""
    return jax.jit(lambda run, windows, exists: targets_of(trainer, run, batch_of(trainer, run, windows, exists)))
