"""``python -m experiments.bench.learned_count_cost``: the learned count's rate and memory against the sketch's.

The timers are replaced by fixed numbers where the order and the table are checked (a real run is a GPU's work);
one real chain row is timed on the CPU to check the timer reads the trainer's rate and XLA's memory per run.
"""

import json
import math

import pytest

from experiments.bench import learned_count_cost as cost


def fake_row(env, counts, runs, steps):
    del steps
    rate = {"simhash": 1000.0, "exact": 800.0, "cfn": 400.0}[counts]
    return dict(env=env, counts=counts, runs=runs, steps_per_s=rate, compile_s=1.0, compiles_timed=0,
                program_bytes_per_run=2**20 * (2 if counts == "cfn" else 1), state_bytes_per_run=2**20, error=None)


def test_rows_compared_are_timed_next_to_each_other_and_the_table_gives_ratios(monkeypatch, tmp_path):
    timed = []
    monkeypatch.setattr(cost, "time_trainer", lambda *a: timed.append(a[:3]) or fake_row(*a))
    out = tmp_path / "a, \"quoted\" résumé"
    cost.main(["--envs", "chain", "maze", "--chain-runs", "4", "64", "--maze-runs", "2", "--out", str(out)])
    assert timed == [("chain", c, r) for r in (4, 64) for c in ("simhash", "exact", "cfn")] + [
        ("maze", c, 2) for c in ("simhash", "exact", "cfn")]
    text = (out / "README.md").read_text()
    assert "| chain | 64 | learned (cfn) | 400 | 6 | 0.40 of SimHash; 0.50 of exact cell ids | 0.002 | 0.001 |" in text
    assert "| maze | 2 | SimHash | 1,000 | 500 |  | 0.001 | 0.001 |" in text
    saved = json.loads((out / "cost.json").read_text())
    assert len(saved["rows"]) == 9
    assert saved["settings"] == json.loads((out / "run_info.json").read_text())["settings"]  # kept if cut short
    info = json.loads((out / "run_info.json").read_text())
    assert info["settings"]["chain_runs"] == [4, 64] and "/" not in info["settings"]["out"]


def test_montezuma_is_timed_with_its_frame_feature_then_the_learned_count(monkeypatch):
    args = cost.Args(envs=("montezuma",))
    assert cost.plan(args) == [("montezuma", "simhash", None), ("montezuma", "cfn", None)]
    assert cost.count_name("montezuma", "simhash") == "frame feature"
    assert cost.plan(cost.Args(envs=("montezuma",), quick=True)) == []


def test_an_out_of_memory_row_reads_as_such_and_has_no_ratio():
    rows = [dict(env="maze", counts="exact", runs=8, error="out of memory"), fake_row("maze", "cfn", 8, 1)]
    text = cost.table(rows, "cpu")
    assert "| maze | 8 | exact cell ids | out of memory |" in text
    assert "| maze | 8 | learned (cfn) | 400 | 50 |  |" in text


@pytest.mark.parametrize("argv, says", [
    (["--chain-runs", "0"], "must be >= 1"),
    (["--montezuma-pool", "12", "--montezuma-envs-per-run", "8"], "not whole runs"),
])
def test_bad_numbers_are_refused_in_one_line(argv, says, capsys, tmp_path):
    with pytest.raises(SystemExit, match=says):
        cost.main([*argv, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_a_real_chain_row_reads_the_trainers_rate_and_memory():
    row = cost.time_trainer("chain", "exact", 2, 20)  # the cheapest program to compile: the timer is the same
    assert row["error"] is None and row["runs"] == 2
    assert math.isfinite(row["steps_per_s"]) and row["steps_per_s"] > 0
    assert row["program_bytes_per_run"] > row["state_bytes_per_run"] > 0  # the program holds the state and more
