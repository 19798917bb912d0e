"""``python -m experiments.bench.authors_code_rate`` run end to end: the command it gives the authors' code, its
settings against this project's record of the paper's, and the rate it reads from the log. Neither their code nor
torch is needed: the runs use a stand-in main.py that prints the lines their training loop prints (in both of
sacred's logging formats)."""

import json
import sys

import pytest

from experiments.bench.authors_code_rate import PAPER_SETTINGS, main


def settings(command):
    """The ``KEY=VALUE`` updates after ``with``, as a dict."""
    assert command[1:3] == ["src/main.py", "with"]
    return dict(arg.split("=", 1) for arg in command[3:])


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


FAKE_MAIN = '''\
import sys
args = dict(a.split("=", 1) for a in sys.argv[2:])
print("INFO - Count_Explore - Running command 'main'", flush=True)
print("CRITICAL - root - Beginning training.", file=sys.stderr, flush=True)
for t in range(100, int(args["t_max"]) + 1, 100):
    line = (f"WARNING:Main:T: {t:,}, Episode Reward: 0.01" if t == 500
            else f"WARNING - Main - T: {t:,}, Episode Reward: 0.00")
    print(line, file=sys.stderr, flush=True)  # t = 500 in sacred's other logging format
print("CRITICAL - Main - Closing envs", file=sys.stderr, flush=True)
'''



@pytest.fixture
def their_code(tmp_path):
    """A checkout holding the stand-in for their entry point."""
    code = tmp_path / "opiq"
    (code / "src").mkdir(parents=True)
    (code / "src" / "main.py").write_text(FAKE_MAIN)
    (code / "SOURCE_COMMIT").write_text("0123abc oxwhirl/opiq\n")
    return code


def command_run(code, out, *argv) -> list[str]:
    """The command the script ran their code with."""
    assert main(["--code", str(code), "--python", sys.executable, "--out", str(out), *argv]) == 0
    (result,) = [json.loads(p.read_text()) for p in out.glob("authors_*.json")]
    return result["command"]


@pytest.mark.parametrize("env", ["chain", "maze", "montezuma"])
def test_the_command_runs_opiq_for_the_budget_with_no_test_episodes(env, their_code, tmp_path):
    command = command_run(their_code, tmp_path / "out", "--env", env, "--steps", "400")
    assert command[0] == sys.executable
    given = settings(command)
    assert given["t_max"] == "400" and int(given["testing_interval"]) > 400
    assert given["action_selector"] == "optimistic_action" and given["optim_bootstrap"] == "True"
    assert given["count_rewards"] == "True"
    assert {k: given[k] for k in PAPER_SETTINGS[env]} == PAPER_SETTINGS[env]
    # their main.py reads a given save=... as a string, so save=False would switch sacred's observer on
    assert "save" not in given
    if env == "maze":
        assert settings(command_run(their_code, tmp_path / "saved", "--env", env, "--steps", "100",
                                    "--save"))["save"] == "True"


def test_bad_arguments_are_refused_in_one_line(their_code, tmp_path, capsys):
    for argv, said in ((["--env", "pong"], "invalid choice: 'pong'"), (["--steps", "0"], "steps")):
        with pytest.raises(SystemExit):
            main(["--code", str(their_code), "--out", str(tmp_path / "out"), *argv])
        assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


class TickingClock:
    """A stand-in for the ``time`` module whose ``monotonic`` advances ``tick`` seconds at every reading: the script
    stamps each line of their log as it reads it, so line ``i`` (from 0) is stamped ``tick * (i + 1)``."""

    def __init__(self, tick: float):
        self.tick, self.now = tick, 0.0

    def monotonic(self) -> float:
        self.now += self.tick
        return self.now


def test_a_run_of_a_stand_in_for_their_code_writes_the_rate(their_code, tmp_path, capsys, monkeypatch):
    from experiments.bench import authors_code_rate

    monkeypatch.setattr(authors_code_rate, "time", TickingClock(0.1))
    code = their_code
    out = tmp_path / "out"
    assert main(["--code", str(code), "--python", sys.executable, "--env", "chain", "--steps", "1000",
                 "--out", str(out)]) == 0
    result = json.loads((out / "authors_chain.json").read_text())
    s = result["summary"]
    # their log: a start-up line (0.1 s), "Beginning training." (0.2), T = 100 ... 1,000 (0.3 ... 1.2), "Closing
    # envs" (1.3): the loop is 1.3 - 0.2 s, its start-up excluded; the steady rate runs from T = 200 (0.4) to 1,000
    assert s["steps"] == 1000 and s["loop_seconds"] == pytest.approx(1.1)
    assert s["steps_per_second"] == pytest.approx(1000 / 1.1, rel=1e-3)
    assert s["steady_steps_per_second"] == pytest.approx(800 / 0.8) and s["steady_from_step"] == 200
    assert result["code_commit"] == "0123abc" and settings(result["command"])["t_max"] == "1000"
    assert "Beginning training." in (out / "authors_chain.log").read_text()
    assert result["thread_vars"] == "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1" and result["machine"]["cpu"]
    page = (out / "authors_chain.md").read_text()
    assert f"| env steps/s (whole loop) | {s['steps_per_second']:,} |" in page and "0123abc" in page
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
