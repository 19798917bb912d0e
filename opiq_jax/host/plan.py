"""From what a user asks for to an :class:`~opiq_jax.runs.experiment.Experiment`: the one place where the command line
and the Python API turn an environment, methods, seeds, a grid and options into runs.

Options are looked up by the names users write (``steps``, ``m``, ``c_action``, ``bsp_heads``, ...) in their
declarations (:mod:`opiq_jax.common.config`): a static option changes the compiled program, a hyperparameter is a
number of each run. Every check raises :class:`~opiq_jax.common.errors.UsageError` with one line that names the
option as the user wrote it (``--steps`` on the command line, ``steps`` in Python).

This module imports no JAX backend (nothing of gymnax), so the command line can plan before
``jax.distributed.initialize``.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import itertools
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..common.config import (RUNNER_SET, STATIC_OPTIONS, VALUE_BEFORE_DECLARED, Option, StaticConfig, hparam_options,
                             static_option)
from ..common.errors import ResultsError, UsageError, message_of, option_name
from ..parts import PARTS, get_part
from ..registry.environments import (
    ENVIRONMENTS, UnknownEnvironment, check_environment_static, environment_label, environment_names,
    environment_spec, owners_of, refused_contract_option,
)
from ..registry.methods import METHODS, get_method, method_hparams, method_program, program_parts
from ..runs.experiment import Experiment, RunSpec
from ..runs.memory import check_fits
from ..runs.results_folder import experiment_folders
from ..store.files import read_json


def label(name: str, written: str | None = None) -> str:
    """How a message names an option or argument: as ``written`` where given (a preset's key), else marked, to read
    ``--chain-length`` on the command line and ``chain_length`` in Python (:func:`~opiq_jax.common.errors.worded`)."""
    return written or option_name(name)


def every_hparam() -> dict[str, Option]:
    """Every hyperparameter a method may have: the trainer's and every registered part's."""
    get_part("pseudocounts")  # the built-in parts register on first use
    return hparam_options(PARTS.values())


def settable_static() -> dict[str, Option]:
    """The static options a user sets, by the name they write (``steps`` for ``total_steps``)."""
    return {o.public_name: o for o in STATIC_OPTIONS.values() if o.name not in RUNNER_SET}


def unknown_option(name: str) -> UsageError:
    """A one-line error for an option nobody declares, with the closest names."""
    known = [*settable_static(), *every_hparam()]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {' or '.join(label(c) for c in close)}?" if close else ""
    if name in RUNNER_SET:
        hint = ("; the environment is chosen with env" if name == "env"
                else "; the parts come from the methods: choose methods instead")
    return UsageError(f"unknown option {label(name)}{hint}")


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """``(static, hparams)``: ``options`` (user names) as static fields (by field name) and hyperparameters,
    each value checked against its declaration."""
    static, hparams, numbers = {}, {}, every_hparam()
    for name, value in options.items():
        if name in numbers:
            hparams[name] = checked_number(numbers[name], value)
        elif (option := settable_static().get(name)) is not None:
            static[option.name] = checked_static(option, value)
        else:
            raise unknown_option(name)
    return static, hparams


def checked_number(option: Option, value: Any, written: str | None = None) -> float:
    """``value`` as a float within ``option``'s range, or a one-line error (naming the option as ``written``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):  # True is no m = 1, '2' no 2
        raise UsageError(f"{option.label(written)} must be a number, got {value!r}")
    message = option.problem(float(value), written)
    if message:
        raise UsageError(message)
    return float(value)


def checked_static(option: Option, value: Any, written: str | None = None) -> Any:
    """``value`` converted to ``option``'s type (a list becomes a tuple) and checked, or a one-line error."""
    kind, name = option.type, option.label(written)
    if kind in (int, float) and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
        raise UsageError(f"{name} must be a number, got {value!r}")
    if kind is int and not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or not float(value).is_integer():
            raise UsageError(f"{name} must be a whole number, got {value!r}")
    if kind is int:
        value = int(value)
    elif kind is float:
        value = float(value)
    if kind is bool and not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, got {value!r}")
    if option.name == "env_kwargs" and isinstance(value, Mapping):
        value = tuple(value.items())
    if isinstance(value, list):
        value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
    if str(kind).startswith("tuple[int") and not (isinstance(value, tuple) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise UsageError(f"{name} must be a list of whole numbers, got {value!r}")
    message = option.problem(value, written)
    if message:
        raise UsageError(message)
    return value


def check_environment(env: str, written: str | None = None) -> None:
    """A one-line error for an environment nobody registers, or an Atari game's name that is not one (what the
    environment itself checks, EnvPool installed for instance, :func:`static_with` asks it once its options are
    known)."""
    if not isinstance(env, str):
        raise UsageError(f"{label('env', written)} must be an environment's name ({environment_names()}), got {env!r}")
    try:
        environment_spec(env)
    except UnknownEnvironment:
        raise UsageError(f"unknown {label('env', written)} {env!r}: use {environment_names()}") from None
    except ValueError as error:  # atari:NAME with a name that is not a game
        raise UsageError(str(error)) from None


def check_methods(methods: Sequence[str], written: str | None = None) -> tuple[str, ...]:
    """The methods as a tuple, each registered and named once, or a one-line error naming the registry's."""
    what = written or option_name("methods", flag="method")
    if isinstance(methods, str):
        methods = (methods,)
    if not isinstance(methods, Sequence) or not all(isinstance(m, str) for m in methods):
        raise UsageError(f"{what} must be a method's name or a list of them ({', '.join(METHODS)}), got {methods!r}")
    methods = tuple(methods)
    if not methods:
        raise UsageError(f"{what} needs at least one of {', '.join(METHODS)}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown method {', '.join(map(repr, unknown))}: use any of {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise UsageError(f"each method may appear once in {what}")
    return methods


def check_out(out: Any, name: str = "out") -> Path | None:
    """A folder's path (None: the default), or a one-line error: not a path, or empty (an empty ``out`` would
    write into the working directory)."""
    if out is None:
        return None
    if isinstance(out, bool) or not isinstance(out, (str, os.PathLike)):
        raise UsageError(f"{label(name)} must be a path (str or pathlib.Path), got {out!r}")
    if not os.fspath(out).strip():
        raise UsageError(f"{label(name)} is empty: name a folder (write . for the working directory)")
    return Path(out)


def check_interval(name: str, value: Any, positive: bool = False) -> float:
    """A finite number of seconds or minutes, >= 0 (> 0 with ``positive``), or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 or (
            positive and value == 0):
        raise UsageError(f"{label(name)} must be a finite number {'>' if positive else '>='} 0, got {value!r}")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """True or False, or a one-line error."""
    if not isinstance(value, bool):
        raise UsageError(f"{label(name)} must be True or False, got {value!r}")
    return value


def check_count(name: str, value: Any, minimum: int = 1, written: str | None = None) -> int:
    """A whole number of at least ``minimum`` (seeds, ...), or a one-line error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise UsageError(f"{label(name, written)} must be a whole number >= {minimum}, got {value!r}")
    return int(value)  # numpy's integers too


SEED_LIMIT = 2**32
"""Seeds are folded into JAX's keys as unsigned 32-bit numbers: a larger one would wrap onto a smaller one's runs."""


def check_seed(name: str, value: Any, written: str | None = None) -> int:
    """A seed in [0, 2**32 - 1] (what a JAX key holds), or a one-line error."""
    value = check_count(name, value, minimum=0, written=written)
    if value >= SEED_LIMIT:
        raise UsageError(f"{label(name, written)} must be below 2**32 = {SEED_LIMIT:,} (JAX's keys hold 32-bit seeds: "
                         f"a larger one trains as a smaller one), got {value}")
    return value


def check_seeds(seeds: int | Sequence[int]) -> Sequence[int]:
    """The runs' seeds: ``n`` means seeds 0 to n - 1; a list names them (each in [0, 2**32 - 1], once)."""
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, (bool, np.bool_)):
        # a range, not a tuple: a huge count must reach the memory check before a list of it is built
        return range(check_seed("seeds", check_count("seeds", seeds)))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise UsageError(f"{label('seeds')} must be a number of seeds or a non-empty list of seeds, got {seeds!r}")
    for s in seeds:
        check_seed("seeds", s)
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"{label('seeds')} names a seed twice: {list(seeds)}")
    return tuple(seeds)


def parse_grid(pairs: Iterable[str]) -> dict[str, list[float]]:
    """Command-line ``NAME=V1,V2`` pairs as a grid ``{name: [v1, v2]}`` (values still unchecked)."""
    grid: dict[str, list[float]] = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        name = name.strip().removeprefix("--").replace("-", "_")
        if not sep or not name or not values.strip():
            raise UsageError(f"--grid takes NAME=V1,V2,... pairs, got {pair!r}")
        if name in grid:
            raise UsageError(f"--grid names {name} twice")
        try:
            grid[name] = [float(v) for v in values.split(",")]
        except ValueError:
            raise UsageError(f"--grid {name}: values must be numbers, got {values!r}") from None
    return grid


def checked_grid(grid: Mapping[str, Sequence[float]] | None, written: str | None = None
                 ) -> dict[str, list[float]]:
    """The grid with every name a hyperparameter and every value in its range. Static options are refused:
    each value would be a program of its own (run one experiment per value)."""
    numbers, checked, what = every_hparam(), {}, written or label("grid")
    if not isinstance(grid or {}, Mapping):
        raise UsageError(f"{what} must map hyperparameters to lists of values, got {grid!r}")
    for name, values in (grid or {}).items():
        if name not in numbers:
            if name in settable_static() or name in RUNNER_SET:
                raise UsageError(f"{what} takes hyperparameters only: {name} changes the compiled "
                                 "program, so run one experiment per value")
            raise unknown_option(name)
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise UsageError(f"{what} {name}: give a non-empty list of values, got {values!r}")
        checked[name] = [checked_number(numbers[name], v, f"{what} {name}" if written else None) for v in values]
        shown = [setting_label({name: v}) for v in checked[name]]  # as a setting's label writes it
        twice = sorted({s for s in shown if shown.count(s) > 1})
        if twice:  # 1 and 1.0 (or 0.1000001 and 0.1000002) are one setting's label: its seeds would mix
            raise UsageError(f"{what} {name} names the value {twice[0].partition('=')[2]} twice (as labels write "
                             "it, to twelve significant digits): give each value once")
    return checked


def setting_label(values: Mapping[str, float], in_name_order: bool = True) -> str:
    """The label of a run's setting: its overrides in name order (a sweep's: in its grid's order), or ``paper``."""
    items = sorted(values.items()) if in_name_order else values.items()
    # 12 significant digits: grid points that differ in their third digit (0.125 and 0.12) or their seventh
    # (which :g would round together) keep labels of their own, while 0.1 stays "0.1"
    return ",".join(f"{k}={v:.12g}" for k, v in items) or "paper"


def settings_of(method: str, fixed: Mapping[str, float], grid: Mapping[str, list[float]]) -> list[dict[str, float]]:
    """``method``'s settings: ``fixed`` and every combination of ``grid``, each limited to its own options."""
    options = get_method(method).options()
    own_fixed = {k: v for k, v in fixed.items() if k in options}
    own_grid = {k: v for k, v in grid.items() if k in options}
    return [{**own_fixed, **dict(zip(own_grid, combo))} for combo in itertools.product(*own_grid.values())]


def require_used(names: Iterable[str], methods: Sequence[str]) -> None:
    """Refuses a hyperparameter that no chosen method has (it would silently do nothing)."""
    for name in names:
        if not any(name in get_method(m).options() for m in methods):
            raise UsageError(f"{label(name)} applies to none of {', '.join(methods)} (no part of theirs has it)")


def plan_experiment(env: str = "chain", methods: Sequence[str] = ("opiq",), seeds: int | Sequence[int] = 4, *,
                    seed: int = 0,
                    grid: Mapping[str, Sequence[float]] | None = None, options: Mapping[str, Any] | None = None):
    """The :class:`~opiq_jax.runs.experiment.Experiment` of ``methods`` x settings x ``seeds`` on ``env`` (nothing
    compiled or allocated), with every input checked."""
    check_environment(env)
    methods = check_methods(methods)
    seeds = check_seeds(seeds)
    check_seed("seed", seed)
    static_overrides, fixed = split_options(dict(options or {}))
    grid = checked_grid(grid)
    require_used([*fixed, *grid], methods)
    static = static_with(env, static_overrides)
    check_memory(static, {m: len(settings_of(m, fixed, grid)) * len(seeds) for m in methods})
    runs = []
    try:
        for method in methods:
            for values in settings_of(method, fixed, grid):
                hparams = method_hparams(env, method, **values)
                runs += [RunSpec(method, setting_label(values), s, hparams) for s in seeds]
    except ValueError as e:  # a method the environment does not offer
        raise UsageError(message_of(e)) from None
    return Experiment(static=static, runs=tuple(runs), seed=seed)


def check_memory(static: StaticConfig, runs_per_method: Mapping[str, int]) -> None:
    """The experiment's one memory check, before any run is built (a huge ``seeds`` must fail here, not exhaust the
    host's memory) and any file is written: every program's runs against the device's free memory, in one line
    naming what would fit instead (:func:`opiq_jax.runs.memory.check_fits`); a large state is announced."""
    programs: dict[str, list[str]] = {}
    for method in runs_per_method:
        programs.setdefault(method_program(method), []).append(method)
    for members in programs.values():
        check_fits(dataclasses.replace(static, parts=program_parts(members)),
                   sum(runs_per_method[m] for m in members), note=print)


def runs_per_method(experiment: Experiment) -> dict[str, int]:
    """How many runs each method of ``experiment`` has (a saved experiment's, for :func:`check_memory`)."""
    return dict(collections.Counter(r.method for r in experiment.runs))


def static_with(env: str, overrides: dict[str, Any]) -> StaticConfig:
    """The environment's paper configuration with ``overrides`` (field names); steps not divisible by the
    environment's chunk, unless the chunk was chosen too, get the nearest chunk that divides them
    (:func:`chunk_for`), which the plan line names (:func:`describe`)."""
    overrides = dict(overrides)
    total = overrides.get("total_steps")
    if total is not None and "log_every" not in overrides:
        default_chunk = StaticConfig(**environment_spec(env).defaults).log_every
        overrides["log_every"] = chunk_for(total, default_chunk)
    foreign = next(((name, owners) for name in overrides if (owners := owners_of(name, env))), None)
    if foreign:  # another environment's own option: it would change nothing here, silently
        name, owners = foreign
        raise UsageError(f"{STATIC_OPTIONS[name].label()} applies to {' and '.join(owners)} only, "
                         f"not to {env}")
    refused = refused_contract_option(env, overrides)
    if refused:  # no contract of this environment reads it: it would change nothing, silently
        name, serves = refused
        raise UsageError(f"{STATIC_OPTIONS[name].label()} applies to {serves} only, not to {env}: none of its "
                         "environment, replay and counts reads it")
    static = StaticConfig(**{**environment_spec(env).defaults, "env": env, **overrides})
    message = next(iter(static.problems()), None)
    if message:
        raise UsageError(message)
    check_environment_static(static)
    return static


def default_out(env: str, methods: Sequence[str], seeds: int | Sequence[int], total_steps: int) -> Path:
    """``results/<env>-<methods>-seeds<N>-steps<S>``."""
    seeds = seeds if isinstance(seeds, int) else len(seeds)
    return Path("results") / f"{env.replace(':', '-')}-{'-'.join(methods)}-seeds{seeds}-steps{total_steps}"


# ------------------------------------------------------------------------------------ saved configurations


def config_files(path: str | Path) -> list[Path]:
    """The ``config.json`` files of a saved experiment: the file itself, or every one in a results folder."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise ResultsError(f"{path} does not exist")
    folders = experiment_folders(path)
    if not folders:
        raise ResultsError(f"{path} holds no config.json: pass a config.json or a results folder")
    return [folder / "config.json" for folder in folders]


def saved_shape_problem(saved: Any) -> str | None:
    """Why a parsed ``config.json`` is not one opiq-jax wrote (None when its outline is sound)."""
    if not isinstance(saved, dict):
        return f"its top level is a JSON {type(saved).__name__}, not an object"
    if not isinstance(saved.get("static"), dict):
        return 'it has no "static" object'
    runs = saved.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        return 'it has no non-empty "runs" list'
    for r in runs:
        if not isinstance(r.get("hparams"), dict) or not isinstance(r.get("method"), str):
            return 'a run lacks its "method" or its "hparams" object'
    return None


def saved_static(static: Mapping[str, Any]) -> StaticConfig:
    """A saved ``static`` section through the command line's checks: each value against its declaration, then the
    relations between them; a :class:`UsageError` naming the field as the file does."""
    values = {}
    for name, value in {**VALUE_BEFORE_DECLARED, **static}.items():  # an older file trained as the code was then
        if name == "parts" or name not in STATIC_OPTIONS:  # the parts come from the methods
            continue
        values[name] = value if name == "env" else checked_static(STATIC_OPTIONS[name], value,
                                                                   written=f"static.{name}")
    if not isinstance(values.get("env"), str):
        raise UsageError(f"static.env must be an environment's name, got {values.get('env')!r}")
    static_config = StaticConfig(**values)
    message = next(iter(static_config.problems()), None)
    if message:
        raise UsageError(message)
    return static_config


def saved_hparams(run: Mapping[str, Any]) -> dict[str, float]:
    """A saved run's hyperparameters, each checked against its declaration as the command line checks it."""
    numbers = every_hparam()
    unknown = sorted(set(run["hparams"]) - set(numbers))
    if unknown:
        raise UsageError(f"run {run['method']!r} has unknown hyperparameter {unknown[0]!r}")
    return {k: checked_number(numbers[k], v, written=f"hparams.{k}") for k, v in run["hparams"].items()}


def experiment_from_configs(path: str | Path):
    """The experiment a saved ``config.json`` (or a results folder, per-program subfolders included) describes,
    exactly: the same static configuration, base seed and runs with their hyperparameters. A hand-edited file goes
    through the checks a new experiment's options do, and fails in one line naming the file."""
    files = config_files(path)
    saved = [read_json(f) for f in files]
    for file, one in zip(files, saved):
        problem = saved_shape_problem(one)
        if problem:
            raise ResultsError(f"{file} is not an opiq-jax config.json: {problem}")
    statics = [{k: v for k, v in s["static"].items() if k != "parts"} for s in saved]
    if any(s != statics[0] for s in statics) or len({(s.get("seed"), s.get("shared_mask_seed")) for s in saved}) > 1:
        raise ResultsError(f"{path} holds more than one experiment: pass one config.json")
    try:
        static = saved_static(statics[0])
        require_registered(files[0], static.env, [r["method"] for s in saved for r in s["runs"]],
                           saved[0].get("plugins", []))
        runs = tuple(RunSpec(r["method"], str(r.get("setting", "paper")), check_seed("seed", r.get("seed")),
                             saved_hparams(r)) for s in saved for r in s["runs"])
        seed = check_seed("seed", saved[0].get("seed", 0))
        mask_seed = check_seed("shared_mask_seed", saved[0].get("shared_mask_seed", 12345))
    except ResultsError:
        raise
    except UsageError as e:
        raise ResultsError(f"{files[0]}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ResultsError(f"{files[0]} is not an opiq-jax config.json ({e})") from None
    return Experiment(static=static, runs=runs, seed=seed, shared_mask_seed=mask_seed)


def plan_rerun(path: str | Path) -> Experiment:
    """The experiment a saved ``config.json`` (or results folder) describes (:func:`experiment_from_configs`), its
    memory checked as a new experiment's is."""
    experiment = experiment_from_configs(path)
    check_memory(experiment.static, runs_per_method(experiment))
    return experiment


def require_registered(path: Path, env: str, methods: list[str], plugins: list[str]) -> None:
    """A one-line :class:`ResultsError` when a saved experiment's methods or environment are not registered in this
    process, saying what to import (the config's ``plugins``: the modules that registered them when it trained)."""
    missing = [f"method {m!r}" for m in dict.fromkeys(methods) if m not in METHODS]
    try:
        environment_spec(env)
    except ValueError:
        missing.append(f"environment {env!r}")
    if not missing:
        return
    modules = [p for p in plugins if p != "__main__"]
    if modules:
        how = (f"import {', '.join(modules)} first (on the command line: "
               + " ".join(f"--plugin {m}" for m in modules) + ")")
    else:
        how = ("run the code that registered it (opiq_jax.register_method or register_environment, in a script or "
               "notebook when it trained) first, or move it into a module and pass --plugin MODULE")
    raise ResultsError(f"{path} was trained with {' and '.join(missing)}, which this process has not registered: {how}")


def chunk_for(steps: int, chunk: int, multiple_of: Any = 1) -> int:
    """The largest divisor of ``steps`` no larger than ``chunk`` and no smaller than half of it (a multiple of
    ``multiple_of``, the environments per run of a pool): about as many points per run as the chunk meant. None
    there: ``steps`` itself, a single chunk."""
    multiple_of = multiple_of if isinstance(multiple_of, int) and multiple_of > 0 else 1
    near = [d for d in range(chunk, (chunk + 1) // 2 - 1, -1) if d > 0 and steps % d == 0 and d % multiple_of == 0]
    return near[0] if near else steps


def describe(experiment) -> str:
    """One line: how many runs of which methods on which environment, for how long, and how often they log where
    that is not the environment's own chunk (steps it does not divide)."""
    methods = list(dict.fromkeys(r.method for r in experiment.runs))
    settings = len({(r.method, r.setting) for r in experiment.runs})
    static = experiment.static
    runs = len(experiment.runs)
    return (f"{plural(runs, 'run')} ({', '.join(methods)}; {plural(settings, 'setting')}) on "
            f"{environment_label(static.to_dict())}, "
            f"{static.total_steps:,} steps each{logging_note(static)}")


def logging_note(static: StaticConfig) -> str:
    """``, logged every N steps (...)`` where the chunk is not the environment's; else nothing."""
    try:
        default_chunk = StaticConfig(**environment_spec(static.env).defaults).log_every
    except (ValueError, TypeError):  # an environment registered in another process: nothing to compare with
        return ""
    if static.log_every == default_chunk:
        return ""
    points = static.total_steps // static.log_every
    why = f"; {default_chunk:,} does not divide them" if static.total_steps % default_chunk else ""
    return f", logged every {static.log_every:,} steps ({plural(points, 'point')} per run{why})"


def plural(count: int, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def option_defaults(option: Option) -> str | None:
    """An option's default per environment, for help texts (``chain 100,000, maze 1,000,000, ...``)."""
    if not option.environment_default:
        return None
    values = {name: spec.defaults.get(option.name, option.default) for name, spec in ENVIRONMENTS.items()}
    shown = [f"{name} {format_value(v)}" for name, v in values.items()]
    return ", ".join(shown) + f", gymnax {format_value(option.default)}"


def format_value(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


__all__ = ["check_environment", "check_methods", "checked_grid", "default_out", "describe",
           "experiment_from_configs", "parse_grid", "plan_experiment", "setting_label", "split_options",
           "static_option"]
