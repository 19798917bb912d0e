"""experiments/paper/compare_methods.py: a small end-to-end run, and its record of invocations."""

import json

from experiments.paper import compare_methods


def test_small_chain_comparison_writes_figures_tables_and_record(tmp_path):
    out = tmp_path / "chain"
    argv = ["--env", "chain", "--out", str(out), "--seeds", "2", "--steps", "400", "--log-every", "200",
            "--chain-length", "10", "--methods", "opiq", "dqn", "--no-progress"]
    compare_methods.main(argv)
    summary = json.loads((out / "summary.json").read_text())
    assert {row["group"] for row in summary["train_return"]} == {"opiq", "dqn"}
    assert (out / "chain_baselines_train_return.png").stat().st_size > 0
    compare_methods.main(argv)  # finished: nothing trains again, and the record grows by one invocation
    info = json.loads((out / "run_info.json").read_text())
    assert len(info["seconds_per_invocation"]) == 2 and info["runs"] == 4 and info["steps"] == 400


def test_record_keeps_a_hand_edited_record_and_starts_a_list(tmp_path):
    path = tmp_path / "run_info.json"
    path.write_text(json.dumps({"seconds_per_invocation": {"first machine": 500.0}, "note": "kept"}))
    info = compare_methods.record_invocation(path, 12.5, device="cpu")
    assert info["seconds_per_invocation"] == [12.5] and info["earlier"] == {"first machine": 500.0}
    assert json.loads(path.read_text())["note"] == "kept" and info["total_seconds"] == 12.5


def test_record_survives_an_unreadable_file(tmp_path):
    path = tmp_path / "run_info.json"
    path.write_text('{"seconds_per_invoc')  # cut short by a kill mid-write (older versions wrote in place)
    info = compare_methods.record_invocation(path, 3.0)
    assert info["seconds_per_invocation"] == [3.0] and info["earlier"] == '{"seconds_per_invoc'
    assert json.loads(path.read_text())["total_seconds"] == 3.0
