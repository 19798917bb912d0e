"""experiments/bench/authors_code_rate.py: the command it gives the authors' code, how it reads their log into a rate, and
its settings against this project's record of the paper's. Neither their code nor torch is needed: the run end to end
uses a stand-in main.py that prints the lines their training loop prints."""

import json
import sys
import textwrap

import pytest

from experiments.bench.authors_code_rate import (
    PAPER_SETTINGS, build_command, cpu_model, loop_seconds, main, markdown, progress, steady_rate, summary,
    thread_env,
)


def settings(command):
    """The ``KEY=VALUE`` updates after ``with``, as a dict."""
    assert command[1:3] == ["src/main.py", "with"]
    return dict(arg.split("=", 1) for arg in command[3:])


@pytest.mark.parametrize("env", ["chain", "maze", "montezuma"])
def test_the_command_runs_opiq_for_the_budget_with_no_test_episodes(env):
    command = build_command("/venv/bin/python", env, 4000)
    assert command[0] == "/venv/bin/python"
    given = settings(command)
    assert given["t_max"] == "4000" and int(given["testing_interval"]) > 4000
    assert given["action_selector"] == "optimistic_action" and given["optim_bootstrap"] == "True"
    assert given["count_rewards"] == "True"
    assert {k: given[k] for k in PAPER_SETTINGS[env]} == PAPER_SETTINGS[env]


def test_save_is_left_out_unless_asked_for():
    """Their main.py reads a given save=... as a string, so save=False would switch sacred's observer on."""
    assert "save" not in settings(build_command("python", "chain", 10))
    assert settings(build_command("python", "maze", 10, save=True))["save"] == "True"


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown env"):
        build_command("python", "pong", 10)
    with pytest.raises(ValueError, match="steps"):
        build_command("python", "chain", 0)


def test_the_settings_are_the_papers_as_this_project_records_them():
    from opiq_jax.registry.environments import environment_spec
    from opiq_jax.registry.methods import method_hparams

    envs = (("chain", "fc", "100Chain-v0"), ("maze", "2conv", "Maze-v0"), ("montezuma", "atari", "Montezuma-v0"))
    for env, network, environment in envs:
        theirs = PAPER_SETTINGS[env]
        ours = {**environment_spec(env).defaults, **method_hparams(env, "opiq")}
        assert theirs["env"] == environment and theirs["agent"] == network
        pairs = [("batch_size", "batch_size"), ("buffer_size", "buffer_size"), ("n_step", "n_step"),
                 ("target_update_interval", "target_update"),
                 ("count_beta", "beta"), ("optim_m", "m"), ("optim_action_tau", "c_action"),
                 ("optim_bootstrap_tau", "c_bootstrap"), ("epsilon_finish", "epsilon_end")]
        # the learning rate: the paper's (their default) but on Montezuma, where this project halves it
        pairs += [("lr", "lr")] if env != "montezuma" else []
        pairs += [("count_size", "simhash_bits")] if env != "montezuma" else [
            ("update_freq", "train_every"), ("mmc_beta", "beta_mmc")]  # Montezuma counts its frame feature
        for their_name, our_name in pairs:
            assert float(theirs[their_name]) == pytest.approx(ours[our_name]), (env, their_name)
        # epsilon_start: their default is 1 (the maze's schedule); the chain's OPIQ keeps 0.01 throughout
        assert float(theirs.get("epsilon_start", "1")) == pytest.approx(ours["epsilon_start"])
        if ours["epsilon_decay_steps"]:
            assert float(theirs["epsilon_time_length"]) == pytest.approx(ours["epsilon_decay_steps"])


def test_threads_are_pinned_and_output_unbuffered():
    env = thread_env(1)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1" and env["PYTHONUNBUFFERED"] == "1"


LOG = [
    (10.0, "INFO - Count_Explore - Running command 'main'"),
    (12.0, "CRITICAL - root - Beginning training."),
    (13.0, "WARNING - Main - Terminating because of episode limit"),
    (13.0, "WARNING - Main - T: 109, Episode Reward: 0.00"),
    (14.0, "WARNING:Main:T: 218, Episode Reward: 0.01"),  # sacred's other logging format
    (16.0, "WARNING - Main - T: 1,090, Episode Reward: 1.00"),
    (20.0, "WARNING - Main - T: 2,180, Episode Reward: 0.00"),
    (22.0, "CRITICAL - Main - Closing envs"),
    (23.0, "CRITICAL - Main - Exiting"),
]


def test_the_log_gives_episode_ends_and_the_loop_time():
    assert progress(LOG) == [(109, 13.0), (218, 14.0), (1090, 16.0), (2180, 20.0)]
    assert loop_seconds(LOG) == 10.0


def test_a_log_without_the_loop_marks_is_an_error():
    with pytest.raises(ValueError, match="did not finish"):
        loop_seconds(LOG[:5])


def test_the_steady_rate_runs_from_the_first_episode_end_past_skip():
    points = progress(LOG)
    assert steady_rate(points, skip=1000) == pytest.approx((2180 - 1090) / 4.0)
    assert steady_rate(points, skip=0) == pytest.approx((2180 - 109) / 7.0)
    assert steady_rate(points, skip=2000) is None  # one point is no rate
    assert steady_rate([(100, 1.0), (200, 1.0)], skip=0) is None  # no time passed


def test_cpu_model_reads_the_first_processor():
    cpuinfo = textwrap.dedent("""\
        processor\t: 0
        vendor_id\t: GenuineIntel
        cpu family\t: 6
        model\t\t: 167
        model name\t: Intel(R) Xeon(R) Processor
        stepping\t: 1
        cpu MHz\t\t: 2600.000

        processor\t: 1
        model name\t: Another CPU
        """)
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) Processor (family 6, model 167, stepping 1, MHz 2600.000)"
    assert cpu_model("processor\t: 0\nmodel name\t: Plain\n") == "Plain"
    assert cpu_model("") == "unknown"


def test_summary_and_markdown():
    s = summary("maze", 2000, 10.0, 190.04, 400)
    assert s == {"env": "maze", "steps": 2000, "loop_seconds": 10.0, "steps_per_second": 200.0,
                 "steady_steps_per_second": 190.0, "steady_from_step": 400}
    machine = {"cpu": "Some CPU", "gpu": None, "torch": "2.0", "numpy": "1.23.5", "python": "3.11.7",
               "torch_threads": 1}
    page = markdown({"summary": s, "machine": machine, "command": ["python", "src/main.py", "with", "t_max=2000"],
                     "code": "/x/opiq", "code_commit": None, "thread_vars": "OMP_NUM_THREADS=1"})
    assert "| env steps/s (whole loop) | 200.0 |" in page and "| GPU | none (CPU) |" in page
    assert "python src/main.py with t_max=2000" in page and "commit unknown" in page


FAKE_MAIN = '''\
import sys, time
args = dict(a.split("=", 1) for a in sys.argv[2:])
print("INFO - Count_Explore - Running command 'main'", flush=True)
time.sleep(0.3)  # start-up, not timed
print("CRITICAL - root - Beginning training.", file=sys.stderr, flush=True)
for t in range(100, int(args["t_max"]) + 1, 100):
    time.sleep(0.02)
    print(f"WARNING - Main - T: {t:,}, Episode Reward: 0.00", file=sys.stderr, flush=True)
print("CRITICAL - Main - Closing envs", file=sys.stderr, flush=True)
'''


def test_a_run_of_a_stand_in_for_their_code_writes_the_rate(tmp_path, capsys):
    code = tmp_path / "opiq"
    (code / "src").mkdir(parents=True)
    (code / "src" / "main.py").write_text(FAKE_MAIN)
    (code / "SOURCE_COMMIT").write_text("0123abc oxwhirl/opiq\n")
    out = tmp_path / "out"
    assert main(["--code", str(code), "--python", sys.executable, "--env", "chain", "--steps", "1000",
                 "--out", str(out)]) == 0
    result = json.loads((out / "authors_chain.json").read_text())
    s = result["summary"]
    assert s["steps"] == 1000 and 0.2 <= s["loop_seconds"] < 5  # ten 0.02 s sleeps, start-up excluded
    assert s["steps_per_second"] == pytest.approx(1000 / s["loop_seconds"], rel=1e-2)
    assert s["steady_steps_per_second"] > 0 and s["steady_from_step"] == 200
    assert result["code_commit"] == "0123abc" and settings(result["command"])["t_max"] == "1000"
    assert "Beginning training." in (out / "authors_chain.log").read_text()
    assert "steps_per_second" in capsys.readouterr().out
    # a second measurement into the same folder is refused, unless --force
    again = ["--code", str(code), "--python", sys.executable, "--env", "chain", "--steps", "1000", "--out", str(out)]
    first = (out / "authors_chain.json").read_text()
    with pytest.raises(SystemExit):
        main(again)
    assert "--force" in capsys.readouterr().err and (out / "authors_chain.json").read_text() == first
    assert main([*again, "--force"]) == 0


def test_a_failed_run_is_reported_with_its_log(tmp_path, capsys):
    code = tmp_path / "opiq"
    (code / "src").mkdir(parents=True)
    (code / "src" / "main.py").write_text("import sys\nprint('Traceback: boom', file=sys.stderr)\nsys.exit(3)\n")
    assert main(["--code", str(code), "--python", sys.executable, "--env", "maze", "--steps", "10",
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "exited with 3" in err and "boom" in err
    assert not (tmp_path / "out" / "authors_maze.json").exists()


def test_a_folder_without_their_entry_point_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        main(["--code", str(tmp_path), "--env", "chain", "--out", str(tmp_path / "out")])
