"""``python -m experiments.bench.revisions``: the same benchmarks for several source trees, taking turns.

The subprocesses' rates are replaced by fixed numbers here (a real run is a GPU's work); what is checked is that
every tree runs every job in every round, in turn and in reverse order every other round, that the table keeps
each tree's fastest round, its ratio to the first tree and the median of the rounds' paired ratios, that a failed
job reads as failed, and that bad ``--trees`` are refused in one line.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.bench import revisions

HERE = str(Path(__file__).resolve().parents[1])


def fake_runs(rates: dict[str, list[float | None]]):
    """A stand-in for ``run_job`` that gives each tree its next rate from ``rates`` and records the order."""
    calls: list[tuple[str, str]] = []

    def run(job, tree, folder):
        label = folder.name.split("-", 1)[1]
        calls.append((job.label, label))
        rate = rates[label].pop(0)
        return dict(rate=rate, seconds=1.0, error=None if rate is not None else ["boom"])
    return run, calls


def test_trees_take_turns_and_the_table_keeps_the_fastest_round(monkeypatch, tmp_path):
    jobs = revisions.default_jobs(quick=True)
    run, calls = fake_runs({"old": [100.0, 50.0, 120.0, 40.0, 80.0, 45.0],
                            "new": [110.0, None, 90.0, 60.0, 100.0, 54.0]})
    monkeypatch.setattr(revisions, "run_job", run)
    out = tmp_path / "a, \"quoted\" résumé"
    revisions.main(["--trees", f"old={HERE}", f"new={HERE}", "--rounds", "3", "--quick", "--envs", "chain", "maze",
                    "--out", str(out)])
    in_turn = [(job.label, label) for job in jobs for label in ("old", "new")]
    in_reverse = [(job.label, label) for job in jobs for label in ("new", "old")]
    assert calls == in_turn + in_reverse + in_turn
    text = (out / "README.md").read_text()
    chain, maze = jobs[0].label, jobs[1].label
    # the chain: old's best is round 2's 120, new's round 1's 110; the rounds' ratios 110/100, 90/120, 100/80
    assert f"| {chain} | 120 | 110 | 0.917 | 1.100 (0.750-1.250, 3 rounds) |" in text
    # the maze: new's failed round 1 leaves two pairs, 60/40 and 54/45
    assert f"| {maze} | 50 | 60 | 1.200 | 1.350 (1.200-1.500, 2 rounds) |" in text
    saved = json.loads((out / "revisions.json").read_text())
    assert saved["rounds"][0][maze]["new"]["error"] == ["boom"]
    assert saved["settings"]["trees"][0].startswith("old=") and "/" not in saved["settings"]["trees"][0]  # portable
    assert saved["settings"]["rounds"] == 3  # kept in the data file too: a call cut short has no run_info.json
    assert json.loads((out / "run_info.json").read_text())["settings"]["rounds"] == 3


def test_a_job_that_never_ran_reads_failed_and_has_no_ratio():
    jobs = revisions.default_jobs(quick=True)[:1]
    rounds = [{jobs[0].label: {"old": dict(rate=10.0), "new": dict(rate=None)}}]
    assert f"| {jobs[0].label} | 10 | failed | n/a | n/a |" in revisions.table(rounds, ["old", "new"], jobs, "cpu")


@pytest.mark.parametrize("trees, message", [
    (["old"], "is not LABEL=FOLDER"),
    ([f"old={HERE}", f"old={HERE}"], "given twice"),
    ([f"old={HERE}", "new=/nonexistent"], "holds no opiq_jax package"),
    ([f"old={HERE}"], "at least two trees"),
])
def test_bad_trees_are_refused_in_one_line(trees, message):
    with pytest.raises(SystemExit, match=message):
        revisions.parse_trees(tuple(trees))


def test_a_failing_subprocess_gives_its_last_error_line(tmp_path):
    job = revisions.Job("nothing", ("opiq_jax", "no-such-command"), lambda folder: 1.0)
    result = revisions.run_job(job, Path(HERE), tmp_path / "out")
    assert result["rate"] is None and result["error"]


def test_envs_leave_the_other_environments_jobs_out(monkeypatch, tmp_path):
    run, calls = fake_runs({"old": [1.0], "new": [2.0]})
    monkeypatch.setattr(revisions, "run_job", run)
    revisions.main(["--trees", f"old={HERE}", f"new={HERE}", "--rounds", "1", "--quick", "--envs", "maze",
                    "--out", str(tmp_path / "m")])
    assert [job for job, _ in calls] == [revisions.default_jobs(quick=True)[1].label] * 2


def test_montezuma_runs_a_job_per_pool_size_and_an_empty_pool_is_refused():
    labels = [job.label for job in revisions.default_jobs(quick=False, montezuma_pools=(16, 64))]
    assert labels[-2:] == ["Montezuma, 16 environments, OPIQ agent", "Montezuma, 64 environments, OPIQ agent"]
    with pytest.raises(SystemExit, match="at least one environment"):
        revisions.main(["--trees", f"old={HERE}", f"new={HERE}", "--montezuma-pools", "0"])


def test_run_as_a_script_it_holds_no_card_and_its_children_allocate_as_the_caller(monkeypatch):
    """The script only waits while each tree's benchmarks run in children: JAX preallocating 75 % of the card in it
    left the children of an 80 GB H100 out of memory. Its children get the caller's setting back."""
    script = ("import os, runpy, sys\n"
              "sys.argv = ['revisions', '--help']\n"
              "try:\n"
              "    runpy.run_module('experiments.bench.revisions', run_name='__main__', alter_sys=True)\n"
              "except SystemExit:\n"
              "    print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])\n")
    environment = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=HERE,
                          env={**environment, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "false", done.stderr[-2000:]
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # this process's own, as the script sets it
    monkeypatch.setattr(revisions, "CALLERS_PREALLOCATE", None)
    child = revisions.child_environment(Path("tree, ✓"))
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in child and child["PYTHONPATH"].startswith("tree, ✓")
    monkeypatch.setattr(revisions, "CALLERS_PREALLOCATE", "true")
    assert revisions.child_environment(Path("tree"))["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
