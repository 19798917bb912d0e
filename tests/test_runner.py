"""The host loop and the command line: results folder, resume after a kill, plots, one-line errors."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from opiq_jax.cli import main
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.host_loop import METRICS_FILE, run_experiment
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.runs.results_folder import read_metrics
from opiq_jax.store.files import CHECKPOINT_FILE
from tests.conftest import xla_flags_with_host_devices

STATIC = static_for_env("chain", chain_length=8, total_steps=3000, log_every=150, buffer_size=500, hidden=(16,))
EXPERIMENT = Experiment(STATIC, tuple(RunSpec(m, "paper", s, method_hparams("chain", m))
                                      for m in ("opiq", "dqn_pc") for s in range(2)))
METRICS = compiled_trainer(EXPERIMENT.static)[0].metric_names

KILLED_AT = 4
CHILD = f"""
import sys
from tests.test_runner import EXPERIMENT
from opiq_jax.host import host_loop
chunks, finished = [], host_loop.wait_for

def pausing(metrics):  # chunk {KILLED_AT + 1} was computed: its metrics and checkpoint wait here until the kill
    chunks.append(metrics)
    if len(chunks) == {KILLED_AT + 1}:
        print("mid-chunk", flush=True)
        sys.stdin.read()
    return finished(metrics)

host_loop.wait_for = pausing
host_loop.run_experiment(EXPERIMENT, sys.argv[1], progress=False, checkpoint_seconds=0)
"""


def output_until(stream, last: bytes) -> list[bytes]:
    """A child's output lines up to the one that says ``last`` (all of them, if it closes its output first)."""
    lines = []
    for line in iter(stream.readline, b""):
        lines.append(line.strip())
        if lines[-1] == last:
            break
    return lines


def checkpoint_chunk(folder: Path) -> int:
    rows = read_metrics(folder)
    return max(r["step"] for r in rows) // STATIC.log_every if rows else 0


def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    interrupted = tmp_path / "interrupted"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(interrupted)], cwd=Path(__file__).parents[1],
                             env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    said = output_until(child.stdout, b"mid-chunk")
    child.send_signal(signal.SIGKILL)  # in the middle of a later chunk (or, had the child failed, after it)
    child.wait()
    assert said and said[-1] == b"mid-chunk", b"\n".join(said).decode()[-3000:]
    killed_at = checkpoint_chunk(interrupted)
    assert killed_at == KILLED_AT and (interrupted / CHECKPOINT_FILE).exists(), "the kill must land mid-experiment"

    resumed_state = run_experiment(EXPERIMENT, interrupted, progress=False, checkpoint_seconds=0)
    straight_state = run_experiment(EXPERIMENT, tmp_path / "straight", progress=False, checkpoint_seconds=0)

    for a, b in zip(jax.tree.leaves(jax.random.key_data(resumed_state.runs.key)),
                    jax.tree.leaves(jax.random.key_data(straight_state.runs.key))):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(resumed_state.runs.weights), jax.tree.leaves(straight_state.runs.weights)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (interrupted / METRICS_FILE).read_text() == (tmp_path / "straight" / METRICS_FILE).read_text()
    rows = read_metrics(interrupted)
    assert len(rows) == len(EXPERIMENT.runs) * len(METRICS) * (STATIC.total_steps // STATIC.log_every)


def test_results_folder_contents(tmp_path):
    run_experiment(EXPERIMENT, tmp_path, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["static"]["chain_length"] == 8
    assert [r["method"] for r in config["runs"]] == ["opiq", "opiq", "dqn_pc", "dqn_pc"]
    assert config["runs"][0]["hparams"]["m"] == pytest.approx(0.5)
    header = (tmp_path / METRICS_FILE).read_text().splitlines()[0]
    assert header == "run,method,setting,seed,step,metric,value"
    # rerunning a finished experiment is a no-op resume
    run_experiment(EXPERIMENT, tmp_path, progress=False)
    other = Experiment(STATIC, EXPERIMENT.runs[:1])
    with pytest.raises(ValueError, match="different experiment"):
        run_experiment(other, tmp_path, progress=False)


def test_committed_results_read_from_gzip_and_unstarted_structures_add_nothing(tmp_path):
    """Results are committed as metrics.csv.gz; a structure subfolder with only its config reads as empty."""
    import gzip
    import shutil

    from opiq_jax.runs.results_folder import is_finished

    run_experiment(EXPERIMENT, tmp_path / "mix" / "plain", progress=False)
    expected = read_metrics(tmp_path / "mix" / "plain")
    plain = tmp_path / "mix" / "plain"
    with open(plain / METRICS_FILE, "rb") as src, gzip.open(plain / f"{METRICS_FILE}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (plain / METRICS_FILE).unlink()
    (tmp_path / "mix" / "rnd").mkdir()
    shutil.copy(plain / "config.json", tmp_path / "mix" / "rnd" / "config.json")
    assert read_metrics(tmp_path / "mix") == expected
    assert is_finished(plain) and not is_finished(tmp_path / "mix")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--m", "-1"], "--m must be >= 0"),
        (["train", "--method", "opiq", "nope"], "unknown method 'nope'"),
        (["train", "--steps", "1000", "--log-every", "300"], "--steps (1000) must be a multiple of --log-every (300)"),
        (["train", "--env", "maze", "--seeds", "100000000"], "use at most"),
        (["train", "--epsilon-start", "2"], "--epsilon-start must lie in [0, 1]"),
        (["plot", "/nonexistent/folder"], "/nonexistent/folder does not exist"),
        (["train", "--num-processes", "2"], "go together"),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_cli_rejects_unknown_env():
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "mars"])
    assert exit_info.value.code != 0


def test_cli_train_and_plot(tmp_path, capsys):
    out = tmp_path / "cli"
    main(["train", "--env", "chain", "--method", "opiq", "dqn", "--seeds", "2", "--steps", "600", "--log-every", "300",
          "--chain-length", "6", "--hidden", "16", "--buffer-size", "600", "--maze-torso", "xla",
          "--target-values", "table", "--out", str(out), "--no-progress"])
    statics = [json.loads(c.read_text())["static"] for c in out.rglob("config.json")]
    assert {s["maze_torso"] for s in statics} == {"xla"} and {s["target_values"] for s in statics} == {"table"}
    printed = capsys.readouterr().out
    assert "| opiq |" in printed and "| dqn |" in printed
    for metric in ("train_return", "test_return", "states_visited", "max_return"):
        assert (out / f"plot_{metric}.png").stat().st_size > 10_000
    (out / "plot_test_return.png").unlink()
    main(["plot", str(out), "--metrics", "test_return"])
    assert (out / "plot_test_return.png").exists()


SHARDED_CHILD = """
import sys, jax
assert jax.local_device_count() == 4, jax.local_devices()
from tests.test_runner import SHARD_EXPERIMENT
from opiq_jax.agent.weights import master_params
from opiq_jax.host.host_loop import run_experiment
state = run_experiment(SHARD_EXPERIMENT, sys.argv[1], progress=False)
bias = master_params(SHARD_EXPERIMENT.static, state.runs)["params"]["head"]["bias"]
# split, not copied: each device holds its own runs (a replicated array also spans every device)
print("shards", len(bias.sharding.device_set), "runs per shard", {s.data.shape[0] for s in bias.addressable_shards})
"""
SHARD_STATIC = static_for_env("chain", chain_length=8, total_steps=600, log_every=200, buffer_size=300, hidden=(16,))
SHARD_EXPERIMENT = Experiment(SHARD_STATIC, tuple(RunSpec("opiq", "paper", s, method_hparams("chain", "opiq"))
                                                  for s in range(4)))


def test_runs_sharded_over_four_host_devices_match_one_device(tmp_path):
    # the session's XLA flags (tests/conftest.py: the cheapest LLVM level, as the one-device run below) and 4 devices
    flags = xla_flags_with_host_devices(4)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    result = subprocess.run([sys.executable, "-c", SHARDED_CHILD, str(tmp_path / "sharded")],
                            cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "shards 4 runs per shard {1}" in result.stdout
    run_experiment(SHARD_EXPERIMENT, tmp_path / "single", progress=False)
    sharded, single = read_metrics(tmp_path / "sharded"), read_metrics(tmp_path / "single")
    assert [(r["run"], r["step"], r["metric"]) for r in sharded] == [(r["run"], r["step"], r["metric"]) for r in single]
    # Runs never interact, so the results are the same; XLA compiles a 1-run shard and a 4-run batch into
    # different kernels, which can move float32 results in the last digit.
    for a, b in zip(sharded, single):
        if a["metric"] in ("states_visited", "state_actions_visited", "episodes", "max_return", "test_return"):
            assert a["value"] == b["value"], (a, b)
        else:
            assert a["value"] == pytest.approx(b["value"], rel=1e-4, abs=1e-6, nan_ok=True), (a, b)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_through_jax_distributed_match_one_process(tmp_path):
    """``--distributed`` splits the runs between processes; together they equal the one-process run."""
    common = ["--env", "chain", "--method", "opiq", "dqn_pc", "--seeds", "2", "--steps", "600", "--log-every", "200",
              "--chain-length", "8", "--hidden", "16", "--buffer-size", "300", "--no-progress", "--no-plot"]
    port, env = free_port(), {**os.environ, "JAX_PLATFORMS": "cpu"}
    children = [subprocess.Popen([sys.executable, "-m", "opiq_jax", "train", *common, "--out", str(tmp_path / "multi"),
                                  "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
                                 cwd=Path(__file__).parents[1], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    assert all(child.returncode == 0 for child in children), "\n".join(o[-2000:] for o in outputs)
    assert "process 1 of 2 trains 2 of 4 runs" in outputs[1]
    for output in outputs:  # an orderly end: no gRPC warnings from the coordination service at exit
        assert not any(word in output for word in ("CANCELLED", "UNAVAILABLE", "Traceback", "E0000", "W0000")), output
    assert sorted(p.name for p in (tmp_path / "multi").iterdir()) == ["process-0", "process-1"]
    main(["train", *common, "--out", str(tmp_path / "single")])

    def by_run(rows):
        return {(r["method"], r["seed"], r["step"], r["metric"]): r["value"] for r in rows}

    multi, single = by_run(read_metrics(tmp_path / "multi")), by_run(read_metrics(tmp_path / "single"))
    assert multi.keys() == single.keys()
    for key, value in single.items():  # a 2-run batch and a 4-run batch compile to different kernels
        if key[3] in ("states_visited", "state_actions_visited", "episodes", "max_return", "test_return"):
            assert multi[key] == value, key
        else:
            assert multi[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key


def test_a_checkpoint_of_another_state_layout_is_refused_with_a_clear_message(tmp_path):
    from opiq_jax.store.files import IncompatibleCheckpoint, read_checkpoint, write_checkpoint

    write_checkpoint(tmp_path, {"stats": {"chunk_return_sum": np.zeros(2, np.float32)}}, 3)
    template = {"stats": {"chunk": {"return_sum": np.zeros(2, np.float32)}}}
    with pytest.raises(IncompatibleCheckpoint, match="does not fit this experiment's training state"):
        read_checkpoint(tmp_path, template)
    write_checkpoint(tmp_path, template, 4)
    state, chunk = read_checkpoint(tmp_path, template)
    assert chunk == 4 and state["stats"]["chunk"]["return_sum"].shape == (2,)


def test_a_config_written_before_a_static_field_existed_still_matches():
    from opiq_jax.runs.results_folder import same_experiment

    config = json.loads(json.dumps(EXPERIMENT.to_json()))
    older = {**config, "static": {k: v for k, v in config["static"].items() if k != "precision"}}
    assert same_experiment(older, EXPERIMENT.to_json())  # the field's default is what the older run used
    other = Experiment(dataclasses.replace(STATIC, precision="bfloat16"), EXPERIMENT.runs)
    assert not same_experiment(older, other.to_json())
    assert not same_experiment(config, other.to_json())


def test_a_config_written_before_network_init_existed_trained_with_flaxs_draw(tmp_path):
    """Every network was drawn as flax draws it until ``--network-init`` came: such a folder re-runs that way, and a
    resume under today's default (the authors' draw) is another experiment."""
    from opiq_jax.host.plan import experiment_from_configs
    from opiq_jax.runs.results_folder import same_experiment

    config = json.loads(json.dumps(EXPERIMENT.to_json()))
    older = {**config, "static": {k: v for k, v in config["static"].items() if k != "network_init"}}
    assert EXPERIMENT.static.network_init == "pytorch"
    assert not same_experiment(older, EXPERIMENT.to_json())
    drawn_as_flax = Experiment(dataclasses.replace(STATIC, network_init="flax"), EXPERIMENT.runs)
    assert same_experiment(older, drawn_as_flax.to_json())
    (tmp_path / "config.json").write_text(json.dumps(older))
    assert experiment_from_configs(tmp_path).static.network_init == "flax"


ODD_LABELS = ("m=2,c_action=10", 'say "hi", then, go', "β=0.1 ✓ 日本")


def test_metrics_survive_repeated_resumes_with_odd_setting_labels(tmp_path):
    """Setting labels with commas, quotes and unicode keep their quoting, and the file its line ending,
    through any number of resumes (each rewrites the file past its checkpoint)."""
    runs = tuple(RunSpec("opiq", label, s, method_hparams("chain", "opiq")) for label in ODD_LABELS for s in range(1))
    experiment = Experiment(STATIC, runs)
    out = tmp_path / "odd"
    run_experiment(experiment, out, progress=False, checkpoint_seconds=0, stop_after_chunks=3)
    for _ in range(3):  # two more partial calls, then the rest, then a finished experiment's no-op resume
        run_experiment(experiment, out, progress=False, checkpoint_seconds=1e9, stop_after_chunks=2)
    run_experiment(experiment, out, progress=False, checkpoint_seconds=0)
    run_experiment(experiment, out, progress=False, checkpoint_seconds=0)
    straight = tmp_path / "straight"
    run_experiment(experiment, straight, progress=False, checkpoint_seconds=0)
    data = (out / METRICS_FILE).read_bytes()
    assert data == (straight / METRICS_FILE).read_bytes()
    assert data.count(b"\r\n") == data.count(b"\n")  # one line ending throughout
    rows = read_metrics(out)
    assert {r["setting"] for r in rows} == set(ODD_LABELS)
    assert len(rows) == len(runs) * len(METRICS) * (STATIC.total_steps // STATIC.log_every)


def test_cli_rerun_of_a_finished_train_with_two_overrides_keeps_the_metrics(tmp_path):
    """The user's report: a finished ``train`` with two hyperparameter overrides, run again, must neither fail nor
    damage metrics.csv (its setting label "c_action=10,m=2" holds a comma)."""
    out = tmp_path / "x"
    argv = ["train", "--chain-length", "6", "--seeds", "1", "--steps", "400", "--log-every", "200", "--hidden", "16",
            "--buffer-size", "400", "--m", "2", "--c-action", "10", "--out", str(out), "--no-progress", "--no-plot"]
    main(argv)
    before = (out / METRICS_FILE).read_bytes()
    main(argv)
    assert (out / METRICS_FILE).read_bytes() == before
    assert {r["setting"] for r in read_metrics(out)} == {"c_action=10,m=2"}
    main(["plot", str(out), "--metrics", "test_return"])
    assert (out / "plot_test_return.png").exists()


def test_a_failing_process_tells_the_other_which_stops_with_one_line_and_its_checkpoint(tmp_path):
    """Process 1 cannot write its folder; process 0 hears of it after its next chunk and stops, checkpoint kept."""
    common = ["--env", "chain", "--method", "opiq", "--seeds", "2", "--steps", "4000", "--log-every", "200",
              "--chain-length", "8", "--hidden", "16", "--buffer-size", "300", "--no-progress", "--no-plot",
              "--checkpoint-every", "1000"]
    (tmp_path / "multi").mkdir()
    (tmp_path / "multi" / "process-1").write_text("a file where process 1's folder should be")
    port, env = free_port(), {**os.environ, "JAX_PLATFORMS": "cpu"}
    children = [subprocess.Popen([sys.executable, "-m", "opiq_jax", "train", *common, "--out", str(tmp_path / "multi"),
                                  "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
                                 cwd=Path(__file__).parents[1], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for i in range(2)]
    (out0, err0), (out1, err1) = [child.communicate(timeout=300) for child in children]
    assert children[1].returncode == 2 and err1.strip().splitlines() == [
        f"opiq-jax: error: --out {tmp_path / 'multi' / 'process-1'} is a file, not a folder: choose a folder"], err1
    assert children[0].returncode == 1, err0
    assert err0.strip().splitlines()[-1].startswith("opiq-jax: process 1 failed (ResultsError: --out"), err0
    assert "Traceback" not in err0 + err1 and "CANCELLED" not in err0 + err1
    rows = read_metrics(tmp_path / "multi" / "process-0")
    done = max(r["step"] for r in rows)
    assert 200 <= done < 4000 and (tmp_path / "multi" / "process-0" / "checkpoint.msgpack").exists()


def test_a_state_large_for_the_machine_is_announced_with_its_size_and_the_option_that_shrinks_it(monkeypatch):
    """Montezuma on a laptop: before anything trains, the user learns how much memory the runs will hold."""
    from opiq_jax.runs import memory
    from opiq_jax.registry.environments import static_for_env

    static = static_for_env("chain", buffer_size=10_000)
    per_run = memory.state_bytes_per_run(static)
    notes = []
    monkeypatch.setattr(memory, "available_device_bytes", lambda: 7 * per_run)  # two runs take more than a quarter
    memory.check_fits(static, 1, note=notes.append)
    assert notes == []
    memory.check_fits(static, 2, note=notes.append)
    assert len(notes) == 1 and f"{2 * per_run / 2**30:.1f} GiB of training state" in notes[0]
    assert "replay of 10,000 steps per run: --buffer-size makes it smaller" in notes[0]
    with pytest.raises(ValueError, match=r"use at most 2 runs .*, a smaller --buffer-size \(none above a batch"):
        memory.check_fits(static, 3)


def test_the_host_memory_a_cpu_run_may_take_counts_the_page_cache_the_kernel_gives_back(tmp_path):
    """CI refused a 0.7 GiB lowering on a host with gigabytes in its page cache and 0.4 GiB in free pages: the
    check reads ``MemAvailable``, not the free pages, and falls back to them only where there is no such line."""
    from opiq_jax.runs import memory

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:          400000 kB\nMemAvailable:   "
                       "18000000 kB\nCached:         17000000 kB\n")
    assert memory.available_host_bytes(str(meminfo)) == 18_000_000 * 1024
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:          400000 kB\n")  # a kernel before 3.14
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    assert abs(memory.available_host_bytes(str(meminfo)) - pages) < 2**30  # the free pages, read a moment apart
    assert memory.available_host_bytes(str(tmp_path / "absent")) > 0
    assert memory.meminfo_field("MemAvailable: 12 kB\nMemAvailableX: 99 kB", "MemAvailableX") == 99


def test_programs_trained_one_after_another_free_the_device_memory_of_the_one_before(tmp_path, monkeypatch):
    """The second program (RND's) starts with the first one's training state gone from the device: its replay
    of 20,000 steps per run is no longer among the live arrays."""
    from opiq_jax.runs import memory
    from opiq_jax.host import train_programs as programs
    from opiq_jax.registry.methods import program_parts

    static = dataclasses.replace(STATIC, total_steps=300, buffer_size=20_000)
    runs = tuple(RunSpec(m, "paper", s, method_hparams("chain", m)) for m in ("opiq", "dqn_rnd") for s in range(2))
    live_at_start, real = [], programs.run_experiment

    def watched(experiment, out, **kwargs):
        live_at_start.append(sum(x.nbytes for x in jax.live_arrays()))
        return real(experiment, out, **kwargs)

    monkeypatch.setattr(programs, "run_experiment", watched)
    programs.run_methods(Experiment(static, runs), tmp_path, progress=False)
    plain = memory.state_bytes_per_run(dataclasses.replace(static, parts=program_parts(["opiq"]))) * 2
    assert len(live_at_start) == 2 and plain > 500_000
    assert live_at_start[1] - live_at_start[0] < plain / 10, (live_at_start, plain)


def test_runs_that_do_not_fit_are_refused_before_anything_starts_with_what_would_fit(tmp_path, monkeypatch, capsys):
    """One line, before any folder is written: how many runs would fit, the largest replay that would, and the
    devices that would hold them all."""
    from opiq_jax.runs import memory
    from opiq_jax.registry.methods import program_parts

    static = dataclasses.replace(STATIC, total_steps=300, buffer_size=20_000, parts=program_parts(["opiq"]))
    per_run = memory.state_bytes_per_run(static)
    free = int(per_run * 4 * memory.MEMORY_HEADROOM * 0.6)  # room for 2 of the 4 runs
    monkeypatch.setattr(memory, "available_device_bytes", lambda: free)
    with pytest.raises(SystemExit) as stop:
        main(["train", "--chain-length", "8", "--hidden", "16", "--steps", "300", "--log-every", "150",
              "--buffer-size", "20000", "--seeds", "2", "--method", "opiq", "dqn_pc", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "4 runs need about" in err and "use at most 2 runs (fewer seeds or methods), --buffer-size " in err
    assert "or 2 devices like this one (the runs split over them)" in err
    buffer = int(err.split("--buffer-size ")[1].split(" or less")[0].replace(",", ""))
    assert 64 < buffer < 20_000 and memory.fits_in(static, buffer, 4, free, memory.MEMORY_HEADROOM)
    assert not memory.fits_in(static, int(buffer * 1.2), 4, free, memory.MEMORY_HEADROOM)  # the largest, nearly
    assert not (tmp_path / "x").exists()


def test_the_grouping_into_programs_and_the_memory_check_happen_once_per_experiment(tmp_path, monkeypatch):
    """A mix of three methods in two programs: the experiment's runs are grouped once, and each program's memory is
    checked once, by the plan (before anything is built or written), not again by the programs or the loop."""
    from opiq_jax.runs import experiment as experiment_module, memory

    grouped, checked = [], []
    real_groups, real_runs_that_fit = experiment_module.program_groups, memory.runs_that_fit
    monkeypatch.setattr(experiment_module, "program_groups",
                        lambda runs: grouped.append(len(runs)) or real_groups(runs))
    monkeypatch.setattr(memory, "runs_that_fit", lambda per_run, *args: checked.append(per_run) or
                        real_runs_that_fit(per_run, *args))  # every memory check asks this, whoever imported it
    main(["train", "--chain-length", "8", "--hidden", "16", "--steps", "300", "--log-every", "150", "--buffer-size",
          "300", "--seeds", "2", "--method", "opiq", "dqn_pc", "dqn_rnd", "--out", str(tmp_path / "x"), "--no-plot",
          "--no-progress"])
    assert grouped.count(6) == 1  # the whole experiment (each program's own experiment groups its own runs)
    assert len(checked) == 2 and len(set(checked)) == 2  # the plain program's and RND's, once each


def test_the_smallest_replay_a_plan_may_suggest_is_the_least_its_checks_allow():
    """Above a batch, at least what the parts' checks ask (RND trains on its rnd_batch newest states: 32 by default,
    100 here), a multiple of the environments per run."""
    from opiq_jax.runs.memory import smallest_buffer

    assert smallest_buffer(static_for_env("chain", parts=("rnd",), batch_size=16, rnd_batch=100)) == 100
    assert smallest_buffer(static_for_env("chain", batch_size=16)) == 32
    assert smallest_buffer(static_for_env("chain", batch_size=64)) == 65
    assert smallest_buffer(static_for_env("montezuma", envs_per_run=4)) == 36
