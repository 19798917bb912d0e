"""The ``opiq-jax`` command line: ``train``, ``sweep``, ``plot`` and ``bench``.

``train``'s options are generated from their one declaration (:mod:`opiq_jax.common.config` and every registered
exploration part's hyperparameters), so the command line, the presets and the Python API share names,
documentation, defaults and checks; the method and environment lists come from the registries. Values are
checked before anything is compiled; a bad one stops with a single ``opiq-jax: error: ...`` line, exit code 2.
A run stopped by SIGINT or SIGTERM prints one line and exits with 128 + the signal's number.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from .api import require_this_versions_config, run_planned, sweep as run
from .benchmark.options import Bench
from .benchmark.throughput import run_bench
from .common.config import LOOP_OPTIONS, STATIC_OPTIONS, SWEEP_OPTIONS, Option
from .common.errors import NonFiniteRuns, PeerFailed, ProgramFailed, Stopped, UsageError, command_line_message
from .registry.methods import METHODS
from .reporting.plotting import plot_folder
from .host import multihost
from .host.stop_signals import EndingAtOnce
from .host.plan import (
    check_interval, check_out, default_out, describe, every_hparam, option_defaults, parse_grid, plan_experiment,
    plan_rerun, settable_static,
)
from .runs.experiment import process_share
from .runs.results_folder import is_finished

PROGRESS_FIELDS = (
    "The progress bar shows, after each chunk: env steps/s (every run's environment steps per second since this "
    "call started training; compiling comes before), test (or train): the median over runs of the chunk's greedy "
    "test return (or training return; no value until an episode has ended), and states (or rooms): the median "
    "number of distinct states (rooms) visited so far.")

TRAIN_DOC = (
    "Train one or more methods, many seeds each, as one compiled program; write a results folder (config.json, "
    "metrics.csv, checkpoints, run_info.json, plots). Running the same command again resumes it; SIGINT or SIGTERM "
    "stops it at the next chunk with a checkpoint. " + PROGRESS_FIELDS)

def loop_field(name: str) -> tuple[str, Any, Any, str]:
    """A loop option's field as its declaration gives it (:data:`opiq_jax.common.config.LOOP_OPTIONS`)."""
    option = LOOP_OPTIONS[name]
    return name, option.value_type, option.default, option.doc


LOOP_FIELDS: list[tuple[str, Any, Any, str]] = [
    ("seeds", int, 4, "Independent runs per method (and grid setting)."),
    ("out", str | None, None, "Results folder (default results/<env>-<methods>-seeds<N>-steps<S>). An existing folder "
     "of the same experiment is resumed from its newest checkpoint; one of another experiment, or one holding files "
     "opiq-jax did not write, is refused."),
    ("grid", tuple[str, ...], (), "Hyperparameters to sweep side by side in the same program, as NAME=V1,V2 pairs "
     "(--grid m=0.5,2 c_action=1,10): every combination runs for every method that has them."),
    ("config", Path | None, None, "Re-run the experiment a saved config.json (or results folder) describes, exactly; "
     "combine with --out (default: <folder>-rerun), not with experiment options."),
    ("seed", int, 0, "Base seed; run i of every method uses seed i under it (method comparisons are paired)."),
    ("max_minutes", float | None, None, "Stop after the first chunk that ends past this many minutes, with a "
     "checkpoint, and say how far it got; the same command goes on from there (for time-boxed jobs)."),
    loop_field("checkpoint_every"),
    loop_field("stop_on_nonfinite"),
    loop_field("allow_nonfinite"),
    loop_field("track"),
    loop_field("programs"),
    ("plugin", tuple[str, ...], (), "Modules to import first (MODULE.PATH, importable from the working directory): "
     "they register methods, parts or environments of your own (opiq_jax.register_method, register_environment), "
     "which --method and --env then accept."),
    loop_field("progress"),
    ("plot", bool, True, "Draw the plots into the results folder at the end."),
    ("distributed", bool, False, "Several hosts: join them with jax.distributed.initialize() (detected on SLURM, Open "
     "MPI and Cloud TPU, or given by --coordinator, --num-processes and --process-id) and train this process's share "
     "of the runs into <out>/process-<i>; opiq-jax plot <out> reads them together."),
    ("coordinator", str | None, None, "--distributed: HOST:PORT of process 0 (implies --distributed)."),
    ("num_processes", int | None, None, "--distributed: the number of processes (one per host)."),
    ("process_id", int | None, None, "--distributed: this process's index in [0, num_processes)."),
]


def cli_type(option: Option) -> Any:
    """The command-line type of a declared option: its choices as a Literal, ``None`` meaning "the default"."""
    return bool if option.type is bool and option.choices is None else option.value_type | None


def option_field(name: str, option: Option, defaults: str | None) -> tuple[str, Any, Any]:
    """A generated dataclass field for ``option``: its help is the declaration's."""
    kind = cli_type(option)
    default = option.default if option.type is bool else None
    return name, Annotated[kind, declared(option.help(defaults))], dataclasses.field(default=default)


def declared(help_text: str) -> Any:
    """tyro's argument with our help, which states the default itself (per environment where it differs)."""
    return tyro.conf.arg(help=help_text, help_behavior_hint="")


def train_fields() -> list[tuple[str, Any, Any]]:
    """``train``'s fields: the environment and methods, the loop's options, every static option and every
    hyperparameter, each documented once where it is declared."""
    env = STATIC_OPTIONS["env"]
    fields = [
        ("env", Annotated[str, declared(f"{env.doc} Default: chain.")], "chain"),
        ("method", Annotated[tuple[str, ...], declared((
            "Methods to run side by side (space separated): " + ", ".join(METHODS) + ". Each starts from the paper's "
            "setting for the environment; methods whose parts add networks (DORA, RND, BSP) run as programs of "
            "their own, in subfolders. Default: opiq."))], ("opiq",)),
    ]
    fields += [(n, Annotated[t, tyro.conf.arg(help=h)], dataclasses.field(default=d)) for n, t, d, h in LOOP_FIELDS]
    for name, option in settable_static().items():
        if name == "env_arg":
            fields.append((name, Annotated[tuple[str, ...], declared(option.help("none"))], ()))
        else:
            fields.append(option_field(name, option, option_defaults(option)))
    for name, option in every_hparam().items():
        fields.append(option_field(name, option, "the method's paper setting for the environment"))
    return fields


def train_command() -> type:
    """``train``'s options as a dataclass, built from the registries as they are now (plugins loaded)."""
    command = dataclasses.make_dataclass("Train", train_fields())
    command.__doc__ = TRAIN_DOC
    return command


LOOP_NAMES = {name for name, *_ in LOOP_FIELDS}


@dataclass
class Plot:
    """Draw one PNG per metric for a results folder: the median across seeds with its 25-75% band, or the IQM with
    its 95% bootstrap confidence interval."""

    folder: tyro.conf.Positional[Path]
    """A results folder written by ``opiq-jax train``."""
    metrics: tuple[str, ...] | None = None
    """Metrics to plot, one PNG each (default: the environment's headline metrics)."""
    statistic: Literal["median", "iqm"] = "median"
    """median: the median and the 25-75% band across seeds (the paper's); iqm: the interquartile mean with its 95%
    stratified-bootstrap confidence interval."""
    pooled: bool = False
    """Plot a folder holding several experiments as one (their seeds pooled)."""


@dataclass
class Sweep:
    """Run a grid of settings x methods x seeds as few compiled programs as memory allows, then rank the
    settings of each method by the area under the median curve (the paper's selection protocol)."""

    preset: tyro.conf.Positional[str]
    """A shipped preset (chain_opiq, chain_baselines, maze_opiq, maze_baselines; OPIQ's grid on the suites:
    minigrid_opiq, craftax_opiq) or the path of a JSON file written like them (see opiq_jax/host/presets/)."""
    out: str | None = None
    """Results folder (default results/sweep-<preset>); an interrupted sweep resumes where it stopped, with the
    batches it planned first (its plan.json)."""
    max_batch_runs: int | None = None
    """Cap on runs per compiled batch (default: as many as fit in device memory)."""
    precision: Annotated[Literal["float32", "bfloat16"] | None, tyro.conf.arg(help=STATIC_OPTIONS["precision"].help(
        "the preset's (float32 in the shipped ones); the default results folder then ends in -bfloat16"))] = None
    checkpoint_every: Annotated[float, declared(SWEEP_OPTIONS["checkpoint_every"].help())] = (
        SWEEP_OPTIONS["checkpoint_every"].default)
    track: Annotated[Literal["none", "tensorboard"], declared(SWEEP_OPTIONS["track"].help())] = (
        SWEEP_OPTIONS["track"].default)
    allow_nonfinite: Annotated[bool, declared(SWEEP_OPTIONS["allow_nonfinite"].help())] = (
        SWEEP_OPTIONS["allow_nonfinite"].default)
    plugin: tuple[str, ...] = ()
    """Modules to import first, which register methods, parts or environments of your own."""
    progress: Annotated[bool, declared(SWEEP_OPTIONS["progress"].help())] = SWEEP_OPTIONS["progress"].default
    seeds: int | None = None
    """Seeds per setting instead of the preset's, to try it small (the default folder then names them)."""
    steps: int | None = None
    """Environment steps per run instead of the preset's, to try it small (with --seeds: `--seeds 2 --steps 2000`).
    Where the preset's log_every does not divide them, the nearest smaller chunk that does is used, and a line says
    so."""


def options_given(args: Any) -> dict[str, Any]:
    """The experiment options set on the command line (by the names users write), ``env_arg`` parsed."""
    given = {}
    for name, option in {**settable_static(), **every_hparam()}.items():
        value = getattr(args, name)
        if name == "env_arg":
            if value:
                given[name] = parse_env_args(value)
        elif value is not None and not (option.type is bool and value == option.default):
            given[name] = value
    return given


def parse_env_args(pairs: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    """``("size=20", "deterministic=True")`` -> ``(("size", 20), ("deterministic", True))``."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-arg takes KEY=VALUE pairs, got {pair!r}")
        try:
            parsed.append((key, ast.literal_eval(value)))
        except (ValueError, SyntaxError):
            parsed.append((key, value))
    return tuple(parsed)


def plan_from_args(args: Any):
    """``(experiment, out)`` for ``train``'s arguments: a planned experiment, or a saved one (``--config``)."""
    out = check_out(args.out)
    check_interval("checkpoint_every", args.checkpoint_every)
    if args.max_minutes is not None:
        check_interval("max_minutes", args.max_minutes, positive=True)
    if args.config is not None:
        defaults = type(args)()
        changed = [n for n, *_ in train_fields() if n not in LOOP_NAMES and getattr(args, n) != getattr(defaults, n)]
        if changed:
            raise UsageError(f"--config re-runs the saved experiment as it is: drop --{changed[0].replace('_', '-')} "
                             "(or edit the config.json)")
        folder = args.config.parent if args.config.is_file() else args.config
        require_this_versions_config(folder, "re-run it")
        experiment = plan_rerun(args.config)
        return experiment, out or folder.with_name(folder.name + "-rerun")
    experiment = plan_experiment(args.env, args.method, args.seeds, seed=args.seed, grid=parse_grid(args.grid),
                                 options=options_given(args))
    return experiment, out or default_out(args.env, args.method, args.seeds, experiment.static.total_steps)


def share_of_this_process(experiment: Any, out: Path, index: int, count: int) -> tuple[Any, Path]:
    """This process's runs and results folder. Runs never communicate, so the processes only agree on who
    trains what: each trains its share on its own devices and writes its own folder."""
    try:
        share = process_share(experiment, index, count)
    except ValueError as e:
        raise UsageError(f"--distributed: {e}") from None
    print(f"opiq-jax: process {index} of {count} trains {len(share.runs)} of {len(experiment.runs)} runs; "
          f"when all have finished, opiq-jax plot {out} reads them together", flush=True)
    return share, out / f"process-{index}"


def train(args: Any, joined: tuple[int, int] | None = None) -> Path:
    """``train``: on this host, or as this process's share of a run over several hosts (``joined``: this process's
    index and the number of processes, when :mod:`opiq_jax.launch` joined them before JAX started)."""
    hosts = (args.coordinator, args.num_processes, args.process_id)
    if not (args.distributed or any(v is not None for v in hosts)):
        out, flagged = train_here(args, None)
    else:
        process = joined or multihost.join_hosts(*hosts)  # called as a function: JAX's backend must not be up yet
        try:
            out, flagged = train_here(args, process, should_stop=multihost.failure_of_others)
        except BaseException as e:  # the others stop too, at their next chunk, with their checkpoints
            multihost.report_failure(f"{type(e).__name__}: {e}")
            raise
        finally:
            multihost.finish()
    # after the processes have parted: runs gone non-finite here are no failure the others must stop for
    end_on_nonfinite(flagged, args.allow_nonfinite)
    return out


def train_here(args: Any, process: tuple[int, int] | None, should_stop=None) -> tuple[Path, list[dict]]:
    """``train`` on this process: plan, run (or resume), then say what was written and what to do next. Returns
    the results folder and the runs that became non-finite."""
    experiment, out = plan_from_args(args)
    if process is not None:
        experiment, out = share_of_this_process(experiment, out, *process)
    print(f"opiq-jax: {describe(experiment)} -> {out}", flush=True)
    started = time.time()
    try:
        results = run_planned(experiment, out, progress=args.progress, checkpoint_every=args.checkpoint_every,
                              stop_on_nonfinite=args.stop_on_nonfinite, track=args.track, should_stop=should_stop,
                              max_minutes=args.max_minutes, programs=args.programs)
    except Stopped:
        raise
    except KeyboardInterrupt:  # not the loop's stop: before it took the signals over, or just after it gave them back
        if not finished_training(out):
            raise
        interrupted_after_training(out, "after training")
    message = after_training(out, "after training")
    with EndingAtOnce(message):
        try:
            say_how_far(results, args.max_minutes, time.time() - started)
            headline = ("test_return" if any(r["metric"] == "test_return" for r in results.metrics[:50])
                        else "train_return")
            print(results.summary(headline))
        except KeyboardInterrupt:  # the training is saved; only its table and figures are missing
            fail(message, 130)
    message = after_training(out, "while drawing the figures")
    with EndingAtOnce(message):
        try:
            figures = results.plot() if args.plot else []
        except KeyboardInterrupt:  # the training is saved; only the figures not yet renamed into place are missing
            fail(message, 130)
    say_where(out, figures, results.programs(), args.plugin)
    return out, results.nonfinite_runs()


def say_how_far(results: Any, max_minutes: float | None, seconds: float) -> None:
    """The line after training: finished, or stopped by ``--max-minutes`` with how far it got."""
    if results.finished or max_minutes is None:
        print(f"opiq-jax: finished in {seconds:.0f} s", flush=True)
        return
    reached = max((r["step"] for r in results.metrics), default=0)
    total = results.config["static"]["total_steps"]
    print(f"opiq-jax: stopped by --max-minutes {max_minutes:g} after {seconds:.0f} s, at step {reached:,} of {total:,} "
          "(a checkpoint is kept); run the same command to go on", flush=True)


def finished_training(out: Path) -> bool:
    """Whether ``out`` holds a finished training (its metrics and checkpoints reach the last step)."""
    try:
        return is_finished(out)
    except (UsageError, OSError):
        return False


def interrupted_after_training(out: Path, when: str) -> None:
    """Exits with 130 for a Ctrl-C after training (``when``: during its table, or its figures), saying what is kept
    and how to draw the figures."""
    fail(after_training(out, when), 130)


def after_training(out: Path, when: str) -> str:
    """The line of a Ctrl-C after training (``when``), saying what is kept and how to draw the figures."""
    return (f"interrupted {when}; the training is saved in {shell_path(out)}: draw its figures with opiq-jax plot "
            f"{shell_path(out)}")


def shell_path(path: Path | str) -> str:
    """A path as a shell reads it back (quoted where it holds spaces, quotes, ...)."""
    return shlex.quote(str(path))


def say_where(out: Path, figures: list[Path], programs: list[str], plugins: tuple[str, ...] = ()) -> None:
    """The closing lines: where the figures and the metrics are, and how to plot, resume or reproduce the run."""
    for path in figures:
        print(f"opiq-jax: wrote {path}", flush=True)
    metrics = [Path(out) / program / "metrics.csv" if program != "." else Path(out) / "metrics.csv"
               for program in programs]
    where = " and ".join(map(shell_path, metrics)) + (" (config.json and checkpoints beside them)" if len(metrics) > 1
                                                      else " (config.json and checkpoints beside it)")
    plugin = "".join(f" --plugin {shlex.quote(p)}" for p in plugins)
    print(f"opiq-jax: metrics in {where}; plot again with: opiq-jax plot {shell_path(out)} [--statistic iqm]; the "
          "same command resumes an interrupted run; to reproduce it: "
          f"opiq-jax train{plugin} --config {shell_path(out)}; more steps or seeds make a new experiment: pass a new "
          "--out", flush=True)


def end_on_nonfinite(runs: list[dict], allowed: bool) -> None:
    """Exits with 1 (:class:`NonFiniteRuns`) when ``runs`` became NaN or infinite, unless ``allowed``: a run
    everything was written for, but whose numbers the user must not mistake for a success."""
    if not runs:
        return
    first = runs[0]
    what = (f"{len(runs)} run(s) became NaN or infinite (the first: {first['method']}, {first['setting']}, seed "
            f"{first['seed']}); they are flagged in the metrics (nonfinite = 1)")
    if allowed:
        print(f"opiq-jax: {what}", flush=True)
        return
    raise NonFiniteRuns(f"{what}; exit code 1 (--allow-nonfinite exits with 0)")


def sweep(args: Sweep) -> None:
    if args.max_batch_runs is not None and args.max_batch_runs < 1:
        raise UsageError(f"--max-batch-runs must be >= 1, got {args.max_batch_runs}")
    check_interval("checkpoint_every", args.checkpoint_every)
    results = run(args.preset, check_out(args.out), max_batch_runs=args.max_batch_runs,
                  precision=args.precision, progress=args.progress, checkpoint_every=args.checkpoint_every,
                  track=args.track, seeds=args.seeds, steps=args.steps)
    print(f"opiq-jax: sweep results in {shell_path(results.folder)}/ (settings.csv, best.md; metrics in its batch_* "
          f"folders); the same command resumes it; draw every setting's curves with: opiq-jax plot "
          f"{shell_path(results.folder)} --pooled")
    end_on_nonfinite(results.nonfinite_runs(), args.allow_nonfinite)


def plot(args: Plot) -> None:
    extra = {} if args.metrics is None else {"metrics": tuple(args.metrics)}
    message = (f"interrupted while drawing the figures of {shell_path(args.folder)}; those drawn are whole: run the "
               "same command to draw them all")
    with EndingAtOnce(message):
        try:
            for path in plot_folder(args.folder, statistic=args.statistic, pooled=args.pooled, **extra):
                print(f"opiq-jax: wrote {path}", flush=True)
        except KeyboardInterrupt:  # each figure is renamed into place whole: none is cut short
            fail(message, 130)


def bench(args: Any) -> None:
    args.validate()
    run_bench(args)


def run_command(command: Any, joined: tuple[int, int] | None = None) -> None:
    """Runs the parsed subcommand (``joined``: see :func:`train`)."""
    if isinstance(command, Bench):
        bench(command)
    elif isinstance(command, Sweep):
        sweep(command)
    elif isinstance(command, Plot):
        plot(command)
    else:
        train(command, joined)


def plugins_named(argv: list[str]) -> list[str]:
    """The modules that ``--plugin`` names in ``argv`` (``--plugin A B`` and ``--plugin=A``), before tyro parses it:
    they must be imported first, as they add methods and options that the parser then knows."""
    found, taking = [], False
    for arg in argv:
        if arg.startswith("--plugin="):
            found.append(arg.split("=", 1)[1])
            taking = False
        elif arg == "--plugin":
            taking = True
        elif taking and not arg.startswith("-"):
            found.append(arg)
        else:
            taking = False
    return found


def load_plugins(modules: list[str]) -> None:
    """Imports each module (found from the working directory too, as ``python -m`` would); one line if one fails."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except SystemExit as e:  # exit 0 with nothing trained would read as success
            raise UsageError(f"--plugin {name}: importing it called sys.exit({e.code!r}); a plugin registers methods, "
                             "parts or environments and returns") from None
        except Exception as e:  # noqa: BLE001 - whatever the module raises, the user gets one line naming it
            first = (str(e).splitlines() or [""])[0]
            raise UsageError(f"--plugin {name}: importing it failed ({type(e).__name__}: {first})") from None


def main(argv: list[str] | None = None, joined: tuple[int, int] | None = None) -> None:
    """The command line: every way a run ends early is one line, with the conventional exit code. The ``opiq-jax``
    command enters through :func:`opiq_jax.launch.main`, which sets what must precede JAX's backend (``joined``)."""
    argv_list = sys.argv[1:] if argv is None else list(argv)
    try:
        load_plugins(plugins_named(argv_list))
    except UsageError as e:
        fail(f"error: {command_line_message(e)}", 2)
    command = tyro.extras.subcommand_cli_from_dict(
        {"train": train_command(), "sweep": Sweep, "plot": Plot, "bench": Bench}, args=argv, prog="opiq-jax")
    try:
        run_command(command, joined)
    except UsageError as e:  # ResultsError included: its options named as the command line writes them
        fail(f"error: {command_line_message(e)}", 2)
    except Stopped as e:
        fail(str(e), e.exit_code)
    except (NonFiniteRuns, PeerFailed, ProgramFailed) as e:
        fail(str(e), 1)
    except KeyboardInterrupt:  # before the loop took over the signals (the commands' own cases are handled in them)
        fail(interrupted_early(command), 130)
    except OSError as e:  # a write that failed (a full disk, ...): the files before it are intact
        where = f" ({e.filename})" if e.filename else ""
        fail(f"error: {e.strerror or e}{where}; the results written before it are intact", 1)


def interrupted_early(command: Any) -> str:
    """What a Ctrl-C that reached none of the command's own handling means."""
    if isinstance(command, Sweep):
        return ("interrupted before a batch started; the batches finished before are kept: run the same command to "
                "resume")
    if isinstance(command, Bench):
        return "interrupted before the bench finished; it writes its report only at the end"
    if isinstance(command, Plot):
        return "interrupted; each figure is written whole: run the same command to draw them all"
    return "interrupted before training started; nothing to keep"


def fail(message: str, code: int) -> None:
    if code == 130:  # a second Ctrl-C while the interpreter shuts down (JAX's atexit hooks) would print a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"opiq-jax: {message}", file=sys.stderr, flush=True)
    sys.exit(code)
