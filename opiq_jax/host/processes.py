"""An experiment's programs trained at once, each in a process of its own (``programs="parallel"``).

A figure such as the paper's maze figure trains several compiled programs: the methods that differ only in
numbers (72 runs) and DORA, DQN + RND and BSP (16, 8 and 8 runs). At these sizes a program's step is
latency, many small kernels one after another, and one program leaves most of a GPU idle. Run one after
another, the maze figure's four take about 40 minutes in bfloat16 on one H200; started at once under NVIDIA's
Multi-Process Service (MPS), their kernels share the card and the figure takes the time of the slowest
program sharing it (``docs/performance.md`` has the measurements). Without MPS, processes on one GPU take
turns, which is no faster than one after another.

Each process trains its program exactly as :func:`opiq_jax.host.host_loop.run_experiment` does alone: the same
compiled program and numbers, its own subfolder, checkpoints and metrics, so stopping and resuming work as
for one program. The processes start with XLA's command buffers for loops and conditionals (a whole chunk
is one CUDA graph, launched once), which changes how kernels are launched, not what they compute.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
from tqdm.auto import tqdm

from ..common.config import LOOP_DEFAULTS
from ..common.errors import NonFiniteRuns, ProgramFailed, ResultsError, Stopped, UsageError
from ..runs.results_folder import require_same_experiment
from ..store.files import CONFIG_FILE, METRICS_FILE, FolderLock, atomic_write_bytes, prepare_folder
from .host_loop import run_experiment
from .plan import experiment_from_configs
from .stop_signals import SignalHandlers

COMMAND_BUFFER_FLAGS = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE",
    "--xla_gpu_graph_enable_concurrent_region=true",
)
EXIT_NONFINITE = 3  # a program's runs became non-finite under stop_on_nonfinite
EXIT_USAGE = 2
POLL_SECONDS = 1.0


def child_environment(base: dict[str, str]) -> dict[str, str]:
    """The environment of a program's process: this process's opiq_jax first on its path (also when run from a
    source checkout by path), the card's memory shared (no process takes 75 % of it at start), and XLA's
    command buffers for whole loops unless the user's ``XLA_FLAGS`` already choose command buffers or
    ``JAX_PLATFORMS`` is ``cpu`` (the flags would then only change the compilation cache's keys)."""
    here = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (here, base.get("PYTHONPATH", "")) if p)
    env = dict(base, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONPATH=path)
    flags = env.get("XLA_FLAGS", "")
    if "xla_gpu_enable_command_buffer" not in flags and env.get("JAX_PLATFORMS", "").strip() != "cpu":
        env["XLA_FLAGS"] = " ".join([flags, *COMMAND_BUFFER_FLAGS]).strip()
    return env


def holds_device_memory() -> str | None:
    """A line for the user when this process took most of a GPU's memory at start (JAX's default), which the
    programs' processes then lack; None on a CPU or with preallocation off."""
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() in ("false", "0"):
        return None
    if jax.default_backend() != "gpu":
        return None
    return ("opiq-jax: this process took 75 % of the GPU's memory when JAX started, which the programs' processes "
            "then lack: set XLA_PYTHON_CLIENT_PREALLOCATE=false before importing opiq_jax (the command lines do)")


def mps_control_pipe() -> Path:
    """Where a running MPS control daemon listens (``CUDA_MPS_PIPE_DIRECTORY``, else NVIDIA's default folder)."""
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control"


def mps_advice() -> str | None:
    """A line for the user when the programs would take turns on a GPU: an NVIDIA machine without MPS running."""
    has_nvidia = any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia"))
    if not has_nvidia or mps_control_pipe().exists():
        return None
    return ("opiq-jax: the programs run at once in processes of their own, but NVIDIA MPS is not running, so on one "
            "GPU they take turns (no faster than one after another). Start it first: nvidia-cuda-mps-control -d "
            "(stop it after with: echo quit | nvidia-cuda-mps-control)")


def last_logged_step(folder: Path) -> int:
    """The step of the newest row of ``folder``'s metrics (0 if none yet), read from the file's end."""
    path = folder / METRICS_FILE
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return 0
    complete = tail[: tail.rfind("\n")].splitlines()  # a torn last row is left out
    for line in reversed(complete):
        # quoted fields (a setting's label) hold commas; the step is the fourth field from the end
        fields = line.rsplit(",", 3)
        if len(fields) == 4 and fields[1].isdigit():
            return int(fields[1])
    return 0


def write_program_config(folder: Path, experiment, say=print) -> None:
    """The program's ``config.json``, from which its process rebuilds it, written under the folder's lock;
    refuses a folder of another experiment, or one that another process is writing."""
    prepare_folder(folder)
    with FolderLock(folder, warn=say):
        require_same_experiment(folder, experiment)
        atomic_write_bytes(folder / CONFIG_FILE, json.dumps(experiment.to_json(), indent=1).encode())


def program_command(folder: Path, options: dict) -> list[str]:
    return [sys.executable, "-m", "opiq_jax.host.processes", str(folder), json.dumps(options), str(os.getpid())]


class ForwardSignals(SignalHandlers):
    """SIGINT and SIGTERM sent to this process go on to the programs' processes, which stop after their chunk
    in flight with a checkpoint (a second signal stops them at once, as for one program)."""

    def __init__(self, children: dict[str, subprocess.Popen]):
        self.children, self.signum = children, None

    def handle(self, signum, frame) -> None:
        del frame
        self.signum = signum
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signum)


def wait_with_progress(children: dict[str, subprocess.Popen], folders: dict[str, Path], totals: dict[str, int],
                       progress: bool) -> None:
    """Waits for every process; one bar of all the programs' steps, read from their metrics as they grow. A
    program whose runs became non-finite under ``stop_on_nonfinite`` stops the others (they checkpoint)."""
    bar = tqdm(total=sum(totals.values()), unit="step", disable=not progress, dynamic_ncols=True,
               desc=f"{len(children)} programs at once")
    stopping_others = False
    while True:
        running = [name for name, child in children.items() if child.poll() is None]
        if not stopping_others and any(c.returncode == EXIT_NONFINITE for c in children.values()):
            stopping_others = True
            for name in running:
                children[name].send_signal(signal.SIGTERM)
        steps = {name: last_logged_step(folders[name]) for name in children}
        bar.n = sum(steps.values())
        bar.set_postfix_str(" ".join(f"{name} {steps[name] / totals[name]:.0%}" for name in children), refresh=False)
        bar.refresh()
        if not running:
            break
        time.sleep(POLL_SECONDS)
    bar.close()


def exit_text(code: int) -> str:
    """``exit code 1``, or the signal that ended the process (``SIGKILL``) for a negative code."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit code {code}"


def raise_for_exits(children: dict[str, subprocess.Popen], signum: int | None, totals: dict[str, int],
                    folders: dict[str, Path]) -> None:
    """One error for the programs' exits, the gravest first: a failed process (:class:`ProgramFailed`), a
    refused input, runs that became non-finite, then a stop that was asked for."""
    codes = {name: child.returncode for name, child in children.items()}
    asked = {signum} if signum is not None else set()
    if EXIT_NONFINITE in codes.values():
        asked.add(signal.SIGTERM)  # wait_with_progress stopped the others
    stopped = {n for n, c in codes.items() if any(c in (128 + s, -s) for s in asked)}
    failed = {n: c for n, c in codes.items() if c not in (0, EXIT_NONFINITE, EXIT_USAGE) and n not in stopped}
    if failed:
        raise ProgramFailed("the process of " + ", ".join(f"{n} ({exit_text(c)})" for n, c in failed.items())
                            + " failed (its output is above); the other programs' progress is kept; run the same "
                            "command again to resume")
    refused = [n for n, c in codes.items() if c == EXIT_USAGE]
    if refused:
        raise UsageError(f"the program(s) {', '.join(refused)} refused their input (their message is above)")
    nonfinite = [n for n, c in codes.items() if c == EXIT_NONFINITE]
    if nonfinite:
        raise NonFiniteRuns(f"runs of {', '.join(nonfinite)} became non-finite (--stop-on-nonfinite); the metrics "
                            "and checkpoints up to then are kept")
    if signum is not None:
        raise Stopped(sum(last_logged_step(folders[name]) for name in children), sum(totals.values()), signum)


def start_programs(todo: dict, folders: dict[str, Path], options: dict, signals: ForwardSignals) -> None:
    """Starts a process per program into ``signals.children``; a stop asked for meanwhile starts no more."""
    env = child_environment(dict(os.environ))
    for name in todo:
        if signals.signum is not None:
            return
        # a group of its own: a Ctrl-C in the terminal reaches this process only, which passes it on once
        signals.children[name] = subprocess.Popen(program_command(folders[name], options), env=env,
                                                  process_group=0)


def run_programs_at_once(todo: dict, out: Path, *, progress: bool = LOOP_DEFAULTS["progress"], say=print,
                         **options) -> None:
    """Trains every program of ``todo`` (the unfinished ones of ``Experiment.programs``) at once, each in a
    process of its own writing ``out/<program>``; ``options``: :func:`opiq_jax.host.host_loop.run_experiment`'s
    loop options (checkpoint_seconds, max_seconds, stop_on_nonfinite, verbose, track) and ``plugins``, the modules each
    process imports first (they register the methods, parts and environments not of the paper). The processes rebuild
    their programs from ``config.json``.

    Raises :class:`Stopped` after SIGINT or SIGTERM (each program checkpointed), :class:`NonFiniteRuns`,
    :class:`UsageError` or :class:`ProgramFailed`; the others' progress is kept either way.
    """
    if not todo:
        return
    folders = {name: out / name for name in todo}
    for name, group in todo.items():  # every folder checked before any process starts
        write_program_config(folders[name], group, say)
    for advice in (mps_advice() if len(todo) > 1 else None, holds_device_memory()):
        if advice:
            say(advice)
    totals = {name: group.static.total_steps for name, group in todo.items()}
    with ForwardSignals({}) as signals:
        try:
            start_programs(todo, folders, options, signals)
            wait_with_progress(signals.children, folders, totals, progress)
        except BaseException:  # this process fails: the programs stop too (checkpointed), none trains on alone
            signals.handle(signal.SIGTERM, None)
            for child in signals.children.values():
                child.wait()
            raise
    raise_for_exits(signals.children, signals.signum, totals, folders)


# ------------------------------------------------------------------------- the program's process


def end_with_parent(parent_pid: int) -> None:
    """Asks Linux to send this process SIGTERM when the process that started it dies (a killed parent leaves no
    program training on its own: it checkpoints and stops); exits if that parent is already gone."""
    try:
        failed = ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM)) != 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        failed = True
    if failed:
        print(f"opiq-jax: {sys.argv[1]}: this system cannot stop a program with its parent; if the parent is killed, "
              "stop this process yourself (SIGTERM checkpoints it)", file=sys.stderr, flush=True)
    if os.getppid() != parent_pid:
        sys.exit(f"opiq-jax: the process that started {sys.argv[1]} is gone")


def program_main(argv: list[str]) -> int:
    """``python -m opiq_jax.host.processes FOLDER OPTIONS_JSON PARENT_PID``: trains the program whose
    ``config.json`` is in FOLDER; the exit code says how it ended (0: done or time-boxed)."""
    folder, options, parent_pid = Path(argv[0]), json.loads(argv[1]), int(argv[2])
    end_with_parent(parent_pid)


    try:
        for module in options.pop("plugins", []):  # the parent's: they register the program's own methods
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - whatever the module raises is one line, as in the parent
                raise UsageError(f"importing the plugin {module} failed ({type(e).__name__}: {e})") from None
        run_experiment(experiment_from_configs(folder / CONFIG_FILE), folder, progress=False, **options)
    except Stopped as e:
        return e.exit_code
    except NonFiniteRuns as e:
        print(f"opiq-jax: {folder.name}: {e}", file=sys.stderr, flush=True)
        return EXIT_NONFINITE
    except (UsageError, ResultsError) as e:
        print(f"opiq-jax: {folder.name}: error: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(program_main(sys.argv[1:]))
