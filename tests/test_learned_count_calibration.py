"""``python -m experiments.studies.learned_count_calibration``: a short chain run with the learned count, judged
against the exact counts of its replay; and a folder of another counting refused in one line."""

import json

import pytest

import opiq_jax
from experiments.studies import learned_count_calibration


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "cfn, \"chain\" é"
    opiq_jax.train("chain", ["opiq"], 2, steps=400, out=out, progress=False, verbose=False, count_features="cfn",
                   cfn_hidden=(16,), chain_length=8, log_every=200)
    return out


def test_every_run_is_judged_against_every_step_its_replay_holds(chain_run, tmp_path):
    out = tmp_path / "calibration, ü"
    learned_count_calibration.main(["--results", str(chain_run), "--out", str(out)])
    saved = json.loads((out / "calibration.json").read_text())
    assert saved["step"] == 400 and [r["seed"] for r in saved["runs"]] == [0, 1]
    for row in saved["runs"]:
        assert row["steps_held"] == 400  # the replay (10,000) holds every step of the run
        assert 1 <= row["pairs_held"] <= 16 and row["pairs_held"] + row["unheld_pairs"] == 16
        assert -1.0 <= row["rank_correlation"] <= 1.0 and row["ratio_median"] > 0
    assert (out / "calibration.png").stat().st_size > 0
    assert "rank correlation median" in (out / "calibration.md").read_text()
    assert json.loads((out / "run_info.json").read_text())["command"].startswith("python -m experiments.studies")


def test_a_folder_of_another_counting_is_refused(tmp_path):
    out = tmp_path / "simhash"
    opiq_jax.train("chain", ["opiq"], 1, steps=200, out=out, progress=False, verbose=False, chain_length=8,
                   log_every=200, hidden=(8,))
    with pytest.raises(SystemExit, match="not cfn"):
        learned_count_calibration.main(["--results", str(out), "--out", str(tmp_path / "x")])


def test_calls_along_a_time_boxed_run_follow_the_count_over_the_run(tmp_path):
    run, out = tmp_path / "boxed", tmp_path / "over the run, é"
    train = dict(steps=400, out=run, progress=False, verbose=False, count_features="cfn", cfn_hidden=(16,),
                 chain_length=8, log_every=200, max_minutes=1e-9)  # each call stops after its first chunk

    def calibrate() -> list[int]:
        learned_count_calibration.main(["--results", str(run), "--out", str(out)])
        points = json.loads((out / "history.json").read_text())["points"]
        assert all(len(p["rank_correlation"]) == len(p["ratio_median"]) == 2 for p in points)
        return [p["step"] for p in points]

    opiq_jax.train("chain", ["opiq"], 2, **train)
    assert calibrate() == [200] and calibrate() == [200]  # a second call at one step replaces its point
    opiq_jax.train("chain", ["opiq"], 2, **train)  # the same call goes on, to the end
    assert calibrate() == [200, 400]
    table = (out / "over_the_run.md").read_text()
    assert "| 200 | 2 |" in table and "| 400 | 2 |" in table
    assert (out / "over_the_run.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="give this run another --out"):  # another run's history is kept apart
        learned_count_calibration.main(["--results", str(tmp_path / "other"), "--out", str(out)])
