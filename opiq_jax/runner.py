"""The thin host loop: compiled chunks in, a results folder out.

A results folder holds

* ``config.json``: the resolved static configuration, the base seed and every run's method, setting
  label, seed and hyperparameters;
* ``metrics.csv``: a tidy table ``run, method, setting, seed, step, metric, value``, appended after
  every chunk;
* ``checkpoint.msgpack`` (and the one before it, ``checkpoint.previous.msgpack``): the whole training
  state (networks, optimisers, replay, counts, keys) and the chunk it belongs to, checksummed;
* ``run_info.json``: the device, the wall-clock (summed over resumes) and the throughput.

Calling :func:`run_experiment` again on the same folder resumes from the checkpoint: rows of
``metrics.csv`` past the checkpoint are dropped and the chunks after it are recomputed, so an
interrupted experiment ends with exactly the parameters and metrics of an uninterrupted one. How each
file is written so that no stop loses it is :mod:`opiq_jax.results`' business; SIGINT and SIGTERM stop
the loop at the next chunk's end with a checkpoint (:class:`Stopped`).

Methods whose exploration parts have networks of their own (DORA, RND, BSP) compile into programs of
their own (:func:`opiq_jax.methods.program_name`). :func:`run_methods` runs such a mix as one program
per group, each in a subfolder named after it (``plain``, ``dora``, ``rnd``, ``bsp``);
:func:`read_metrics` and :func:`is_finished` read such a folder as one experiment. Every run keeps its
seed's keys, so comparisons stay paired.

Every environment goes through the same loop; a pool environment (Montezuma) also starts its pool of
emulators here, and on resume restarts it with fresh episodes (``PoolPath.restart``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .config import StaticConfig, hparams_to_dict, make_hparams, stack_hparams
from .environments import ENVIRONMENT_ORIGINS, environment_spec
from .errors import DoesNotFit, NonFiniteRuns, PeerFailed, ResultsError, Stopped, UsageError
from .methods import METHODS, get_method, origins, program_name, program_parts, run_hparams_off
from .parts import definition, get_part
from .metrics_file import (
    METRICS_HEADER, MetricsLedger, MetricsRecord, append_metric_rows, read_metric_dicts, resume_metrics,
    resume_metrics_without_copy, rows_without_checkpoint, set_aside_uncovered,
)
from .results import (
    CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, PREVIOUS_CHECKPOINT_FILE, RUN_INFO_FILE, FolderLock, Restored,
    atomic_write_bytes, checkpoint_chunk, is_scratch, newest_checkpoint, prepare_folder, read_json, write_checkpoint,
)
from .stop_signals import SignalHandlers
from .trainer import Trainer, make_train


@dataclass(frozen=True)
class RunSpec:
    """One entry of the runs axis."""

    method: str
    setting: str  # a label of the hyperparameters, e.g. "m=0.5,c_action=1"
    seed: int
    hparams: dict  # the method's hyperparameters (environments.method_hparams); others of its program take defaults


@dataclass(frozen=True)
class Experiment:
    """Runs that train as one program: ``static.parts`` must hold every part of the runs' methods (see
    :func:`split_by_program`, which makes such experiments from any mix of methods)."""

    static: StaticConfig
    runs: tuple[RunSpec, ...]
    seed: int = 0
    shared_mask_seed: int = 12345

    def __post_init__(self):
        """A static configuration without parts gets its runs' program's parts, when they make one program."""
        if self.static.parts or not all(r.method in METHODS for r in self.runs):
            return
        if len({program_name(get_method(r.method).part_names) for r in self.runs}) == 1:
            parts = program_parts({r.method for r in self.runs})
            object.__setattr__(self, "static", dataclasses.replace(self.static, parts=parts))

    def hparams(self) -> list[dict]:
        """Every run's hyperparameters as the program needs them: its parts' defaults, the ``off`` values of the
        parts its method does not name (:func:`opiq_jax.methods.run_hparams_off`), then the run's values."""
        options, parts = make_train_options(self.static), self.static.parts
        return [make_hparams(options, {**run_hparams_off(parts, r.method), **r.hparams}) for r in self.runs]

    def to_json(self) -> dict:
        """``config.json``; ``plugins`` names the modules that registered methods not of the paper (if any)."""
        plugins = sorted({*origins(dict.fromkeys(r.method for r in self.runs)),
                          *([ENVIRONMENT_ORIGINS[self.static.env]] if self.static.env in ENVIRONMENT_ORIGINS else [])})
        return {
            "static": dataclasses.asdict(self.static),
            "seed": self.seed,
            "shared_mask_seed": self.shared_mask_seed,
            "runs": [
                {"run": i, "method": r.method, "setting": r.setting, "seed": r.seed, "hparams": hparams_to_dict(hp)}
                for i, (r, hp) in enumerate(zip(self.runs, self.hparams()))
            ],
            **({"plugins": plugins} if plugins else {}),
        }


def make_train_options(static: StaticConfig) -> dict:
    """The hyperparameters of a program with ``static.parts``: the trainer's and its parts'."""
    from .config import hparam_options

    return hparam_options(get_part(name) for name in static.parts)


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


def is_pool(static: StaticConfig) -> bool:
    """Whether ``static.env`` is stepped through a pool of emulators (Montezuma)."""
    return environment_spec(static.env).kind == "pool"


def trainer_for(static: StaticConfig, pool=None) -> tuple[Trainer, callable, callable]:
    """The compiled trainer of ``static``: cached for in-program environments, built around ``pool`` for a pool."""
    if pool is None:
        return compiled_trainer(static)
    trainer = make_train(static, pool)
    return trainer, jax.jit(trainer.init), jax.jit(trainer.train_chunk, donate_argnums=0)


def run_keys_for(experiment: Experiment) -> tuple[jax.Array, jax.Array]:
    """Per-run keys: a run's randomness depends on its seed only, not on its method or setting.

    So the same seed gives every method the same network initialisation, SimHash matrix and action
    randomisation, which makes method comparisons paired.
    """
    base = jax.random.key(experiment.seed)
    seeds = jnp.array([r.seed for r in experiment.runs], jnp.uint32)
    run_keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(seeds)
    if experiment.static.shared_action_mask:
        shared = jax.random.key(experiment.shared_mask_seed)
        env_keys = jax.vmap(lambda _: shared)(seeds)
    else:
        env_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0x0E4))(run_keys)
    return run_keys, env_keys


def split_by_program(experiment: Experiment) -> dict[str, Experiment]:
    """One experiment per compiled program, in order of first appearance: methods whose parts all share
    programs train together; a part with networks of its own (DORA, RND, BSP) makes a program of its own.
    Each program's ``static.parts`` is the union of its methods' parts."""
    groups: dict[str, list[RunSpec]] = {}
    for run in experiment.runs:
        groups.setdefault(program_name(get_method(run.method).part_names), []).append(run)
    return {
        name: dataclasses.replace(
            experiment, runs=tuple(runs),
            static=dataclasses.replace(experiment.static, parts=program_parts({r.method for r in runs})),
        )
        for name, runs in groups.items()
    }


def same_experiment(saved: dict, config: dict) -> bool:
    """Whether a saved ``config.json`` describes ``config``; static fields added since it was written
    (absent from it) count as their defaults, and where its plugins live does not matter."""
    defaults = dataclasses.asdict(StaticConfig())
    static = {k: v for k, v in config["static"].items()
              if k in saved.get("static", {}) or json.loads(json.dumps(v)) != json.loads(json.dumps(defaults.get(k)))}
    def unplugged(c: dict) -> dict:
        return {k: v for k, v in c.items() if k != "plugins"}

    return unplugged(saved) == unplugged(json.loads(json.dumps({**config, "static": static})))


def require_same_experiment(out: Path, experiment: Experiment, say: Callable[[str], None] | None = None) -> None:
    """A one-line :class:`ResultsError` when ``out`` already holds the results of another experiment. The
    configuration of one that never trained (nothing but ``config.json``: it stopped before its first chunk) is
    no result: it is replaced, with a line through ``say``."""
    path = Path(out) / CONFIG_FILE
    if path.exists() and not same_experiment(read_json(path), experiment.to_json()):
        if say is None or any(not is_scratch(e.name) and e.name != CONFIG_FILE for e in Path(out).iterdir()):
            raise ResultsError(f"{out} holds a different experiment: choose another --out or delete it")
        say(f"opiq-jax: {out} held the configuration of another experiment, which never trained: replacing it")


PROGRAM_MODES = ("sequential", "parallel")


def run_methods(experiment: Experiment, out: str | Path, programs: str = "sequential", keep_states: bool = False,
                **kwargs) -> dict[str, object]:
    """Runs ``experiment`` (any mix of methods) as one program per group; a single program uses ``out`` itself.

    Keyword arguments go to :func:`run_experiment`; ``max_seconds`` bounds the whole call. ``programs``:
    ``sequential`` trains the programs one after another in this process; ``parallel`` trains them at once,
    each in a process of its own (:mod:`opiq_jax.program_processes`; on one GPU under NVIDIA MPS). Returns the
    final state of a single program. Of several trained one after another, each program's state leaves the
    device before the next starts (it needs the memory): with ``keep_states`` its host copy is returned, else
    None (``Results.state`` reads it from the checkpoint). None with ``parallel``.
    """
    if programs not in PROGRAM_MODES:
        raise UsageError(f"programs must be one of {', '.join(PROGRAM_MODES)}, got {programs!r}")
    out = Path(out)
    groups = split_by_program(experiment)
    if len(groups) == 1:
        (name, group), = groups.items()
        return {name: run_experiment(group, out, **kwargs)}
    prepare_folder(out, kind="programs")
    if programs == "parallel":
        return run_in_processes(groups, out, kwargs)
    for name, group in groups.items():  # fail before training anything if some group cannot fit
        check_fits(group.static, len(group.runs))
    max_seconds, started, states = kwargs.pop("max_seconds", None), time.monotonic(), {}
    for name, group in groups.items():
        left = None if max_seconds is None else max_seconds - (time.monotonic() - started)
        if left is not None and left <= 0:
            break
        if not program_finished(out / name):
            state = run_experiment(group, out / name, max_seconds=left, **kwargs)
            states[name] = jax.device_get(state) if keep_states else None
            del state  # its device buffers go with the last reference, before the next program allocates its own
    return states


def program_finished(folder: Path) -> bool:
    """Whether ``folder`` holds a program's configuration and its last chunk (a program to skip on a resume)."""
    return (folder / CONFIG_FILE).exists() and is_finished(folder)


def run_in_processes(groups: dict[str, Experiment], out: Path, options: dict) -> dict[str, object]:
    """:func:`run_methods` with ``programs="parallel"``: checks that the programs' states fit on the device at
    once, then trains every program in a process of its own (this process only waits for them)."""
    from .program_processes import run_programs_at_once

    if options.get("should_stop") is not None:
        raise UsageError("programs='parallel' runs on one host: a run over several hosts trains its programs one "
                         "after another")
    if is_pool(next(iter(groups.values())).static):
        raise UsageError("programs='parallel' is for environments stepped in the program: a pool's emulators "
                         "already take the host's cores")
    plugins = sorted({m for g in groups.values() for m in g.to_json().get("plugins", [])})
    if "__main__" in plugins:
        raise UsageError("programs='parallel' trains each program in a process of its own, which cannot see methods "
                         "or environments registered in a script or notebook: move the registration into a module "
                         "and import it (or pass --plugin MODULE), or train the programs one after another")
    loop = Loop(verbose=options.get("verbose", True))
    # every program's state at once on the device they share (each run's share rounded up: no looser than the sum)
    num_runs = sum(len(g.runs) for g in groups.values())
    total = sum(state_bytes_per_run(g.static) * len(g.runs) for g in groups.values())
    require_fits(-(-total // num_runs), num_runs)
    todo = {name: g for name, g in groups.items() if not program_finished(out / name)}
    run_programs_at_once(todo, out, progress=options.pop("progress", True), say=loop.say, plugins=plugins,
                         **{k: v for k, v in options.items() if k != "should_stop"})
    return {}


def experiment_folders(out: str | Path) -> list[Path]:
    """The results folders of an experiment: ``out`` itself, or every folder below it that holds a config
    (per-structure subfolders, and the per-process folders of a run over several hosts)."""
    out = Path(out)
    if (out / CONFIG_FILE).exists():
        return [out]
    return sorted(config.parent for config in out.rglob(CONFIG_FILE)) if out.is_dir() else []


def process_share(experiment: Experiment, index: int, count: int) -> Experiment:
    """Process ``index`` of ``count``'s share of the runs: every ``count``-th run from ``index``.

    A run's keys depend on its seed only (:func:`run_keys_for`), so it trains the same whichever
    process holds it; interleaving gives every process a similar mix of methods.
    """
    if not 0 <= index < count:
        raise ValueError(f"process index {index} is not in [0, {count})")
    if len(experiment.runs) < count:
        raise ValueError(f"{len(experiment.runs)} runs cannot be shared among {count} processes")
    return dataclasses.replace(experiment, runs=experiment.runs[index::count])


# ------------------------------------------------------------------------------------ memory


def tree_bytes(tree) -> int:
    """Bytes of all leaves of a pytree of arrays or shape structs."""
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def state_bytes_per_run(static: StaticConfig) -> int:
    """Device bytes of one run's training state, from the shapes alone (nothing is allocated). Cached (per config
    and parts): the plan, the runner's memory checks and ``run_info.json`` each ask, and each answer traces the
    whole ``init``."""
    return _state_bytes_per_run(static, registered_parts(static))


@functools.lru_cache(maxsize=64)
def _state_bytes_per_run(static: StaticConfig, parts: tuple) -> int:
    del parts  # part of the cache's key only
    keys = jax.random.split(jax.random.key(0), 1)  # shapes only: eval_shape allocates nothing
    hp = stack_hparams([make_hparams(make_train_options(static))])
    if is_pool(static):
        from .paths.pool import PoolShapes, first_output

        trainer = make_train(static, PoolShapes())
        start = (jnp.zeros((8,), jnp.uint8), first_output(static.envs_per_run))
        return tree_bytes(jax.eval_shape(trainer.init, keys, keys, hp, start).runs)
    return tree_bytes(jax.eval_shape(compiled_trainer(static)[0].init, keys, keys, hp).runs)


def available_device_bytes() -> int:
    """Free memory of the first local device (host RAM for the CPU backend)."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)) * jax.local_device_count()
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


# The donated state, the chunk's temporaries and a checkpoint copy on the host.
MEMORY_HEADROOM = 3.0


def runs_that_fit(per_run: int, free_bytes: int, headroom: float = MEMORY_HEADROOM) -> int:
    """The most states of ``per_run`` bytes that, times ``headroom``, fit in ``free_bytes``."""
    return max(0, int(free_bytes // (per_run * headroom)))


def fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM) -> bool:
    """Whether ``num_runs`` states of ``per_run`` bytes, times ``headroom``, fit in the free device memory."""
    return num_runs <= runs_that_fit(per_run, available_device_bytes(), headroom)


def require_fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM,
                 other_ways: Callable[[int], list[str]] | None = None) -> None:
    """Stops with a one-line :class:`DoesNotFit` when ``num_runs`` states of ``per_run`` bytes do not :func:`fits`,
    naming what would fit: fewer runs, and ``other_ways(free bytes)`` (default: a smaller --buffer-size)."""
    free = available_device_bytes()
    most = runs_that_fit(per_run, free, headroom)
    if num_runs > most:
        need = per_run * num_runs * headroom
        ways = [f"at most {most} runs (fewer seeds or methods)",
                *(other_ways(free) if other_ways else ["a smaller --buffer-size"])]
        raise DoesNotFit(
            f"{num_runs} runs need about {need / 2**30:.1f} GiB ({per_run / 2**20:.1f} MiB each, x{headroom:g} "
            f"headroom) but the device has {free / 2**30:.1f} GiB free: use {', '.join(ways[:-1])} or {ways[-1]}")


def largest_buffer_that_fits(static: StaticConfig, num_runs: int, free: int, headroom: float) -> int | None:
    """The largest ``--buffer-size`` with which ``num_runs`` runs of ``static`` fit in ``free`` bytes (a run's state
    grows linearly with its replay: two sizes measured give the line), or None if none above a batch fits."""
    envs = static.envs_per_run
    smaller = max(static.batch_size + envs, static.rnd_batch, static.buffer_size // 2) // envs * envs
    if smaller >= static.buffer_size:
        return None
    full, half = state_bytes_per_run(static), state_bytes_per_run(dataclasses.replace(static, buffer_size=smaller))
    per_step = (full - half) / (static.buffer_size - smaller)
    if per_step <= 0:
        return None
    buffer = int((free / (headroom * num_runs) - (full - per_step * static.buffer_size)) // per_step) // envs * envs
    while buffer > max(static.batch_size, static.rnd_batch) and not fits_in(static, buffer, num_runs, free, headroom):
        buffer = int(buffer * 0.95) // envs * envs  # the line is a shade optimistic: step down until it fits
    return buffer if buffer > max(static.batch_size, static.rnd_batch) else None


def fits_in(static: StaticConfig, buffer: int, num_runs: int, free: int, headroom: float) -> bool:
    per_run = state_bytes_per_run(dataclasses.replace(static, buffer_size=buffer))
    return num_runs <= runs_that_fit(per_run, free, headroom)


def ways_to_fit(static: StaticConfig, num_runs: int, headroom: float) -> Callable[[int], list[str]]:
    """What else would make ``num_runs`` runs of ``static`` fit in a device's free bytes: a replay size, or devices
    (an environment stepped in the program splits its runs over the local devices; a pool's stay on one)."""
    def ways(free: int) -> list[str]:
        buffer = largest_buffer_that_fits(static, num_runs, free, headroom)
        found = [f"--buffer-size {buffer:,} or less" if buffer else "a smaller --buffer-size (none above a batch fits)"]
        if not is_pool(static):
            per_device = free / jax.local_device_count()
            devices = math.ceil(state_bytes_per_run(static) * num_runs * headroom / per_device)
            found.append(f"{devices} devices like this one (the runs split over them)")
        return found

    return ways


LARGE_STATE_FRACTION = 0.25
"""A state above this fraction of the free memory gets a note before training starts."""


def check_fits(static: StaticConfig, num_runs: int, note: Callable[[str], None] | None = None) -> None:
    """Stops with a one-line message when ``num_runs`` runs cannot fit in device memory; ``note`` is told before
    training how much memory a large state takes and how to make it smaller."""
    per_run = state_bytes_per_run(static)
    headroom = 1.2 if is_pool(static) else MEMORY_HEADROOM  # a pool's replay dominates; its chunks make few temporaries
    require_fits(per_run, num_runs, headroom, ways_to_fit(static, num_runs, headroom))
    total, free = per_run * num_runs, available_device_bytes()
    if note and total > LARGE_STATE_FRACTION * free:
        where = jax.local_devices()[0].platform
        note(f"opiq-jax: {num_runs} run(s) keep {total / 2**30:.1f} GiB of training state in {where} memory "
                   f"({free / 2**30:.1f} GiB free), most of it the replay of {static.buffer_size:,} steps per run: "
                   f"--buffer-size makes it smaller")


# ------------------------------------------------------------------------------------ devices


def shard_over_devices(state, num_runs: int, say: Callable[[str], None] | None = print):
    """Splits the runs axis over all local devices (data parallelism: runs never communicate).

    The step counter is replicated; every leaf of ``state.runs`` is sharded along its leading axis,
    and ``train_chunk`` (jitted without explicit shardings) follows the placement of its input. With
    one device, or a number of runs the devices do not divide, the state stays where it is.
    """
    devices = jax.local_devices()
    if len(devices) == 1:
        return state
    if num_runs % len(devices):
        if say:
            say(f"opiq-jax: {num_runs} runs do not divide over {len(devices)} devices; using one device")
        return state
    mesh = Mesh(np.array(devices), ("runs",))
    by_run, replicated = NamedSharding(mesh, PartitionSpec("runs")), NamedSharding(mesh, PartitionSpec())
    return state.replace(
        step=jax.device_put(state.step, replicated),
        runs=jax.tree.map(lambda x: jax.device_put(x, by_run), state.runs),
    )


# ------------------------------------------------------------------------------------ reading results


def read_metrics(out: str | Path) -> list[dict]:
    """The tidy metrics table of a results folder as a list of dicts (value as float).

    A folder of per-program subfolders (see :func:`run_methods`) reads as one table, run ids numbered on
    across the subfolders.
    """
    out = Path(out)
    folders = experiment_folders(out)
    if not folders:
        if not out.exists():
            raise FileNotFoundError(f"{out} does not exist")
        raise FileNotFoundError(f"{out} holds no results (no {CONFIG_FILE} in it or below it)")
    table, offset = [], 0
    for folder in folders:
        rows = read_metric_dicts(folder)
        for r in rows:
            r["run"], r["seed"], r["step"], r["value"] = (
                offset + int(r["run"]), int(r["seed"]), int(r["step"]), float(r["value"]))
        table += rows
        offset += len(read_json(folder / CONFIG_FILE)["runs"])
    return table


def is_finished(out: str | Path) -> bool:
    """Whether the results folder (every per-program subfolder) holds the metrics of the last chunk and, where it
    keeps a checkpoint, the last chunk's checkpoint (a process killed between the two has not finished)."""
    folders = experiment_folders(out)
    for folder in folders:
        config = read_json(folder / CONFIG_FILE)["static"]
        rows = read_metrics(folder)
        if not rows or max(r["step"] for r in rows) < config["total_steps"]:
            return False
        if (folder / CHECKPOINT_FILE).exists():
            chunk = checkpoint_chunk(folder / CHECKPOINT_FILE)
            if chunk is None or chunk * config["log_every"] < config["total_steps"]:
                return False
    return bool(folders)


# ------------------------------------------------------------------------------------ stopping cleanly


@dataclass(frozen=True)
class Loop:
    """How the host loop behaves: :func:`run_experiment`'s keyword arguments (documented there)."""

    progress: bool = True
    checkpoint_seconds: float = 60.0
    stop_after_chunks: int | None = None
    max_seconds: float | None = None
    stop_on_nonfinite: bool = False
    verbose: bool = True
    should_stop: Callable[[], str | None] | None = None
    track: str = "none"

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
    return environment_spec(static.env).make(static, len(experiment.runs) * static.envs_per_run, seed, **pool_overrides)


def restore_checkpoint(out: Path, experiment: Experiment, hparams, run_keys, env_keys, say) -> Restored | None:
    """The newest sound checkpoint in ``out`` (its state's keys typed again), or None."""
    static = experiment.static
    template_trainer = trainer_for(static, _pool_shapes())[0] if is_pool(static) else compiled_trainer(static)[0]
    typed = jax.eval_shape(template_trainer.init, run_keys, env_keys, hparams, *_start_shapes(experiment))
    typed = typed.replace(env=None)  # a pool's handle is not kept: a resumed run restarts its emulators
    restored = newest_checkpoint(out, jax.eval_shape(keys_to_data, typed), warn=say)
    if restored is None:
        return None
    return dataclasses.replace(restored, state=keys_from_data(jax.tree.map(jnp.asarray, restored.state), typed))


def metrics_at_start(out: Path, experiment: Experiment, restored: Restored | None, say) -> MetricsLedger:
    """``metrics.csv`` as the checkpoint left it (:mod:`opiq_jax.metrics_file`), or none for a start from step 0:
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


def runs_mesh(state) -> Mesh | None:
    """The mesh ``state``'s runs are split over (see :func:`shard_over_devices`), or None on one device."""
    sharding = jax.tree.leaves(state.runs)[0].sharding
    if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
        return sharding.mesh
    return None


def chunk_program(train_chunk: Callable, state, partitioner: str = "per-device") -> Callable:
    """``train_chunk`` jitted (its state donated) for ``state``'s placement; the metrics follow the runs.

    With the runs split over several devices, each device runs the chunk on its own runs (``shard_map``):
    runs never communicate, so the program needs no collective. Leaving the split to XLA's partitioner
    (``partitioner="gspmd"``, kept for experiments/multi_gpu_scaling.py) gathers the inputs of every
    custom call, which it cannot partition: the maze's Pallas convolutions then ran on all runs on every
    device, and two H100s gave 1.31x one instead of about 1.9x.
    """
    shardings = jax.tree.map(lambda x: x.sharding, state)
    runs_sharding = jax.tree.leaves(shardings.runs)[0]
    mesh = runs_mesh(state)
    if mesh is None or partitioner == "gspmd":
        return jax.jit(train_chunk, donate_argnums=0, out_shardings=(shardings, runs_sharding))
    if partitioner != "per-device":
        raise ValueError(f"partitioner must be per-device or gspmd, got {partitioner!r}")
    specs = jax.tree.map(lambda x: x.sharding.spec, state)
    per_device = jax.shard_map(train_chunk, mesh=mesh, in_specs=(specs,), out_specs=(specs, PartitionSpec("runs")),
                               check_vma=False)  # the step counter is computed alike on every device
    return jax.jit(per_device, donate_argnums=0, out_shardings=(shardings, runs_sharding))


def report_nonfinite(metrics: dict, experiment: Experiment, step: int, flagged: set[int], loop: Loop) -> None:
    """Says which runs became non-finite in this chunk (once each); raises :class:`NonFiniteRuns` if asked to."""
    new = [i for i in np.flatnonzero(np.asarray(metrics["nonfinite"]) > 0) if i not in flagged]
    for i in new:
        spec = experiment.runs[i]
        loop.say(f"opiq-jax: run {i} ({spec.method}, {spec.setting}, seed {spec.seed}) has NaN or infinite loss, "
                 f"Q-values or parameters by step {step:,}; "
                 + ("stopping" if loop.stop_on_nonfinite else "the other runs go on"))
    flagged.update(new)
    if new and loop.stop_on_nonfinite:
        raise NonFiniteRuns(f"{len(new)} run(s) became non-finite by step {step:,} (--stop-on-nonfinite); "
                            "the metrics and checkpoint up to this chunk are kept")


def run_experiment(experiment: Experiment, out: str | Path, progress: bool = True, checkpoint_seconds: float = 60.0,
                   stop_after_chunks: int | None = None, max_seconds: float | None = None,
                   stop_on_nonfinite: bool = False, verbose: bool = True,
                   should_stop: Callable[[], str | None] | None = None, track: str = "none",
                   **pool_overrides) -> object:
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
      pool_overrides: options of a pool environment's emulators (EnvPool's, e.g. ``max_episode_steps``).
    Returns the final training state (None when the folder's metrics show the run finished and it keeps no
    checkpoint: nothing was trained). Raises :class:`Stopped` after SIGINT or SIGTERM (progress checkpointed).
    """
    loop = Loop(progress, checkpoint_seconds, stop_after_chunks, max_seconds, stop_on_nonfinite, verbose, should_stop,
                track)
    out = prepare_folder(Path(out))
    with FolderLock(out, warn=loop.say), StopSignals(loop.say) as signals:
        return _train(experiment, out, signals, loop, pool_overrides)


@dataclass
class Progress:
    """Where a run stands when this call starts training it."""

    chunk: int  # chunks done (0: from the start)
    resumed: bool  # restored from a checkpoint
    ledger: MetricsLedger  # what metrics.csv holds, for the checkpoints (metrics_file)


def _start(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, pool_overrides: dict):
    """``(trainer, state, progress)``: a new or restored state, its pool started, placed on the devices; None when
    the folder's metrics show the run finished (its checkpoints deleted: nothing to train, nothing to resume)."""
    static = experiment.static
    require_same_experiment(out, experiment, loop.say)
    check_fits(static, len(experiment.runs), note=loop.say)
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
    signals.checkpointed, signals.total = progress.chunk * static.log_every, static.total_steps
    pool = start_pool(experiment, progress.chunk, **pool_overrides) if is_pool(static) else None
    trainer, init, _ = trainer_for(static, pool)
    if restored is None:
        state = init(run_keys, env_keys, hparams, *(() if pool is None else (pool.reset(),)))
    else:
        state = restored.state if pool is None else trainer.path.restart(restored.state, pool)
    if pool is None:  # a pool's emulators are one process's: its runs stay on one device
        state = shard_over_devices(state, len(experiment.runs), loop.say)
    return trainer, state, progress


def _train(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, pool_overrides: dict):
    """The body of :func:`run_experiment`, its folder prepared and locked, its signals handled."""
    static, num_runs = experiment.static, len(experiment.runs)
    started = _start(experiment, out, signals, loop, pool_overrides)
    if started is None:
        return None
    trainer, state, progress = started
    step_chunk = compile_chunk(trainer, state, f"{static.env} ({num_runs} runs; parts: {', '.join(static.parts) or 'none'})",
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
    from .tracking import make_tracker as make

    return make(kind, out, experiment.to_json())


def _chunks(experiment: Experiment, out: Path, signals: StopSignals, loop: Loop, trainer: Trainer, state,
            progress: Progress, step_chunk, info: RunInfo, tracker):
    """Trains chunk after chunk from ``progress.chunk``: metrics appended, checkpoints written, stops honoured."""
    static, num_runs, chunk = experiment.static, len(experiment.runs), progress.chunk
    num_chunks = static.total_steps // static.log_every
    bar = tqdm(total=static.total_steps, initial=chunk * static.log_every, unit="step", disable=not loop.progress,
               desc=f"{static.env} x{num_runs} runs", dynamic_ncols=True)
    started, last_checkpoint, chunk_seconds, done_here, flagged = time.monotonic(), time.monotonic(), 0.0, 0, set()
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
        if chunk == num_chunks or out_of_time or stop or due or nonfinite or peer:
            write_checkpoint(out, keys_to_data(state.replace(env=None)), chunk, progress.ledger.checkpoint_part())
            last_checkpoint, signals.checkpointed = time.monotonic(), chunk * static.log_every
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
            raise Stopped(chunk * static.log_every, static.total_steps, signals.signum) if stop else PeerFailed(peer)
        if out_of_time or (loop.stop_after_chunks is not None and done_here >= loop.stop_after_chunks):
            break
    bar.close()
    return state


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
        fields.append(f"{headline.split('_')[0]} {np.nanmedian(metrics[headline]):.3g}")
        for name in ("states_visited", "rooms_visited"):
            if name in metrics:
                fields.append(f"{name.split('_')[0]} {np.nanmedian(metrics[name]):.0f}")
    return ", ".join(fields)


def metric_rows(experiment: Experiment, step: int, metrics: dict[str, np.ndarray], names: tuple[str, ...]) -> list:
    """One chunk's rows of ``metrics.csv``."""
    return [(i, spec.method, spec.setting, spec.seed, step, name, f"{float(metrics[name][i]):.6g}")
            for i, spec in enumerate(experiment.runs) for name in names]


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
                    state_bytes_per_run=state_bytes_per_run(experiment.static))
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


def _pool_shapes():
    from .paths.pool import PoolShapes

    return PoolShapes()


def _start_shapes(experiment: Experiment) -> tuple:
    """What ``init`` takes after the hyperparameters: nothing, or a pool's first output (as zeros, for shapes)."""
    if not is_pool(experiment.static):
        return ()
    from .paths.pool import first_output

    return ((jnp.zeros((8,), jnp.uint8), first_output(len(experiment.runs) * experiment.static.envs_per_run)),)


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def keys_to_data(tree):
    """Typed PRNG keys as their raw ``uint32`` data, so that the tree serialises."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def keys_from_data(tree, typed_template):
    """Inverse of :func:`keys_to_data`, guided by a tree that still has typed keys."""
    return jax.tree.map(lambda x, t: jax.random.wrap_key_data(x) if _is_key(t) else x, tree, typed_template)
