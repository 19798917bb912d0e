"""The thin host loop: compiled chunks in, a results folder out.

A results folder holds

* ``config.json``: the resolved static configuration, the base seed and every run's method, setting
  label, seed and hyperparameters;
* ``metrics.csv``: a tidy table ``run, method, setting, seed, step, metric, value``, appended after
  every chunk;
* ``checkpoint.msgpack`` (and the one before it, ``checkpoint.previous.msgpack``): the whole training
  state (networks, optimisers, replay, counts, keys) and the chunk it belongs to, checksummed;
* ``run_info.json``: the device, the wall-clock (summed over resumes), the throughput, and the code's revision
  and whether its tree was clean (``opiq_jax.store.provenance``).

Calling :func:`run_experiment` again on the same folder resumes from the checkpoint: rows of
``metrics.csv`` past the checkpoint are dropped and the chunks after it are recomputed, so an
interrupted experiment ends with exactly the parameters and metrics of an uninterrupted one. How each
file is written so that no stop loses it is :mod:`opiq_jax.store.files`' business; SIGINT and SIGTERM stop
the loop at the next chunk's end with a checkpoint (:class:`Stopped`).

This loop trains one program (an :class:`~opiq_jax.runs.experiment.Experiment`); a mix of methods is one program per
group (:func:`opiq_jax.host.train_programs.run_methods`), and :mod:`opiq_jax.runs.results_folder` reads such a
folder as one experiment.

Every environment goes through the same loop; a pool environment (Montezuma) also starts its pool of
emulators here, and on resume restarts it with fresh episodes (``PoolStepping.restart``).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ..agent.trainer import Trainer
from ..common.config import LOOP_DEFAULTS, StaticConfig, stack_hparams
from ..common.errors import NonFiniteRuns, PeerFailed, ResultsError, Stopped
from ..envs.atari import DevicePools, threads_per_pool
from ..contracts import Replay
from ..registry.environments import environment_spec
from ..reporting import tracking
from ..registry.environments import envs_per_run, started_by_host
from ..runs.compiled import compile_chunk, shape_trainer, start_shapes, trainer_for
from ..runs.devices import devices_mesh, shard_over_devices
from ..runs.experiment import Experiment, keys_from_data, keys_to_data, run_keys_for
from ..runs.memory import state_bytes_per_run
from ..runs.results_folder import DIGEST_KEY, experiment_digest, require_same_experiment
from ..store.files import (
    CONFIG_FILE, METRICS_FILE, RUN_INFO_FILE, BackgroundCheckpoints, FolderLock, Restored, atomic_write_bytes,
    newest_checkpoint, prepare_checkpoint, prepare_folder, read_json, write_checkpoint,
)
from ..store.frames import FrameRings
from ..store.provenance import source_revision
from ..store.metrics import (
    METRICS_HEADER, MetricsLedger, MetricsRecord, append_metric_rows, resume_metrics, resume_metrics_without_copy,
    rows_without_checkpoint, set_aside_uncovered,
)
from .stop_signals import SignalHandlers


@dataclass(frozen=True)
class Loop:
    """How the host loop behaves: :func:`run_experiment`'s keyword arguments (documented there)."""

    progress: bool = LOOP_DEFAULTS["progress"]
    checkpoint_seconds: float = LOOP_DEFAULTS["checkpoint_every"]
    stop_after_chunks: int | None = None
    max_seconds: float | None = None
    stop_on_nonfinite: bool = LOOP_DEFAULTS["stop_on_nonfinite"]
    verbose: bool = True
    should_stop: Callable[[], str | None] | None = None
    track: str = LOOP_DEFAULTS["track"]
    background_checkpoints: bool = True

    def say(self, message: str) -> None:
        """One line for the user (above the progress bar), unless quiet."""
        if self.verbose:
            tqdm.write(message)


class StopSignals(SignalHandlers):
    """SIGINT and SIGTERM ask the loop to stop at its next safe point (after the chunk in flight, or right after
    compiling); a second signal, a second or more later, stops at once, keeping the last checkpoint. Installed
    only in the main thread."""

    def __init__(self, say: Callable[[str], None]):
        self.say, self.signum, self.first_at = say, None, 0.0
        self.checkpointed, self.total = 0, 0  # where a run stopped at once resumes from

    REPEAT_SECONDS = 1.0  # a second signal sooner than this is one request delivered twice (a scheduler signals
    # every process of a job, and a parent of programs in processes of their own passes its signal on as well)

    def handle(self, signum, frame) -> None:
        del frame
        if self.signum is not None:
            if time.monotonic() - self.first_at < self.REPEAT_SECONDS:
                return
            raise Stopped(self.checkpointed, self.total, signum)
        self.signum, self.first_at = signum, time.monotonic()
        self.say(f"opiq-jax: {signal.Signals(signum).name} received: stopping after the current chunk "
                 "(send it again to stop at once)")


def wait_for(tree):
    """``jax.device_get(tree)``, waiting in short sleeps so that a signal handler can run meanwhile."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "is_ready")]
    while leaves and not all(x.is_ready() for x in leaves):
        time.sleep(0.02)
    return jax.device_get(tree)


# ------------------------------------------------------------------------------------ the loop


def start_pool(experiment: Experiment, resumed_at: int, **pool_overrides):
    """A pool environment's emulators for every run, seeded by the experiment's seed (and, after a resume,
    the chunk it resumes at, so a resumed run does not replay the first episodes' randomness)."""
    static = experiment.static
    seed = experiment.seed if resumed_at == 0 else experiment.seed + 1_000_003 * resumed_at
    num_envs = len(experiment.runs) * envs_per_run(static.env, static.envs_per_run)
    make, devices = environment_spec(static.env).make, jax.local_devices()
    if len(devices) == 1 or len(experiment.runs) % len(devices):
        return make(static, num_envs, seed, **pool_overrides)
    return pools_per_device(make, static, num_envs, seed, devices, **pool_overrides)


def pools_per_device(make, static: StaticConfig, num_envs: int, seed: int, devices, **pool_overrides) -> DevicePools:
    """A pool per device, each for its block of runs (seeded as one pool of them all would be), the host's emulator
    threads shared out among them (or ``num_threads``, if given, for them all)."""
    per_pool, count = num_envs // len(devices), len(devices)
    total = pool_overrides.pop("num_threads", None)
    threads = max(1, total // count) if total else threads_per_pool(count, per_pool)
    pools = [make(static, per_pool, first, num_threads=threads, **pool_overrides)
             for first in pool_seeds(seed, per_pool, count)]
    return DevicePools(pools, devices_mesh(devices))


def pool_seeds(seed: int, per_pool: int, count: int) -> list[int]:
    """Each of ``count`` pools' seed: EnvPool seeds a pool's environment ``i`` with its seed + ``i``, so these give
    every environment the seed one pool of them all would (each device's runs see the episodes they would see on
    one device)."""
    return [seed + d * per_pool for d in range(count)]


def restore_checkpoint(out: Path, experiment: Experiment, hparams, run_keys, env_keys, say) -> Restored | None:
    """The newest sound checkpoint in ``out`` (its state's keys typed again), or None."""
    static = experiment.static
    start = start_shapes(static, len(experiment.runs) * envs_per_run(static.env, static.envs_per_run))
    typed = jax.eval_shape(shape_trainer(static).init, run_keys, env_keys, hparams, *start)
    typed = typed.replace(env=None)  # a pool's handle is not kept: a resumed run restarts its emulators
    restored = newest_checkpoint(out, jax.eval_shape(keys_to_data, typed), warn=say)
    if restored is None:
        return None
    return dataclasses.replace(restored, state=keys_from_data(jax.tree.map(jnp.asarray, restored.state), typed))


def metrics_at_start(out: Path, experiment: Experiment, restored: Restored | None, say) -> MetricsLedger:
    """``metrics.csv`` as the checkpoint left it (:mod:`opiq_jax.store.metrics`), or none for a start from step 0:
    rows that no checkpoint covers are set aside, never deleted."""
    path, static, runs = out / METRICS_FILE, experiment.static, len(experiment.runs)
    if restored is None:
        if path.exists() and path.read_bytes().strip() not in (b"", b",".join(f.encode() for f in METRICS_HEADER)):
            set_aside_uncovered(path, say)
        path.unlink(missing_ok=True)  # nothing, or a header without rows
        return MetricsLedger()
    step = restored.chunk * static.log_every
    if restored.file.metrics is None:  # written before checkpoints kept a copy of the metrics
        return resume_metrics_without_copy(path, step, runs, static.log_every)
    return resume_metrics(path, MetricsRecord.from_json(restored.file.metrics), restored.file.metrics_copy, step, say)


def finished_by_metrics(out: Path, experiment: Experiment) -> bool:
    """Whether ``out``'s metrics hold every run's every chunk to the last step (its checkpoints may be gone)."""
    static = experiment.static
    return rows_without_checkpoint(out / METRICS_FILE, len(experiment.runs), static.log_every)[1] >= static.total_steps


def report_nonfinite(metrics: dict, experiment: Experiment, step: int, flagged: set[int], loop: Loop) -> None:
    """Says which runs became non-finite in this chunk (once each); raises :class:`NonFiniteRuns` if asked to."""
    new = [i for i in np.flatnonzero(np.asarray(metrics["nonfinite"]) > 0) if i not in flagged]
    counts = np.asarray(metrics.get("count_nonfinite", np.zeros(len(experiment.runs))))
    for i in new:
        spec = experiment.runs[i]
        what = "a NaN or infinite learned count" if counts[i] > 0 else "NaN or infinite loss, Q-values or parameters"
        loop.say(f"opiq-jax: run {i} ({spec.method}, {spec.setting}, seed {spec.seed}) has {what} "
                 f"by step {step:,}; "
                 + ("stopping" if loop.stop_on_nonfinite else "the other runs go on"))
    flagged.update(new)
    if new and loop.stop_on_nonfinite:
        raise NonFiniteRuns(f"{len(new)} run(s) became non-finite by step {step:,} (--stop-on-nonfinite); "
                            "the metrics and checkpoint up to this chunk are kept")


def run_experiment(experiment: Experiment, out: str | Path, progress: bool = LOOP_DEFAULTS["progress"],
                   checkpoint_seconds: float = LOOP_DEFAULTS["checkpoint_every"],
                   stop_after_chunks: int | None = None, max_seconds: float | None = None,
                   stop_on_nonfinite: bool = LOOP_DEFAULTS["stop_on_nonfinite"], verbose: bool = True,
                   should_stop: Callable[[], str | None] | None = None, track: str = LOOP_DEFAULTS["track"],
                   background_checkpoints: bool = True, **pool_overrides) -> object:
    """Trains every run of ``experiment`` to ``static.total_steps``, resuming from ``out`` if possible.

    Args:
      progress: show a progress bar.
      checkpoint_seconds: write a checkpoint after a chunk when at least this long has passed since
        the last one (0: after every chunk); the last chunk, a stop request and ``max_seconds`` always
        write one.
      stop_after_chunks: return after this many chunks of this call (for tests).
      max_seconds: return after the first chunk that ends past this many seconds of this call,
        with a checkpoint written, so that a time-boxed job can be resumed by calling again.
      stop_on_nonfinite: stop the whole experiment (:class:`NonFiniteRuns`) when a run's numbers become
        NaN or infinite, instead of flagging the run and going on.
      verbose: print one line for each thing worth knowing (compiling and its time, a large state,
        non-finite runs, a checkpoint moved aside).
      should_stop: called after every chunk; a reason (one line) stops the run at once with a checkpoint
        (:class:`PeerFailed`: another process of a run over several hosts failed).
      track: ``none``, or ``tensorboard`` to stream each method's aggregates per chunk (the ``tracking`` extra).
      background_checkpoints: write the interval's checkpoints of a state with frame rings (a pool environment's)
        while training goes on, one at a time (the last, a stop's and ``max_seconds``' are written at once).
      pool_overrides: options of a pool environment's emulators (EnvPool's, e.g. ``max_episode_steps``).
    Its device memory is checked by the caller, once, before anything is written
    (:func:`opiq_jax.host.train_programs.run_methods`, a sweep's batches, the parent of programs in processes of
    their own: :func:`opiq_jax.runs.memory.check_fits`).
    Returns the final training state (None when the folder's metrics show the run finished and it keeps no
    checkpoint: nothing was trained). Raises :class:`Stopped` after SIGINT or SIGTERM (progress checkpointed).
    """
    loop = Loop(progress, checkpoint_seconds, stop_after_chunks, max_seconds, stop_on_nonfinite, verbose, should_stop,
                track, background_checkpoints)
    out = prepare_folder(Path(out))
    with FolderLock(out, warn=loop.say), StopSignals(loop.say) as signals:
        return _train(experiment, out, signals, loop, pool_overrides)


@dataclass
class Progress:
    """Where a run stands when this call starts training it."""

    chunk: int  # chunks done (0: from the start)
    resumed: bool  # restored from a checkpoint
    ledger: MetricsLedger  # what metrics.csv holds, for the checkpoints (metrics_file)
    rings: FrameRings | None = None  # the state's frame rings, saved apart by the checkpoints (frame_store)


def frame_rings(replay: Replay, restored: Restored | None) -> FrameRings | None:
    """How the checkpoints save the replay's frame rings (None: it has none, they go inline)."""
    if replay.rings_apart is None:
        return None
    rings = FrameRings(*replay.rings_apart)
    if restored is not None:
        rings.restored(restored.file.segments.get(rings.frames_path), restored.file.arrays)
    return rings


def frames_bound(static: StaticConfig, chunks: int) -> int:
    """The most frames a ring can have been written in ``chunks`` chunks: a frame per environment step of the
    run's share, plus the first frames a start and a restart store."""
    return chunks * static.log_every // envs_per_run(static.env, static.envs_per_run) + 2


def _start(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, pool_overrides: dict):
    """``(trainer, state, progress)``: a new or restored state, its pool started, placed on the devices; None when
    the folder's metrics show the run finished (its checkpoints deleted: nothing to train, nothing to resume)."""
    static = experiment.static
    if not require_same_experiment(out, experiment, loop.say):
        # a resume keeps its config.json (resolved section included) until this start has resolved it again
        atomic_write_bytes(out / CONFIG_FILE, json.dumps(experiment.to_json(), indent=1).encode())
    hparams = stack_hparams(experiment.hparams())
    run_keys, env_keys = run_keys_for(experiment)
    restored = restore_checkpoint(out, experiment, hparams, run_keys, env_keys, loop.say)
    if restored is None and finished_by_metrics(out, experiment):
        loop.say(f"opiq-jax: {out} finished already: its metrics reach step {static.total_steps:,} for every run (it "
                 "keeps no checkpoint to resume from); nothing to train")
        return None
    progress = Progress(0 if restored is None else restored.chunk, restored is not None,
                        metrics_at_start(out, experiment, restored, loop.say))
    if restored is not None and restored.chunk * static.log_every >= static.total_steps:
        # its metrics repaired above where needed; said before the program is built: there is nothing to compile for
        loop.say(f"opiq-jax: {out} finished already: its checkpoint and metrics reach step {static.total_steps:,} "
                 "for every run; nothing to train")
        return None
    signals.checkpointed, signals.total = progress.chunk * static.log_every, static.total_steps
    pool = start_pool(experiment, progress.chunk, **pool_overrides) if started_by_host(static.env) else None
    trainer, init, _ = trainer_for(static, pool)
    resolved = {**experiment.to_json(), "resolved": trainer.agent.resolved()}  # what auto chose, on this device
    resolved[DIGEST_KEY] = experiment_digest(resolved)
    atomic_write_bytes(out / CONFIG_FILE, json.dumps(resolved, indent=1).encode())
    progress.rings = frame_rings(trainer.stepping.replay, restored)
    if restored is None:
        state = init(run_keys, env_keys, hparams, *(() if pool is None else (pool.reset(),)))
    else:
        state = restored.state if pool is None else trainer.stepping.restart(restored.state, pool)
    if pool is None or pool.spans_devices:  # a single pool's runs stay on its one device
        state = shard_over_devices(state, len(experiment.runs), loop.say)
    return trainer, state, progress


def _train(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, pool_overrides: dict):
    """The body of :func:`run_experiment`, its folder prepared and locked, its signals handled."""
    static, num_runs = experiment.static, len(experiment.runs)
    started = _start(experiment, out, signals, loop, pool_overrides)
    if started is None:
        return None
    trainer, state, progress = started
    step_chunk = compile_chunk(trainer, state,
                               f"{static.env} ({num_runs} runs; parts: {', '.join(static.parts) or 'none'})",
                               loop.say)
    if signals.signum is not None:  # asked to stop while compiling: nothing new to keep
        raise Stopped(progress.chunk * static.log_every, static.total_steps, signals.signum)
    info = RunInfo.start(out, experiment, resumed=progress.resumed)
    tracker = make_tracker(loop.track, out, experiment)
    try:
        return _chunks(experiment, out, signals, loop, trainer, state, progress, step_chunk, info, tracker)
    finally:
        if tracker is not None:
            tracker.close()


def make_tracker(kind: str, out: Path, experiment: Experiment):
    """The tracker of ``kind`` (``none``: None), given the resolved configuration."""
    if kind == "none":
        return None
    return tracking.make_tracker(kind, out, experiment.to_json())


def _chunks(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, trainer: Trainer, state,
            progress: Progress, step_chunk, info: RunInfo, tracker):
    """Trains chunk after chunk from ``progress.chunk``: metrics appended, checkpoints written, stops honoured."""
    static, num_runs, chunk = experiment.static, len(experiment.runs), progress.chunk
    num_chunks = static.total_steps // static.log_every
    bar = tqdm(total=static.total_steps, initial=chunk * static.log_every, unit="step", disable=not loop.progress,
               desc=f"{static.env} x{num_runs} runs", dynamic_ncols=True)
    started, last_checkpoint, chunk_seconds, done_here, flagged = time.monotonic(), time.monotonic(), 0.0, 0, set()
    checkpointed_chunk, writer = chunk, BackgroundCheckpoints()
    try:
        while chunk < num_chunks:
            dispatched = time.monotonic()
            state, metrics = step_chunk(state)
            metrics = wait_for(metrics)
            chunk, done_here, chunk_seconds = chunk + 1, done_here + 1, chunk_seconds + time.monotonic() - dispatched
            repaired = append_metric_rows(out / METRICS_FILE, metric_rows(experiment, chunk * static.log_every, metrics,
                                                                          trainer.metric_names), progress.ledger)
            if repaired:
                loop.say(repaired)
            peer = loop.should_stop() if loop.should_stop else None
            stop = signals.signum is not None
            out_of_time = loop.max_seconds is not None and time.monotonic() - started >= loop.max_seconds
            due = time.monotonic() - last_checkpoint >= loop.checkpoint_seconds
            nonfinite = bool(np.any(np.asarray(metrics["nonfinite"]) > 0)) and loop.stop_on_nonfinite
            ending = chunk == num_chunks or out_of_time or stop or nonfinite or peer  # its checkpoint is the last
            if ending or due:
                checkpoint(out, state, chunk * static.log_every, chunk, progress,
                           frames_bound(static, chunk - checkpointed_chunk), signals, writer,
                           loop.background_checkpoints and not ending)
                last_checkpoint, checkpointed_chunk = time.monotonic(), chunk
                info.write(out, chunk, started, chunk_seconds, done_here)
            if done_here == 1 and (note := long_run_note(chunk_seconds, num_chunks - chunk, static, num_runs)):
                loop.say(note)
            if tracker is not None:
                tracker.log_chunk(chunk * static.log_every, metrics)
            report_nonfinite(metrics, experiment, chunk * static.log_every, flagged, loop)
            bar.set_postfix_str(progress_fields(metrics, done_here, static, num_runs, started))
            bar.update(static.log_every)
            if stop or peer:
                bar.close()
                raise (Stopped(chunk * static.log_every, static.total_steps, signals.signum) if stop
                       else PeerFailed(peer))
            if out_of_time or (loop.stop_after_chunks is not None and done_here >= loop.stop_after_chunks):
                break
    finally:
        writer.wait()  # a checkpoint still being written is finished first, also when the loop stops early
    bar.close()
    return state


def checkpoint(out: Path, state, step: int, chunk: int, progress: Progress, bound: int, signals: StopSignals,
               writer: BackgroundCheckpoints, background: bool) -> None:
    """Writes the checkpoint after ``chunk`` (``bound``: frames per ring written since the last one). With
    ``background`` and frame rings (a pool's state, whose rings are saved apart and whose other leaves are small
    beside them), what it needs is taken now and it is written by ``writer`` while training goes on; else at once,
    after any still being written. ``signals.checkpointed`` moves on once it is on disk."""

    def written():
        signals.checkpointed = step

    state = keys_to_data(state.replace(env=None))
    writer.wait()  # one at a time: the host holds one interval's frames at most
    if background and progress.rings is not None:
        writer.start(prepare_checkpoint(out, state, chunk, progress.ledger.checkpoint_part(), progress.rings, bound,
                                        taken_now=True), written)
        return
    write_checkpoint(out, state, chunk, progress.ledger.checkpoint_part(), progress.rings, bound)
    written()


LONG_RUN_SECONDS = 86_400.0
"""A run projected to take longer than this (a day) is told so after its first chunk."""


def long_run_note(seconds_per_chunk: float, chunks_left: int, static: StaticConfig, num_runs: int) -> str | None:
    """A line for the user when the chunks left, at the first chunk's rate, take more than a day; else None."""
    seconds = seconds_per_chunk * chunks_left
    if seconds <= LONG_RUN_SECONDS:
        return None
    rate = static.log_every * num_runs / max(seconds_per_chunk, 1e-9)
    return (f"opiq-jax: at the first chunk's rate ({rate:,.0f} env steps/s) the {chunks_left * static.log_every:,} "
            f"steps per run left take about {duration_text(seconds)}, more than a day: stop at any time with Ctrl-C "
            "(a checkpoint is kept) and run the same command to resume, or choose fewer --steps")


def duration_text(seconds: float) -> str:
    """``3.2 days``, ``41 years``: a long duration in the unit that reads best."""
    days = seconds / 86_400
    return f"{days / 365.25:,.0f} years" if days >= 730 else f"{days:,.1f} days"


def progress_fields(metrics: dict, chunks: int, static: StaticConfig, num_runs: int, started: float) -> str:
    """The progress bar's fields (see ``opiq-jax train --help``): throughput, then the median over runs of the
    headline return (greedy test where there is one, else training) and of the distinct states or rooms."""
    rate = chunks * static.log_every * num_runs / max(time.monotonic() - started, 1e-9)
    fields = [f"{rate:,.0f} env steps/s"]
    with warnings.catch_warnings():  # no episode ended yet: an all-NaN median
        warnings.simplefilter("ignore", RuntimeWarning)
        headline = "test_return" if "test_return" in metrics else "train_return"
        value = np.nanmedian(metrics[headline])  # NaN: no run has ended an episode yet, as the table says
        fields.append(f"{headline.split('_')[0]} {'no value' if np.isnan(value) else format(value, '.3g')}")
        for name in ("states_visited", "rooms_visited"):
            if name in metrics:
                fields.append(f"{name.split('_')[0]} {np.nanmedian(metrics[name]):.0f}")
    return ", ".join(fields)


def metric_rows(experiment: Experiment, step: int, metrics: dict[str, np.ndarray], names: tuple[str, ...]) -> list:
    """One chunk's rows of ``metrics.csv``."""
    return [(i, spec.method, spec.setting, spec.seed, step, name, f"{float(metrics[name][i]):.6g}")
            for i, spec in enumerate(experiment.runs) for name in names]


def earlier_revisions_of(earlier: dict, revision: str | None) -> list[str]:
    """The revisions that trained a resumed folder before this invocation, other than ``revision``: a folder
    trained by two commits says so."""
    seen = [*earlier.get("earlier_revisions", []), *([earlier["revision"]] if earlier.get("revision") else [])]
    return [r for i, r in enumerate(seen) if r != revision and r not in seen[:i]]


@dataclass
class RunInfo:
    """``run_info.json``: where and how long a results folder was trained, summed over resumes: the wall-clock
    (compiling, writing checkpoints and all) and the chunks' own time, whose steps per second is the throughput
    (compilation is ahead of the first chunk; checkpoints are written between chunks)."""

    previous_seconds: float
    previous_chunk_seconds: float
    previous_chunks: int
    resumes: int
    log_every: int
    base: dict

    @classmethod
    def start(cls, out: Path, experiment: Experiment, resumed: bool) -> RunInfo:
        try:
            earlier = read_json(out / RUN_INFO_FILE) if resumed and (out / RUN_INFO_FILE).exists() else {}
        except ResultsError:  # an unreadable info file is replaced; the training is not lost for it
            earlier = {}
        device = jax.local_devices()[0]
        base = dict(device=device.device_kind, platform=device.platform, devices=jax.local_device_count(),
                    jax=jax.__version__, runs=len(experiment.runs), total_steps=experiment.static.total_steps,
                    state_bytes_per_run=state_bytes_per_run(experiment.static), **source_revision())
        earlier_revisions = earlier_revisions_of(earlier, base["revision"])
        if earlier_revisions:
            base["earlier_revisions"] = earlier_revisions
        return cls(float(earlier.get("seconds", 0.0)), float(earlier.get("chunk_seconds", 0.0)),
                   int(earlier.get("chunks_timed", 0)), int(earlier.get("resumes", -1)) + 1,
                   experiment.static.log_every, base)

    def write(self, out: Path, chunk: int, started: float, chunk_seconds: float, chunks_timed: int) -> None:
        """Rewrites the file: steps done, seconds so far, and env steps per second over the timed chunks."""
        steps_done = chunk * self.log_every
        seconds, timed = self.previous_chunk_seconds + chunk_seconds, self.previous_chunks + chunks_timed
        rate = timed * self.log_every * self.base["runs"] / seconds if seconds > 0 else None
        info = dict(self.base, steps_done=steps_done, finished=steps_done >= self.base["total_steps"],
                    seconds=round(self.previous_seconds + time.monotonic() - started, 3), resumes=self.resumes,
                    chunk_seconds=round(seconds, 3), chunks_timed=timed, env_steps_per_second=rate)
        atomic_write_bytes(out / RUN_INFO_FILE, json.dumps(info, indent=1).encode())


