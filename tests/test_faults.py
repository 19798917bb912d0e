"""Fault injection: whatever stops a run, nothing is lost and every resume ends bit-identical.

A child process trains a small experiment and is killed with SIGKILL, either by itself at a chosen write
(half of the data written, then the kill: in the middle of a checkpoint, a metrics append, the config or
run_info) or by this process at a random moment; the next child resumes. After the last child, the
results folder must equal an uninterrupted run's byte for byte (metrics.csv) and array for array (the
final checkpoint). The same for a sweep. Then the failures that are not kills: a full disk, a corrupt
newest checkpoint, a second process on the same folder, SIGINT and SIGTERM.

Each test prints its figures (faults injected, resumes bit-identical); ``pytest -s`` shows them.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import opiq_jax
from opiq_jax.cli import main
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.host_loop import Stopped, run_experiment
from opiq_jax.runs import memory
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.store import files as results
from opiq_jax.store.files import (
    CHECKPOINT_FILE, METRICS_FILE, PREVIOUS_CHECKPOINT_FILE, ResultsError, read_checkpoint_arrays,
)

ROOT = Path(__file__).resolve().parents[1]
STATIC = static_for_env("chain", chain_length=8, total_steps=300, log_every=50, buffer_size=300, hidden=(16,))
EXPERIMENT = Experiment(STATIC, tuple(RunSpec(m, "m=2,c_action=10 \"odd\" ✓", s, method_hparams("chain", m))
                                      for m in ("opiq", "dqn_pc") for s in range(2)))
SWEEP_PRESET = {"env": "chain", "seeds": 2, "metric": "test_return",
                "static": {"chain_length": 8, "total_steps": 200, "log_every": 50, "buffer_size": 200, "hidden": [16]},
                "grids": [{"method": "opiq", "grid": {"c_action": [1, 10]}}, {"method": "dqn_pc", "grid": {}}]}

# A child that trains EXPERIMENT (or runs ``opiq-jax sweep``) and, with OPIQ_FAULT=KIND:N, kills itself in the
# middle of its N-th write to a file whose name holds KIND (half the data written first).
CHILD = """
import os, signal, sys
from opiq_jax.store import files as results
kind, nth = (os.environ.get("OPIQ_FAULT") or ":0").split(":")
nth, seen = int(nth), [0]
write = results.write_all
def dying_write(f, data):
    if kind and kind in os.path.basename(f.name):
        seen[0] += 1
        if seen[0] == nth:
            write(f, data[: len(data) // 2]); f.flush(); os.kill(os.getpid(), signal.SIGKILL)
    write(f, data)
results.write_all = dying_write
print("ready", flush=True)
if sys.argv[1] == "train":
    from tests.test_faults import EXPERIMENT
    from opiq_jax.host.host_loop import run_experiment
    run_experiment(EXPERIMENT, sys.argv[2], progress=False, checkpoint_seconds=0)
else:
    from opiq_jax.cli import main
    main(["sweep", sys.argv[3], "--out", sys.argv[2], "--no-progress", "--checkpoint-every", "0"])
"""


def child(command: str, out: Path, fault: str = "", preset: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OPIQ_FAULT": fault}
    return subprocess.Popen([sys.executable, "-c", CHILD, command, str(out), str(preset or "")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_child(command: str, out: Path, fault: str = "", preset: Path | None = None, timeout: float = 300) -> int:
    proc = child(command, out, fault, preset)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode in (0, -signal.SIGKILL), err[-3000:]
    return proc.returncode


def kill_at_random(command: str, out: Path, rng: random.Random, preset: Path | None = None) -> int:
    """Starts a child and SIGKILLs it after a random delay once it runs; its return code (0 if it finished first)."""
    proc = child(command, out, preset=preset)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(2.0, 8.0))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=300)
    return proc.returncode


def final_arrays(folder: Path) -> dict[str, np.ndarray]:
    return read_checkpoint_arrays(folder / CHECKPOINT_FILE)[1]


def assert_same_results(folder: Path, reference: Path) -> None:
    assert (folder / METRICS_FILE).read_bytes() == (reference / METRICS_FILE).read_bytes()
    a, b = final_arrays(folder), final_arrays(reference)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run of EXPERIMENT."""
    out = tmp_path_factory.mktemp("straight")
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    return out


# Kill points: in the middle of the config, metrics appends, run_info and checkpoint writes (a checkpoint is
# written in dozens of pieces, one per array: the 5th, 30th and 60th piece land at different depths of it).
WRITE_FAULTS = ("config:1", "metrics:2", "checkpoint:5", "run_info:1", "checkpoint:30", "metrics:1", "checkpoint:60",
                "checkpoint:1")


def test_sigkill_at_writes_and_at_random_moments_then_resume_bit_identical(tmp_path, straight):
    out, rng = tmp_path / "killed", random.Random(7)
    killed = [run_child("train", out, fault) for fault in WRITE_FAULTS]
    killed += [kill_at_random("train", out, rng) for _ in range(2)]
    # the last resume in this process (its compiled chunk is the straight run's): a child less to start
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    assert_same_results(out, straight)
    faults = sum(code == -signal.SIGKILL for code in killed)
    print(f"\ntrain: {faults} SIGKILLs ({len(WRITE_FAULTS)} at chosen writes, the rest at random moments), "
          "1 resume chain, final metrics and checkpoint bit-identical")
    assert faults >= len(WRITE_FAULTS)


def test_sigkill_during_a_sweep_then_resume_bit_identical(tmp_path):
    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(SWEEP_PRESET))
    reference, out = tmp_path / "straight", tmp_path / "killed"
    sweep = ["sweep", str(preset), "--no-progress", "--checkpoint-every", "0"]
    main([*sweep, "--out", str(reference)])  # the uninterrupted sweep, in this process as `straight` above
    faults = ("plan:1", "checkpoint:7", "metrics:3", "settings:1")  # plan.json, then the batches, then the ranking
    killed = [run_child("sweep", out, fault, preset) for fault in faults]
    killed.append(kill_at_random("sweep", out, random.Random(3), preset))
    main([*sweep, "--out", str(out)])  # the last resume, in this process as well
    batches = sorted(p.name for p in reference.glob("batch_*"))
    assert batches and batches == sorted(p.name for p in out.glob("batch_*"))
    for batch in batches:
        assert_same_results(out / batch, reference / batch)
    assert (out / "settings.csv").read_bytes() == (reference / "settings.csv").read_bytes()
    print(f"\nsweep: {sum(c == -signal.SIGKILL for c in killed)} SIGKILLs, settings.csv and {len(batches)} batches "
          "bit-identical")


def test_a_full_disk_keeps_the_previous_checkpoint_and_metrics(tmp_path, straight, monkeypatch):
    out = tmp_path / "full"
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, stop_after_chunks=2)
    before = {name: (out / name).read_bytes() for name in (CHECKPOINT_FILE, METRICS_FILE)}
    write = results.write_all

    def full_disk(f, data):
        write(f, data[: len(data) // 3])
        raise OSError(errno.ENOSPC, "No space left on device")

    for doomed in ("metrics", "checkpoint"):  # the append fails; then (with metrics going through) the checkpoint
        monkeypatch.setattr(results, "write_all", lambda f, data, doomed=doomed: (
            full_disk(f, data) if doomed in os.path.basename(f.name) else write(f, data)))
        with pytest.raises(OSError, match="No space left"):
            run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
        assert (out / CHECKPOINT_FILE).read_bytes() == before[CHECKPOINT_FILE]
        if doomed == "metrics":
            assert (out / METRICS_FILE).read_bytes() == before[METRICS_FILE]
        assert not list(out.glob(".*.tmp"))  # no half-written temporary file left behind
    monkeypatch.setattr(results, "write_all", write)
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    assert_same_results(out, straight)


def test_a_corrupt_newest_checkpoint_is_named_moved_aside_and_the_one_before_used(tmp_path, straight, capsys):
    out = tmp_path / "corrupt"
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, stop_after_chunks=3)
    assert (out / PREVIOUS_CHECKPOINT_FILE).exists()
    data = (out / CHECKPOINT_FILE).read_bytes()
    (out / CHECKPOINT_FILE).write_bytes(data[: len(data) // 2])  # truncated
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    printed = capsys.readouterr()
    assert f"{out / CHECKPOINT_FILE} is truncated or damaged" in printed.out + printed.err
    assert len(list(out.glob(f"{CHECKPOINT_FILE}.corrupt-*"))) == 1
    assert_same_results(out, straight)


def test_a_second_process_on_the_same_folder_is_refused_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    out = tmp_path / "locked"
    holder = child("train", out)
    assert holder.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 120
    while not (out / ".lock").exists() or not (out / ".lock").read_text():
        assert time.monotonic() < deadline, "the child never locked its folder"
        time.sleep(0.05)
    with pytest.raises(ResultsError, match=f"is being written by process {holder.pid} on "):
        run_experiment(EXPERIMENT, out, progress=False)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=60)
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)  # the dead holder's lock is taken over
    printed = capsys.readouterr()
    assert f"had a lock of process {holder.pid}" in printed.out + printed.err
    assert (out / ".lock").read_text() == ""  # released on exit


SIGNALLED = """
import sys
from opiq_jax.cli import main
main(["train", "--chain-length", "8", "--seeds", "2", "--steps", "200000", "--log-every", "100", "--hidden", "16",
      "--buffer-size", "500", "--out", sys.argv[1], "--no-plot", "--no-progress", "--checkpoint-every", "1000"])
"""


def wait_for_rows(metrics: Path, timeout: float = 300) -> None:
    """Returns once ``metrics`` holds a chunk's rows (a condition, not a time: a loaded machine only takes longer)."""
    deadline = time.monotonic() + timeout
    while not (metrics.exists() and metrics.read_bytes().count(b"\r\n") > 1):
        assert time.monotonic() < deadline, f"no chunk reached {metrics}"
        time.sleep(0.05)


@pytest.mark.parametrize("signum, when", [(signal.SIGINT, "training"), (signal.SIGTERM, "training"),
                                          (signal.SIGTERM, "compiling")])
def test_sigint_and_sigterm_stop_cleanly_with_a_checkpoint_and_one_line(tmp_path, signum, when):
    out = tmp_path / "signalled"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "no-cache")}
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    marker = "compiling" if when == "compiling" else "compiled in"
    lines = []
    while not any(marker in line for line in lines):
        line = proc.stdout.readline()
        assert line, f"the child ended early: {proc.communicate()[1][-2000:]}"
        lines.append(line)
    if when == "training":
        wait_for_rows(out / METRICS_FILE)  # a chunk in: whatever the machine's load, there is progress to keep
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("opiq-jax: stopped at step ") and last.endswith("of 200,000; run the same command to resume")
    step = int(last.removeprefix("opiq-jax: stopped at step ").split(" ")[0].replace(",", ""))
    if when == "training":
        assert step > 0 and read_checkpoint_arrays(out / CHECKPOINT_FILE)[0] * 100 == step  # progress kept
    else:
        assert step == 0 and not (out / CHECKPOINT_FILE).exists()


def test_stopped_carries_the_conventional_exit_code():
    stop = Stopped(100, 300, signal.SIGTERM)
    assert stop.exit_code == 143 and str(stop) == "stopped at step 100 of 300; run the same command to resume"
    assert isinstance(stop, KeyboardInterrupt)  # no `except Exception` swallows a stop


def test_a_run_gone_non_finite_is_flagged_and_reported_while_the_others_go_on(tmp_path, capsys):
    """A learning rate of 1e30 sends one setting's parameters to infinity; the paper's setting trains on."""
    import opiq_jax

    grid = {"lr": [5e-4, 1e30]}
    small = dict(env="chain", methods=["opiq"], seeds=1, steps=600, log_every=300, chain_length=6, hidden=(16,),
                 buffer_size=600, progress=False, grid=grid)
    flagged = opiq_jax.train(out=tmp_path / "flagged", **small)
    final = {r["setting"]: r["value"] for r in flagged.metrics if r["metric"] == "nonfinite" and r["step"] == 600}
    assert final == {"lr=0.0005": 0.0, "lr=1e+30": 1.0}
    losses = {r["setting"]: r["value"] for r in flagged.metrics if r["metric"] == "loss" and r["step"] == 600}
    assert np.isfinite(losses["lr=0.0005"])
    printed = capsys.readouterr().out
    assert "run 1 (opiq, lr=1e+30, seed 0) has NaN or infinite loss, Q-values or parameters by step 300" in printed
    assert "the other runs go on" in printed
    with pytest.raises(opiq_jax.NonFiniteRuns, match="--stop-on-nonfinite"):
        opiq_jax.train(out=tmp_path / "stopped", stop_on_nonfinite=True, **small)
    assert results.read_checkpoint_arrays(tmp_path / "stopped" / CHECKPOINT_FILE)[0] == 1  # kept up to that chunk


# ------------------------------------------------------------------------------------ the metrics, guarded


def interrupted_run(tmp_path: Path, name: str) -> Path:
    """EXPERIMENT stopped after three of its six chunks, each checkpointed."""
    out = tmp_path / name
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, stop_after_chunks=3)
    return out


def cut_half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def without_header(data: bytes) -> bytes:
    return data.split(b"\r\n", 1)[1]


METRICS_DAMAGE = {  # what a user or a crash may leave of metrics.csv, and how the resume names it
    "deleted": (None, "was missing"),
    "cut in half": (cut_half, "was cut mid-line"),
    "last line cut": (lambda data: data[:-7], "was cut mid-line"),
    "without its header": (without_header, "was without its header"),
    "short by a whole chunk": (lambda data: data[: data.rindex(b"\r\n", 0, len(data) - 2) + 2], "was short"),
    "a value changed": (lambda data: data.replace(b",loss,", b",loss,9", 1), "was different from the rows"),
}


@pytest.mark.parametrize("damage", list(METRICS_DAMAGE))
def test_a_damaged_metrics_file_is_restored_from_the_checkpoints_copy_and_the_resume_leaves_no_gap(
        tmp_path, straight, damage, capsys):
    out = interrupted_run(tmp_path, "damaged")
    change, named = METRICS_DAMAGE[damage]
    metrics = out / METRICS_FILE
    if change is None:
        metrics.unlink()
    else:
        metrics.write_bytes(change(metrics.read_bytes()))
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    printed = capsys.readouterr()
    said = [line for line in (printed.out + printed.err).splitlines() if "restored its" in line]
    assert len(said) == 1 and named in said[0] and "rows up to step 150 from the checkpoint's copy" in said[0], said
    assert_same_results(out, straight)  # every row, none twice: 961 rows in the case the issue measured
    kept = list(out.glob(f"{METRICS_FILE}.damaged-*"))
    assert len(kept) == (0 if change is None else 1)  # the file found is set aside, never deleted


def test_a_metrics_file_deleted_or_changed_while_the_run_goes_on_is_put_back(tmp_path, straight, capsys):
    out, chunks = tmp_path / "meddled", []

    def meddle():  # called after every chunk, as a user in another window might
        chunks.append(1)
        if len(chunks) == 2:
            (out / METRICS_FILE).unlink()
        if len(chunks) == 4:
            (out / METRICS_FILE).write_bytes(cut_half((out / METRICS_FILE).read_bytes()))
        return None

    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, should_stop=meddle)
    printed = capsys.readouterr().out
    assert "was deleted while the run went on: put back its" in printed
    assert "was changed while the run went on: put back its" in printed
    assert_same_results(out, straight)


def test_sigkill_while_the_metrics_are_restored_loses_nothing(tmp_path, straight):
    out = interrupted_run(tmp_path, "restoring")
    (out / METRICS_FILE).write_bytes(cut_half((out / METRICS_FILE).read_bytes()))
    assert run_child("train", out, "metrics:1") == -signal.SIGKILL  # killed in the middle of the restoring write
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    assert_same_results(out, straight)


def test_a_checkpoint_records_the_rows_it_covers_and_keeps_a_copy(tmp_path):
    import hashlib
    import zlib

    out = interrupted_run(tmp_path, "record")
    saved = results.read_checkpoint_file(out / CHECKPOINT_FILE)
    data = (out / METRICS_FILE).read_bytes()
    assert saved.chunk == 3 and saved.metrics["rows"] == data.count(b"\r\n") - 1  # every row but the header
    assert saved.metrics["bytes"] == len(data) and saved.metrics["sha256"] == hashlib.sha256(data).hexdigest()
    assert zlib.decompress(saved.metrics_copy) == data


def test_finished_run_whose_checkpoints_were_deleted_keeps_its_metrics_and_trains_nothing(tmp_path, straight,
                                                                                          capsys):
    out = tmp_path / "finished"
    shutil.copytree(straight, out)
    for checkpoint in out.glob("checkpoint*"):
        checkpoint.unlink()
    before = (out / METRICS_FILE).read_bytes()
    assert run_experiment(EXPERIMENT, out, progress=False) is None
    assert (out / METRICS_FILE).read_bytes() == before
    assert "finished already: its metrics reach step 300 for every run" in capsys.readouterr().out


@pytest.mark.parametrize("loss", ["deleted", "both damaged"])
def test_rows_no_checkpoint_covers_are_kept_aside_never_deleted(tmp_path, straight, loss, capsys):
    out = interrupted_run(tmp_path, "uncovered")
    before = (out / METRICS_FILE).read_bytes()
    for checkpoint in out.glob("checkpoint*"):
        if loss == "deleted":
            checkpoint.unlink()
        else:
            checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    (kept,) = out.glob(f"{METRICS_FILE}.uncovered-*")
    assert kept.read_bytes() == before
    assert f"kept it as {kept.name} and training from step 0" in capsys.readouterr().out
    assert_same_results(out, straight)


def test_a_checkpoint_without_a_metrics_copy_refuses_a_gap_in_one_line(tmp_path):
    """Checkpoints written before they kept the metrics: a resume over a gap is refused, a whole file resumes."""
    out = interrupted_run(tmp_path, "older")
    for name in (CHECKPOINT_FILE, PREVIOUS_CHECKPOINT_FILE):
        without_metrics_record(out / name)
    whole = (out / METRICS_FILE).read_bytes()
    (out / METRICS_FILE).write_bytes(cut_half(whole))
    with pytest.raises(ResultsError, match="lacks rows its checkpoint covers .* kept no copy of the metrics"):
        run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0)
    (out / METRICS_FILE).write_bytes(whole)
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, stop_after_chunks=1)
    assert results.read_checkpoint_file(out / CHECKPOINT_FILE).metrics["rows"] == 4 * (whole.count(b"\r\n") - 1) // 3


def without_metrics_record(path: Path) -> None:
    """Rewrites a checkpoint as the format before it kept the metrics: no record in its header, no copy."""
    import hashlib
    import struct

    data, magic = path.read_bytes(), len(results.CHECKPOINT_MAGIC)
    (length,) = struct.unpack("<Q", data[magic : magic + 8])
    header = json.loads(data[magic + 8 : magic + 8 + length])
    copy = header.pop("metrics")["copy"]
    encoded = json.dumps(header).encode()
    body = results.CHECKPOINT_MAGIC + struct.pack("<Q", len(encoded)) + encoded + data[magic + 8 + length : -32 - copy]
    path.write_bytes(body + hashlib.sha256(body).digest())


# ------------------------------------------------------------------------------------ a user's folder


def test_a_folder_that_is_not_an_experiment_is_refused_and_left_as_it_was(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / METRICS_FILE).write_text("my own numbers, 1, 2, 3\n")
    (user / "run_info.json").write_text('{"mine": true}')
    (user / "notes, \"quoted\" ✓.txt").write_text("unicode and a comma")
    before = {p.name: p.read_bytes() for p in user.iterdir()}
    with pytest.raises(ResultsError, match="already holds files that opiq-jax did not write"):
        run_experiment(EXPERIMENT, user, progress=False)
    with pytest.raises(ResultsError, match="already holds files that opiq-jax did not write"):
        opiq_jax.sweep(SWEEP_PRESET, out=user, progress=False)
    assert {p.name: p.read_bytes() for p in user.iterdir()} == before
    empty = tmp_path / "empty"
    (empty / "sub" / ".ipynb_checkpoints").mkdir(parents=True)
    (empty / ".DS_Store").write_bytes(b"\0")  # what a file browser or a notebook leaves in any folder
    run_experiment(EXPERIMENT, empty, progress=False, stop_after_chunks=1)  # an empty folder is taken


# ------------------------------------------------------------------------------------ sweeps


def test_a_resumed_sweep_keeps_the_batches_it_planned_first_whatever_the_memory_says_now(tmp_path, capsys,
                                                                                          monkeypatch):
    """A resume trains the batches planned first (plan.json; for a sweep older than plan.json, its batch folders):
    a run's floats may depend on the size of the program it trains in, so a resume must not change it."""
    from opiq_jax.host import sweeping

    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(SWEEP_PRESET))
    out = tmp_path / "sweep"
    main(["sweep", str(preset), "--out", str(out), "--max-batch-runs", "2", "--no-progress"])
    assert json.loads((out / "plan.json").read_text()) == {"batches": {"plain": 3}}
    settings = (out / "settings.csv").read_bytes()
    for forget in ("batch_001", "settings.csv", "plan.json"):  # interrupted in its second batch, before plan.json
        path = out / forget
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    monkeypatch.setattr(sweeping, "available_device_bytes", lambda: 2**50)  # a card where all would fit at once
    with monkeypatch.context() as small:  # a card where the batches planned first do not fit: one line, nothing run
        small.setattr(memory, "available_device_bytes", lambda: 1000)
        with pytest.raises(SystemExit) as stop:
            main(["sweep", str(preset), "--out", str(out), "--no-progress"])
        assert stop.value.code == 2
        assert "batches were planned when it started (plan.json): resume it where it fits" in capsys.readouterr().err
    capsys.readouterr()
    main(["sweep", str(preset), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "resuming the batches planned first (plan.json): plain 3" in printed and "batch 2/3" in printed
    assert "1 batch(es)" not in printed and (out / "settings.csv").read_bytes() == settings


def test_the_selection_names_the_settings_tied_with_the_best_within_their_intervals(tmp_path):
    from opiq_jax.host.sweeping import tied_with_best, write_tables

    ranking = [dict(method="a", setting="x", auc=2.0, auc_low=1.5, auc_high=2.5, final_median=1.0, seeds=4),
               dict(method="a", setting="y", auc=1.6, auc_low=1.0, auc_high=1.8, final_median=1.0, seeds=4),
               dict(method="a", setting="z", auc=0.5, auc_low=0.2, auc_high=0.9, final_median=0.0, seeds=4),
               dict(method="b", setting="w", auc=1.0, auc_low=0.9, auc_high=1.1, final_median=1.0, seeds=4)]
    assert [t["setting"] for t in tied_with_best(ranking, ranking[0])] == ["y"]
    write_tables(tmp_path, ranking, "test_return")
    best = (tmp_path / "best.md").read_text()
    assert "| a | x | 2 (1.5, 2.5) | 1 | 3 | y |" in best and "| b | w | 1 (0.9, 1.1) | 1 | 1 | none |" in best


# ------------------------------------------------------------------------------------ issue 66: disks and Ctrl-C

CLI_SMALL = ["--chain-length", "6", "--hidden", "16", "--buffer-size", "600", "--steps", "600", "--log-every", "300",
             "--seeds", "1", "--no-progress", "--checkpoint-every", "0"]
PNG_START, PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"


def whole_figures(folder: Path) -> list[str]:
    """The PNGs in ``folder``, each checked whole (its signature first, its end chunk last)."""
    figures = sorted(folder.glob("*.png"))
    for figure in figures:
        data = figure.read_bytes()
        assert data.startswith(PNG_START) and data.endswith(PNG_END), figure
    return [f.name for f in figures]


@pytest.mark.parametrize("doomed, error, named", [
    ("metrics", (errno.ENOSPC, "No space left on device"), METRICS_FILE),
    ("checkpoint", (errno.EFBIG, "File too large"), CHECKPOINT_FILE),
    ("plot_test_return", (errno.ENOSPC, "No space left on device"), "plot_test_return.png"),
])
def test_a_full_disk_or_a_file_size_limit_names_the_file_it_was_writing(tmp_path, monkeypatch, capsys, doomed, error,
                                                                         named):
    """``write`` names no file: the one line names the file all the same, as the user knows it (not a temporary one)."""
    out, write, seen = tmp_path / "disk", results.write_all, []

    def failing(f, data):  # the second write of the doomed file fails: a folder with a chunk in it
        if doomed in os.path.basename(f.name):
            seen.append(1)
            if len(seen) == (1 if doomed.startswith("plot") else 2):
                raise OSError(*error)
        write(f, data)

    monkeypatch.setattr(results, "write_all", failing)
    with pytest.raises(SystemExit) as stop:
        main(["train", *CLI_SMALL, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 1 and err == (f"opiq-jax: error: {error[1]} ({out / named}); the results written before "
                                            "it are intact"), err
    assert not list(out.glob(".*.tmp")) and (out / METRICS_FILE).exists()


def test_a_figure_the_renderer_fails_on_is_named(tmp_path, monkeypatch):
    from opiq_jax.reporting.plotting import file_backend, save_atomically

    plt, _ = file_backend()
    fig = plt.figure()

    def full_disk(self, target, **kwargs):  # a font cache or a temporary file of the renderer's on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(fig), "savefig", full_disk)
    with pytest.raises(OSError) as caught:
        save_atomically(fig, tmp_path / "plot_x.png", dpi=50)
    assert caught.value.filename == str(tmp_path / "plot_x.png") and not list(tmp_path.iterdir())
    plt.close(fig)


def test_ctrl_c_while_plot_draws_ends_with_130_in_one_line_and_leaves_whole_figures(tmp_path, monkeypatch, capsys):
    from opiq_jax.reporting import plotting

    out = tmp_path / "drawn"
    main(["train", *CLI_SMALL, "--no-plot", "--out", str(out)])
    save, saved = plotting.save_atomically, []

    def interrupted_after_one(fig, path, dpi):  # Ctrl-C while the second figure is drawn
        if saved:
            raise KeyboardInterrupt
        saved.append(path)
        save(fig, path, dpi)

    monkeypatch.setattr(plotting, "save_atomically", interrupted_after_one)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["plot", str(out)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 130 and err == (f"opiq-jax: interrupted while drawing the figures of {out}; those drawn "
                                              "are whole: run the same command to draw them all"), err
    assert whole_figures(out) == [saved[0].name]


def command(*argv: str) -> subprocess.Popen:
    """``opiq-jax ARGV`` as a user starts it from a terminal (its entry point, :mod:`opiq_jax.launch`; Ctrl-C raises
    KeyboardInterrupt, where a test worker's children inherit it ignored), its output read line by line."""
    return subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})


AS_FROM_A_TERMINAL = """
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["opiq-jax", *sys.argv[1:]]
runpy.run_module("opiq_jax", run_name="__main__")
"""


def interrupt_at(proc: subprocess.Popen, marker: str) -> tuple[int, str]:
    """Sends SIGINT once ``proc`` has printed a line holding ``marker``; its return code and standard error."""
    while True:
        line = proc.stdout.readline()
        assert line, f"the command ended before {marker!r}: {proc.communicate()[1][-2000:]}"
        if marker in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


# What a Ctrl-C may meet once the command's work is done: the shutdown, whose own line says so; or the interpreter's
# last steps, where Python's default handler is back and the process ends by the signal (the shell's 130), silently.
ENDED = "opiq-jax: interrupted; every file it wrote is whole"


def test_ctrl_c_at_the_plot_commands_first_figure_exits_130_without_a_traceback(tmp_path):
    out = tmp_path / "plotted"
    main(["train", *CLI_SMALL, "--no-plot", "--out", str(out)])
    code, err = interrupt_at(command("plot", str(out)), "opiq-jax: wrote ")
    assert code in (130, -signal.SIGINT), err
    assert "Traceback" not in err and "Exception ignored" not in err and "training" not in err, err
    drawing = (f"opiq-jax: interrupted while drawing the figures of {out}; those drawn are whole: run the same "
               "command to draw them all")
    assert err.strip() in ("", ENDED, drawing), err
    assert len(whole_figures(out)) == 4


def test_ctrl_c_after_training_says_the_training_is_saved_and_how_to_draw_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "trained"

    def interrupted(self, metric="test_return"):  # Ctrl-C while the summary table is computed
        raise KeyboardInterrupt

    with monkeypatch.context() as during_the_table:
        during_the_table.setattr(opiq_jax.Results, "summary", interrupted)
        with pytest.raises(SystemExit) as stop:
            main(["train", *CLI_SMALL, "--out", str(out)])
    printed = capsys.readouterr()
    assert "opiq-jax: finished in" in printed.out and stop.value.code == 130
    assert printed.err.strip() == (f"opiq-jax: interrupted after training; the training is saved in {out}: draw its "
                                   f"figures with opiq-jax plot {out}")
    assert opiq_jax.load(out).finished and not list(out.glob("*.png"))
    again = tmp_path / "again"  # the same, by a real signal at the line that says training finished
    code, err = interrupt_at(command("train", *CLI_SMALL, "--out", str(again)), "opiq-jax: finished in")
    assert code in (130, -signal.SIGINT) and "Traceback" not in err and "nothing to keep" not in err, err
    kept = f"; the training is saved in {again}: draw its figures with opiq-jax plot {again}"
    assert err.strip().splitlines()[-1:] in ([], [ENDED], [f"opiq-jax: interrupted after training{kept}"],
                                             [f"opiq-jax: interrupted while drawing the figures{kept}"]), err
    assert opiq_jax.load(again).finished
