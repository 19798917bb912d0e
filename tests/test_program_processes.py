"""Programs trained at once, each in a process of its own (``programs="parallel"``): the same numbers as one
after another, a killed parent leaves its programs checkpointed and resumable, and the pieces (the metrics'
tail, the exit codes, the signals passed on, the processes' environment) behave."""

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import opiq_jax
from opiq_jax.common.errors import NonFiniteRuns, ProgramFailed, Stopped, UsageError
from opiq_jax.host.host_loop import StopSignals
from opiq_jax.host.processes import (
    COMMAND_BUFFER_FLAGS, ForwardSignals, child_environment, last_logged_step, raise_for_exits,
)
from opiq_jax.host.train_programs import run_methods
from opiq_jax.runs.results_folder import is_finished
from opiq_jax.store.files import CHECKPOINT_FILE, checkpoint_chunk
from opiq_jax.store.metrics import METRICS_HEADER, append_metric_rows

ROOT = Path(__file__).resolve().parents[1]
# two programs: OPIQ's (the methods that differ only in numbers) and DQN + RND's
EXPERIMENT = dict(env="chain", methods=("opiq", "dqn_rnd"), seeds=2, steps=1000, log_every=100, chain_length=10,
                  buffer_size=400, target_update=100, hidden=(16, 16), batch_size=16)


def train(out: Path, **kwargs):
    return opiq_jax.train(**EXPERIMENT, out=out, progress=False, checkpoint_every=0, **kwargs)


def wait_unlocked(folder: Path, timeout: float = 120.0) -> None:
    """Waits until no process holds ``folder``'s lock (a program's process has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lock = folder / ".lock"
        if not lock.exists():
            return
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError:
                time.sleep(0.1)
    raise AssertionError(f"{folder} is still locked after {timeout} s")


def test_parallel_programs_match_sequential_after_their_parent_is_killed(tmp_path):
    reference = train(tmp_path / "sequential").metrics
    out = tmp_path / 'parallel, "ü✓"'  # a comma, a quote and unicode in the folder's name
    code = (f"import opiq_jax; opiq_jax.train(**{EXPERIMENT!r}, out={str(out)!r}, progress=False, checkpoint_every=0, "
            "programs='parallel')")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while max(last_logged_step(out / "plain"), last_logged_step(out / "rnd")) == 0:  # the first chunk of either
        if parent.poll() is not None or time.monotonic() > deadline:
            parent.kill()
            raise AssertionError(parent.communicate(timeout=30)[0].decode()[-3000:])
        time.sleep(0.02)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for name in ("plain", "rnd"):  # each program's process checkpoints and exits when its parent dies
        wait_unlocked(out / name)
    chunks = [checkpoint_chunk(out / name / CHECKPOINT_FILE) for name in ("plain", "rnd")
              if (out / name / CHECKPOINT_FILE).exists()]
    assert any(0 < c < 10 for c in chunks), f"no program was stopped mid-run by its parent's death: {chunks}"
    resumed = train(out, programs="parallel")
    assert resumed.finished
    assert resumed.metrics == reference


def test_programs_mode_is_checked_and_one_program_ignores_it(tmp_path):
    with pytest.raises(UsageError, match="programs must be one of"):
        opiq_jax.train("chain", ("opiq",), 1, steps=100, log_every=100, out=tmp_path / "x", programs="threads")
    from opiq_jax.host.plan import plan_experiment

    experiment = plan_experiment("chain", ("opiq",), 1, options=dict(steps=100, log_every=100, chain_length=10,
                                                                     buffer_size=200))
    states = run_methods(experiment, tmp_path / "one", programs="parallel", progress=False, verbose=False)
    assert set(states) == {"plain"} and is_finished(tmp_path / "one")  # one program trains here, as always


def test_last_logged_step_reads_the_newest_whole_row(tmp_path):
    assert last_logged_step(tmp_path) == 0  # no metrics yet
    path = tmp_path / "metrics.csv"
    odd = 'm=0.5,label="q, ü ✓"'  # a comma, a quote and unicode in a setting's label
    append_metric_rows(path, [(0, "opiq", odd, 0, 100, "train_return", 1.5), (1, "opiq", odd, 1, 200, "loss", -2.0)])
    assert path.read_text(encoding="utf-8").startswith(",".join(METRICS_HEADER))
    assert last_logged_step(tmp_path) == 200
    with open(path, "a", encoding="utf-8") as f:
        f.write('0,opiq,"m=1,x",0,300,train_ret')  # a row torn by a kill mid-append
    assert last_logged_step(tmp_path) == 200


def test_exit_codes_become_one_error():
    children = lambda *codes: {f"p{i}": SimpleNamespace(returncode=c) for i, c in enumerate(codes)}  # noqa: E731
    totals, folders = {"p0": 10, "p1": 10}, {"p0": Path("/nonexistent/a"), "p1": Path("/nonexistent/b")}
    raise_for_exits(children(0, 0), None, totals, folders)  # all done: nothing to say
    with pytest.raises(Stopped):
        raise_for_exits(children(143, 0), signal.SIGTERM, totals, folders)  # one stopped, one had finished
    with pytest.raises(NonFiniteRuns, match="p1"):
        raise_for_exits(children(143, 3), None, totals, folders)  # the other stopped by the parent after it
    with pytest.raises(UsageError):
        raise_for_exits(children(2, 0), None, totals, folders)
    with pytest.raises(opiq_jax.ProgramFailed, match=r"p0 \(SIGKILL\)"):  # the same class, exported at the top
        raise_for_exits(children(-9, 0), None, totals, folders)
    with pytest.raises(ProgramFailed, match=r"p1 \(exit code 1\)"):  # a crash is not hidden by a stop or NaNs
        raise_for_exits(children(143, 1), signal.SIGTERM, totals, folders)
    with pytest.raises(ProgramFailed, match=r"p1 \(exit code 1\)"):
        raise_for_exits(children(3, 1), None, totals, folders)


def test_signals_are_passed_on_to_every_running_program():
    waiter = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); print(flush=True); "
              "time.sleep(60)")
    children = {n: subprocess.Popen([sys.executable, "-c", waiter], stdout=subprocess.PIPE) for n in ("a", "b")}
    for child in children.values():
        child.stdout.readline()  # its handler is installed
    with ForwardSignals(children) as signals:
        signals.handle(signal.SIGTERM, None)
    assert signals.signum == signal.SIGTERM
    assert [c.wait(timeout=30) for c in children.values()] == [7, 7]


def test_a_signal_delivered_twice_at_once_is_one_request():
    """A scheduler signals every process of a job and the parent passes its signal on: one stop after the chunk;
    a repeat a second or more later stops at once."""
    signals = StopSignals(lambda _: None)
    signals.handle(signal.SIGTERM, None)
    signals.handle(signal.SIGTERM, None)  # the same request again: no exception
    assert signals.signum == signal.SIGTERM
    signals.first_at -= StopSignals.REPEAT_SECONDS
    with pytest.raises(Stopped):
        signals.handle(signal.SIGINT, None)


def test_environment_shares_memory_and_keeps_the_users_command_buffers():
    env = child_environment({"XLA_FLAGS": "--xla_foo=1", "PYTHONPATH": "/mine"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/mine"]  # this opiq_jax, then the user's path
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["XLA_FLAGS"].split() == ["--xla_foo=1", *COMMAND_BUFFER_FLAGS]
    mine = "--xla_gpu_enable_command_buffer=FUSION"
    assert child_environment({"XLA_FLAGS": mine})["XLA_FLAGS"] == mine
    assert "XLA_FLAGS" not in child_environment({"JAX_PLATFORMS": "cpu"})  # no GPU: nothing to launch as graphs


def test_a_program_folder_being_written_is_refused_before_any_process_starts(tmp_path):
    from opiq_jax.common.errors import ResultsError
    from opiq_jax.host.plan import plan_experiment
    from opiq_jax.host.processes import write_program_config
    from opiq_jax.store.files import FolderLock

    experiment = plan_experiment("chain", ("opiq",), 1, options=dict(steps=100, log_every=100, chain_length=10))
    folder = tmp_path / "plain"
    folder.mkdir()
    with FolderLock(folder), pytest.raises(ResultsError, match="being written by"):
        write_program_config(folder, experiment)
    assert not (folder / "config.json").exists()
    write_program_config(folder, experiment)  # free again: written
    assert (folder / "config.json").exists()
