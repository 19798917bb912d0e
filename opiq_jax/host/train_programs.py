"""An experiment of any mix of methods: one program per group, trained one after another or at once.

:func:`run_methods` is what the API and the command line call: a single program trains in ``out`` itself; several
train in subfolders named after them, either one after another in this process (each program's device memory
freed before the next starts) or at once, each in a process of its own (:mod:`opiq_jax.host.processes`).
"""

from __future__ import annotations

import time
from pathlib import Path

import jax

from ..common.config import LOOP_DEFAULTS, LOOP_OPTIONS
from ..common.errors import UsageError
from ..registry.environments import environment_spec
from ..registry.environments import started_by_host
from ..runs.experiment import Experiment
from ..runs.memory import require_fits, state_bytes_per_run
from ..runs.results_folder import program_finished
from ..store.files import prepare_folder
from .host_loop import Loop, run_experiment
from .processes import run_programs_at_once


PROGRAM_MODES = LOOP_OPTIONS["programs"].choices


def run_methods(experiment: Experiment, out: str | Path, programs: str = LOOP_DEFAULTS["programs"],
                keep_states: bool = False, **kwargs) -> dict[str, object]:
    """Runs ``experiment`` (any mix of methods) as one program per group; a single program uses ``out`` itself.

    Each program's memory was checked when the experiment was planned (:func:`opiq_jax.host.plan.check_memory`).
    Keyword arguments go to :func:`run_experiment`; ``max_seconds`` bounds the whole call. ``programs``:
    ``sequential`` trains the programs one after another in this process; ``parallel`` trains them at once,
    each in a process of its own (:mod:`opiq_jax.host.processes`; on one GPU under NVIDIA MPS). Returns the
    final state of a single program. Of several trained one after another, each program's state leaves the
    device before the next starts (it needs the memory): with ``keep_states`` its host copy is returned, else
    None (``Results.state`` reads it from the checkpoint). None with ``parallel``.
    """
    if programs not in PROGRAM_MODES:
        raise UsageError(f"programs must be one of {', '.join(PROGRAM_MODES)}, got {programs!r}")
    out, groups = Path(out), experiment.programs
    if programs == "parallel" and len(groups) > 1:  # each program was checked alone (the plan): now all at once
        check_parallel(groups)
    if len(groups) == 1:
        (name, group), = groups.items()
        return {name: run_experiment(group, out, **kwargs)}
    prepare_folder(out, kind="programs")
    if programs == "parallel":
        return run_in_processes(groups, out, kwargs)
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


def check_parallel(groups: dict[str, Experiment]) -> None:
    """Every program's state at once on the device they share (each run's share rounded up: no looser than the
    sum), or a one-line :class:`~opiq_jax.common.errors.DoesNotFit`."""
    num_runs = sum(len(g.runs) for g in groups.values())
    total = sum(state_bytes_per_run(g.static) * len(g.runs) for g in groups.values())
    headroom = environment_spec(next(iter(groups.values())).static.env).memory_headroom
    require_fits(-(-total // num_runs), num_runs, headroom)


def run_in_processes(groups: dict[str, Experiment], out: Path, options: dict) -> dict[str, object]:
    """:func:`run_methods` with ``programs="parallel"`` (their memory checked): trains every program in a process of
    its own (this process only waits for them)."""
    if options.get("should_stop") is not None:
        raise UsageError("programs='parallel' runs on one host: a run over several hosts trains its programs one "
                         "after another")
    if started_by_host(next(iter(groups.values())).static.env):
        raise UsageError("programs='parallel' is for environments stepped in the program: a pool's emulators "
                         "already take the host's cores")
    plugins = sorted({m for g in groups.values() for m in g.to_json().get("plugins", [])})
    if "__main__" in plugins:
        raise UsageError("programs='parallel' trains each program in a process of its own, which cannot see methods "
                         "or environments registered in a script or notebook: move the registration into a module "
                         "and import it (or pass --plugin MODULE), or train the programs one after another")
    loop = Loop(verbose=options.get("verbose", True))
    todo = {name: g for name, g in groups.items() if not program_finished(out / name)}
    run_programs_at_once(todo, out, progress=options.pop("progress", True), say=loop.say, plugins=plugins,
                         **{k: v for k, v in options.items() if k != "should_stop"})
    return {}
