"""The Python API: train, sweep, load, re-run and bench from a notebook or a script.

Everything the command line does is here too, with the same options and the same checks (a bad value
raises :class:`~opiq_jax.common.errors.UsageError` naming the option as written in Python)::

    import opiq_jax

    results = opiq_jax.train(env="chain", methods=["opiq", "dqn_pc"], seeds=4, steps=20_000, chain_length=20)
    print(results.summary("test_return"))
    state = opiq_jax.load(results.folder).state()   # Q-network parameters and counts of every run

Options are passed by name as keyword arguments: every static option (``steps``, ``chain_length``,
``buffer_size``, ``precision``, ``bsp_heads``, ...) and every hyperparameter (``m``, ``c_action``, ``beta``,
...); :func:`options` lists them with their documentation.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np

from .agent.cell_values import cell_values
from .agent.weights import master_params
from .benchmark.options import Bench
from .benchmark.throughput import run_bench
from .common.config import LOOP_DEFAULTS, STATIC_OPTIONS, SWEEP_DEFAULTS, Option, stack_hparams
from .common.errors import ResultsError, UsageError
from .registry import environments as environment_registry, methods as method_registry
from .registry.environments import ENVIRONMENTS, GYMNAX
from .registry.methods import METHODS
from .reporting.plotting import curves, markdown_table, plot_folder, summary_table
from .host.host_loop import restore_checkpoint
from .host.plan import (
    check_count, check_flag, check_interval, check_out, default_out, every_hparam, experiment_from_configs,
    plan_experiment, plan_rerun, settable_static,
)
from .host.sweeping import load_preset, plan_static, run_sweep, sweep_rows
from .host.train_programs import run_methods
from .registry.environments import started_by_host
from .runs.compiled import compiled_trainer
from .runs.experiment import run_keys_for
from .runs.results_folder import experiment_folders, is_finished, read_metrics
from .store.files import (
    older_layout, read_json, removed_if_refused, run_files_without_config, why_absent, without_config,
)


def plain_numbers(value: Any) -> Any:
    """``value`` with numpy's and JAX's numbers and arrays as Python's (in lists, tuples and mappings too): a
    researcher's ``np.int64`` seed or ``jnp.float32`` ``m`` goes through the checks a Python number does and is
    recorded as plain JSON. A float32 is read as the decimal it prints as (``jnp.float32(0.1)`` is 0.1)."""
    if isinstance(value, np.generic):
        return float(str(value)) if isinstance(value, np.floating) else value.item()
    if isinstance(value, (np.ndarray, jax.Array)):
        return plain_numbers(np.asarray(value)[()]) if np.ndim(value) == 0 else [plain_numbers(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_numbers(v) for v in value) if type(value) in (list, tuple) else value
    return value


def takes_numpy_numbers(function: Callable) -> Callable:
    """``function`` (a public one) with every argument through :func:`plain_numbers`."""
    @functools.wraps(function)
    def public(*args: Any, **kwargs: Any) -> Any:
        return function(*plain_numbers(args), **plain_numbers(kwargs))

    return public


def check_path(name: str, value: Any) -> Path:
    """A path argument (str or pathlib.Path, not empty), or a one-line error."""
    path = check_out(value, name)
    if path is None:
        raise UsageError(f"{name} must be a path (str or pathlib.Path), got None")
    return path


@dataclasses.dataclass(frozen=True)
class FinalState:
    """The trained state of one program of a results folder, as of its newest checkpoint.

    Every array has a leading runs axis, in the order of ``runs`` (each run's method, setting and seed).
    """

    program: str
    """The program's folder name (``.`` for a single program; ``plain``, ``dora``, ``rnd``, ``bsp``)."""
    step: int
    """Environment steps per run done when the checkpoint was written."""
    runs: tuple[dict, ...]
    """Each run's ``method``, ``setting``, ``seed`` and ``hparams``, from ``config.json``."""
    params: Any
    """The Q-network's parameters in float32 (a Flax parameter tree; packed storage unpacked)."""
    counts: Any
    """The visit counts: ``counts.sketch`` is the count-min sketch ``int32[runs, actions, rows, width]`` (None when
    no part of the program counts)."""
    state: Any
    """The whole per-run state (``RunState``): target network, optimiser, replay, parts' states, keys."""


@dataclasses.dataclass(frozen=True)
class Results:
    """A results folder: its metrics, its resolved configuration and its trained state."""

    folder: Path

    @property
    def is_sweep(self) -> bool:
        """Whether the folder is a sweep's (batches and a ranking of settings)."""
        return (self.folder / "preset.json").exists()

    @functools.cached_property
    def metrics(self) -> list[dict]:
        """The tidy metrics table: one dict per (run, step, metric) with ``run, method, setting, seed, step,
        metric, value`` (a sweep's padding runs left out)."""
        return sweep_rows(self.folder) if self.is_sweep else read_metrics(self.folder)

    @functools.cached_property
    def config(self) -> dict:
        """The resolved configuration: ``static`` (every static option), ``seed`` and ``runs`` (each run's method,
        setting, seed and hyperparameters), with ``programs`` naming each program's parts."""
        folders = experiment_folders(self.folder)
        configs = [read_json(f / "config.json") for f in folders]
        if len(configs) == 1:
            return configs[0]
        return {**configs[0], "runs": [r for c in configs for r in c["runs"]],
                "programs": {str(f.relative_to(self.folder)): c["static"].get("parts", [])
                             for f, c in zip(folders, configs)}}

    @property
    def finished(self) -> bool:
        """Whether every run reached its last step."""
        return is_finished(self.folder)

    def programs(self) -> list[str]:
        """The programs' folder names (``.`` when the folder is one program)."""
        return [str(f.relative_to(self.folder)) for f in experiment_folders(self.folder)]

    @takes_numpy_numbers
    def state(self, program: str | None = None) -> FinalState:
        """The trained state of ``program`` (needed only when the folder holds several) from its newest sound
        checkpoint."""
        names = self.programs()
        if program is None and len(names) > 1:
            raise UsageError(f"{self.folder} holds {len(names)} programs: pass program= one of {', '.join(names)}")
        name = program if program is not None else names[0]
        if name not in names:
            raise UsageError(f"{self.folder} has no program {name!r}: use one of {', '.join(names)}")
        return read_final_state(self.folder / name, name)

    @takes_numpy_numbers
    def cell_values(self, program: str | None = None) -> dict[str, np.ndarray]:
        """What every run of ``program`` believes at every cell, for an environment whose states can be listed (the
        chain, the maze), from its newest sound checkpoint: arrays ``[runs, cells, actions]`` in cell-id order,
        runs as in ``state(program).runs``.

        ``q`` and ``q_target`` (the online and target networks), ``counts`` (the visit counts as the agent reads
        them when acting; absent where no part counts), ``acting`` (``Q + C_action / (N + 1)^M``, what the run acts
        on) and ``bootstrap`` (``Q_target + C_bootstrap / (N + 1)^M``, what its targets bootstrap from); without the
        optimism bonus these two are ``q`` and ``q_target``. Walls are cells too: mask them with the environment's
        own layout (``opiq_jax.envs.maze.Maze().walls``)."""
        final = self.state(program)
        static = experiment_from_configs(self.folder / final.program).static
        trainer = None if started_by_host(static.env) else compiled_trainer(static)[0]  # needs its emulators
        if trainer is None or not trainer.stepping.has_cell_table:
            raise UsageError(f"{self.folder}: {static.env}'s states cannot be listed, so it has no cell values")
        values = jax.jit(lambda runs: cell_values(trainer, runs))(final.state)
        return {name: np.asarray(v) for name, v in jax.device_get(values).items()}

    @takes_numpy_numbers
    def summary(self, metric: str = "test_return") -> str:
        """A markdown table per method (and setting): the final median with quartiles and the IQM of the area
        under the curve with its 95% confidence interval over seeds."""
        require_metric(self.metrics, metric, self.folder)
        return markdown_table(summary_table(self.metrics, metric), metric)

    @takes_numpy_numbers
    def curves(self, metric: str) -> dict[str, dict]:
        """Per method (and setting): ``steps``, the per-seed ``values`` and the median with its quartiles."""
        require_metric(self.metrics, metric, self.folder)
        return curves(self.metrics, metric)

    @takes_numpy_numbers
    def plot(self, metrics: str | Sequence[str] | None = None, **kwargs: Any) -> list[Path]:
        """Draws one PNG per metric (a name or a list of names; None: the environment's headline metrics) into the
        folder (keywords go to ``opiq_jax.reporting.plotting.plot_folder``)."""
        return list(plot_folder(self.folder, *(() if metrics is None else (metrics,)), **kwargs))

    def nonfinite_runs(self) -> list[dict]:
        """The runs whose loss, Q-values or parameters became NaN or infinite (``run, method, setting, seed``)."""
        flagged = {r["run"]: r for r in self.metrics if r["metric"] == "nonfinite" and r["value"] > 0}
        return [{k: flagged[run][k] for k in ("run", "method", "setting", "seed")} for run in sorted(flagged)]

    def ranking(self) -> list[dict]:
        """A sweep's settings per method, best first, by the area under the median curve (``settings.csv``)."""
        path = self.folder / "settings.csv"
        if not path.exists():
            raise ResultsError(f"{self.folder} holds no settings.csv: it is not a finished sweep")
        return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def require_metric(rows: list[dict], metric: str, folder: Path) -> None:
    """A one-line error for a metric the folder does not have, listing the ones it has."""
    names = sorted({r["metric"] for r in rows})
    if metric not in names:
        raise UsageError(f"{folder} has no metric {metric!r}: it has {', '.join(names)}")


def read_final_state(folder: Path, name: str) -> FinalState:
    """The state in ``folder``'s newest sound checkpoint, with the arrays' shapes from its ``config.json``."""
    require_this_versions_config(folder, "restore its state")
    experiment = experiment_from_configs(folder)
    hparams = stack_hparams(experiment.hparams())
    run_keys, env_keys = run_keys_for(experiment)
    restored = restore_checkpoint(folder, experiment, hparams, run_keys, env_keys, say=print)
    if restored is None:
        raise ResultsError(f"{folder} holds no checkpoint (none written yet, or deleted): its metrics are all it has")
    state, chunk = restored.state, restored.chunk
    runs = tuple({"method": r.method, "setting": r.setting, "seed": r.seed, "hparams": dict(r.hparams)}
                 for r in experiment.runs)
    return FinalState(program=name, step=chunk * experiment.static.log_every, runs=runs,
                      params=master_params(experiment.static, state.runs), counts=state.runs.counts, state=state.runs)


def require_this_versions_config(folder: Path, to_do: str) -> None:
    """A one-line :class:`ResultsError` when ``folder``'s ``config.json`` was written by an older opiq-jax whose
    configuration this version cannot build (its metrics still read), saying which version and what still works."""
    for config in experiment_folders(folder):
        older = older_layout(read_json(config / "config.json"))
        if older:
            raise ResultsError(f"{config / 'config.json'} was written by {older.written_by}: this version reads its "
                               f"metrics (summary, curves, plot) but cannot {to_do}; {older.reads_it} can")


@takes_numpy_numbers
def load(folder: str | Path) -> Results:
    """The results folder ``folder`` (written by :func:`train`, :func:`sweep` or the command line)."""
    folder = check_path("folder", folder)
    if not folder.exists():
        raise ResultsError(f"{folder} {why_absent(folder)}")
    if not experiment_folders(folder):
        if run_files_without_config(folder):
            raise ResultsError(f"{without_config(folder)}: put config.json back to read it")
        raise ResultsError(f"{folder} holds no results (no config.json in it or below it)")
    return Results(folder)


def run_planned(experiment, out: Path, *, progress: bool = LOOP_DEFAULTS["progress"],
                checkpoint_every: float = LOOP_DEFAULTS["checkpoint_every"],
                stop_on_nonfinite: bool = LOOP_DEFAULTS["stop_on_nonfinite"], track: str = LOOP_DEFAULTS["track"],
                verbose: bool = True, should_stop: Callable[[], str | None] | None = None,
                max_minutes: float | None = None, programs: str = LOOP_DEFAULTS["programs"]) -> Results:
    """Trains (or resumes) ``experiment`` into ``out``: one program per group of methods (``programs``: see
    :func:`train`)."""
    check_loop_options(progress=progress, checkpoint_every=checkpoint_every, stop_on_nonfinite=stop_on_nonfinite,
                       verbose=verbose, max_minutes=max_minutes)
    require_this_versions_config(Path(out), "resume it")
    with removed_if_refused(Path(out)):
        run_methods(experiment, out, progress=progress, checkpoint_seconds=checkpoint_every,
                    stop_on_nonfinite=stop_on_nonfinite, track=track, verbose=verbose, should_stop=should_stop,
                    max_seconds=None if max_minutes is None else 60.0 * max_minutes, programs=programs)
    return Results(Path(out))


def check_loop_options(*, checkpoint_every: float, max_minutes: float | None = None, **flags: Any) -> None:
    """One-line errors for the loop's options: intervals finite and not negative, flags True or False."""
    check_interval("checkpoint_every", checkpoint_every)
    if max_minutes is not None:
        check_interval("max_minutes", max_minutes, positive=True)
    for name, value in flags.items():
        check_flag(name, value)


def environment_name(env: Any) -> str:
    """``env``'s registered name: a name as given; an environment object with gymnax's API, or an ``(env, params)``
    pair, registered first under its class's name (:func:`~opiq_jax.registry.environments.register_environment`)."""
    obj, params = env if isinstance(env, tuple) and len(env) == 2 else (env, None)
    if not (hasattr(obj, "reset") and hasattr(obj, "step")):
        return env  # a name, or something the plan refuses as one
    try:
        return environment_registry.register_environment(obj, params=params, origin="__main__").name
    except (ValueError, TypeError, AttributeError) as e:
        raise UsageError(f"env: {type(obj).__name__} is not an environment with gymnax's API: "
                         f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None


@takes_numpy_numbers
def train(env: Any = "chain", methods: Sequence[str] = ("opiq",), seeds: int | Sequence[int] = 4, *,
          steps: int | None = None, out: str | Path | None = None, grid: Mapping[str, Sequence[float]] | None = None,
          seed: int = 0, progress: bool = LOOP_DEFAULTS["progress"],
          checkpoint_every: float = LOOP_DEFAULTS["checkpoint_every"],
          stop_on_nonfinite: bool = LOOP_DEFAULTS["stop_on_nonfinite"], track: str = LOOP_DEFAULTS["track"],
          verbose: bool = True, max_minutes: float | None = None, programs: str = LOOP_DEFAULTS["programs"],
          **options: Any) -> Results:
    """Trains ``methods`` x ``seeds`` (x every setting of ``grid``) on ``env`` as few compiled programs as possible.

    Args:
      env: ``chain``, ``maze``, ``montezuma`` (EnvPool), ``gymnax:NAME``, a registered environment, or an
        environment object with gymnax's API (or an ``(env, params)`` pair: navix's ``ToGymnax.wrap(...)``, say),
        registered under its class's name.
      methods: registered methods (see :func:`methods`); each starts from the paper's setting for ``env``.
      seeds: independent runs per method and setting: a number (seeds 0 to n - 1) or a list of seeds.
      steps: environment steps per run (default: the environment's, e.g. 100k on the chain).
      out: the results folder (default ``results/<env>-<methods>-seeds<N>-steps<S>``); an existing folder of the
        same experiment is resumed, one of another experiment is refused.
      grid: hyperparameters to sweep, ``{"m": [0.5, 2.0], "c_action": [1, 10]}``: every combination runs for every
        method that has them, side by side in the same program.
      seed: the base seed; run ``i`` of every method uses seed ``i`` under it (comparisons are paired).
      progress: show a progress bar.
      checkpoint_every: seconds between checkpoints (0: after every chunk).
      stop_on_nonfinite: stop everything when a run's numbers become NaN or infinite (default: flag it and go on).
      track: ``none`` or ``tensorboard`` (the ``tracking`` extra): per-method aggregates per chunk.
      verbose: print a line for each thing worth knowing (compiling, large states, non-finite runs).
      max_minutes: return after the first chunk that ends past this many minutes, a checkpoint written (call
        again to go on): for time-boxed jobs. Check ``Results.finished``.
      programs: when ``methods`` make several programs (DORA, RND and BSP each add one): ``sequential`` trains
        them one after another; ``parallel`` at once, each in a process of its own. On one GPU, ``parallel`` is
        faster only under NVIDIA MPS (``nvidia-cuda-mps-control -d``); without it the processes take turns.
      options: any option by name: static ones (``chain_length``, ``buffer_size``, ``precision``, ...) and
        hyperparameters (``m``, ``c_action``, ...), checked against their declarations (:func:`options`).

    Returns the :class:`Results` of ``out``. Raises :class:`~opiq_jax.common.errors.UsageError` for a bad input
    (nothing is written), :class:`~opiq_jax.common.errors.Stopped` after SIGINT or SIGTERM (progress kept).
    """
    out = check_out(out)
    check_loop_options(progress=progress, checkpoint_every=checkpoint_every, stop_on_nonfinite=stop_on_nonfinite,
                       verbose=verbose, max_minutes=max_minutes)
    env = environment_name(env)
    if steps is not None:
        options = {"steps": steps, **options}
    experiment = plan_experiment(env, methods, seeds, seed=seed, grid=grid, options=options)
    if out is None:
        out = default_out(env, tuple(dict.fromkeys(r.method for r in experiment.runs)), seeds,
                          experiment.static.total_steps)
    return run_planned(experiment, Path(out), progress=progress, checkpoint_every=checkpoint_every,
                       stop_on_nonfinite=stop_on_nonfinite, track=track, verbose=verbose, max_minutes=max_minutes,
                       programs=programs)


@takes_numpy_numbers
def rerun(config: str | Path, out: str | Path | None = None, *, progress: bool = LOOP_DEFAULTS["progress"],
          checkpoint_every: float = LOOP_DEFAULTS["checkpoint_every"], track: str = LOOP_DEFAULTS["track"],
          verbose: bool = True) -> Results:
    """Trains the experiment a saved ``config.json`` (or a results folder) describes, exactly, into ``out``
    (default: ``<folder>-rerun`` beside the original). Same inputs on a CPU: the same numbers. On a GPU some
    programs are not bit-reproducible run to run (the maze's bfloat16 ones differed from the first chunk on,
    ``docs/results/figure-programs``): compare their reruns statistically (``experiments/tools/before_after.py``)."""
    source = check_path("config", config)
    folder = source.parent if source.is_file() else source
    require_this_versions_config(folder, "re-run it")
    experiment = plan_rerun(source)
    out = check_out(out) or folder.with_name(folder.name + "-rerun")
    return run_planned(experiment, out, progress=progress, checkpoint_every=checkpoint_every, track=track,
                       verbose=verbose)


@takes_numpy_numbers
def sweep(preset: str | Path | Mapping[str, Any], out: str | Path | None = None, *, max_batch_runs: int | None = None,
          precision: str | None = None, progress: bool = SWEEP_DEFAULTS["progress"],
          checkpoint_every: float = SWEEP_DEFAULTS["checkpoint_every"],
          track: str = SWEEP_DEFAULTS["track"], seeds: int | None = None, steps: int | None = None) -> Results:
    """Runs (or resumes) a sweep preset: a shipped name (``chain_opiq``, ``maze_baselines``, ...), a JSON file, or
    a dict written like one. Ranks each method's settings by the area under the median curve (the paper's
    protocol) into ``settings.csv`` and ``best.md``; :meth:`Results.ranking` reads them. ``seeds`` and ``steps``
    replace the preset's, to try it small (the default folder then names them; where the preset's ``log_every``
    does not divide ``steps``, the nearest smaller chunk that does is used, and a line says so)."""
    loaded = load_preset(preset, seeds=seeds, steps=steps)
    out = check_out(out)
    if max_batch_runs is not None:
        check_count("max_batch_runs", max_batch_runs)
    check_loop_options(progress=progress, checkpoint_every=checkpoint_every)
    if precision is not None:
        STATIC_OPTIONS["precision"].check(precision)
        loaded = dataclasses.replace(loaded, static={**loaded.static, "precision": precision})
    if out is None:
        suffix = f"-{precision}" if precision and precision != "float32" else ""
        if seeds is not None or steps is not None:  # a trial run of a preset keeps apart from the preset's own folder
            suffix += f"-seeds{loaded.seeds}-steps{plan_static(loaded).total_steps}"
        out = Path("results") / f"sweep-{loaded.name}{suffix}"
    with removed_if_refused(Path(out)):
        run_sweep(loaded, Path(out), progress=progress, max_batch_runs=max_batch_runs,
                  checkpoint_seconds=checkpoint_every, track=track)
    return Results(Path(out))


@takes_numpy_numbers
def bench(**options: Any) -> dict[str, Any]:
    """Runs ``opiq-jax bench`` with ``options`` (its command-line options by name, e.g. ``envs=("chain",)``,
    ``max_runs=64``); returns the report it also writes to ``out`` (``bench.json``, ``bench.md``)."""
    known = {f.name for f in dataclasses.fields(Bench)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"unknown bench option {', '.join(unknown)}: use {', '.join(sorted(known))}")
    if "out" in options:
        options["out"] = Path(options["out"])
    args = Bench(**options)
    args.validate()
    return run_bench(args)


class NamedLikeAModule:
    """An API function named as a module of the flat layout was (``opiq_jax.methods``, ``opiq_jax.environments``, now
    in ``opiq_jax.registry``). ``from opiq_jax import environments`` gives the function; a plugin written against the
    module that asks it for one of the module's names is told where the module is now, in one line, instead of
    "'function' object has no attribute". One meaning per name."""

    def __init__(self, function: Callable[[], dict[str, str]], module: ModuleType):
        functools.update_wrapper(self, function)
        self.module = module

    def __call__(self) -> dict[str, str]:
        return self.__wrapped__()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not hasattr(self.module, name):
            raise AttributeError(f"opiq_jax.{self.__wrapped__.__name__} has no attribute {name!r}")
        raise AttributeError(f"opiq_jax.{self.__wrapped__.__name__} is the API's function that lists them, not the "
                             f"module {self.module.__name__} that has {name}: import it from there")


def named_like(module: ModuleType) -> Callable[[Callable], NamedLikeAModule]:
    """The decorator that makes a function :class:`NamedLikeAModule` of ``module``."""
    return lambda function: NamedLikeAModule(function, module)


@named_like(method_registry)
def methods() -> dict[str, str]:
    """Every registered method and its one-line description."""
    return {name: m.description for name, m in METHODS.items()}


@named_like(environment_registry)
def environments() -> dict[str, str]:
    """Every registered environment and its description (plus ``gymnax:NAME``)."""
    return {**{name: e.description for name, e in ENVIRONMENTS.items()}, GYMNAX.name: GYMNAX.description}


OPTION_KINDS = ("all", "static", "hyperparameters")


@takes_numpy_numbers
def options(kind: str = "all") -> dict[str, Option]:
    """Every option :func:`train` takes by name, with its documentation, range and default: ``kind="static"``
    only the static ones (what the program is), ``"hyperparameters"`` only the numbers that may differ between
    runs of one program (each method's paper setting unless given)."""
    if kind not in OPTION_KINDS:
        raise UsageError(f"kind must be one of {', '.join(OPTION_KINDS)}, not {kind!r}")
    static, hparams = settable_static(), every_hparam()
    return {"all": {**static, **hparams}, "static": static, "hyperparameters": hparams}[kind]


__all__ = ["FinalState", "Results", "bench", "environments", "load", "methods", "options", "rerun", "sweep", "train"]
