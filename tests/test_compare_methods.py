"""``python -m experiments.paper.compare_methods``: a small end-to-end run, its record of invocations, and that record
kept when it was edited by hand or cut short by a kill."""

import json

from experiments.paper import compare_methods


def test_small_chain_comparison_writes_figures_tables_and_a_record_that_survives_edits(tmp_path):
    out = tmp_path / "chain, ✓"  # a comma and unicode in the folder's name
    argv = ["--env", "chain", "--out", str(out), "--seeds", "2", "--steps", "400", "--log-every", "200",
            "--chain-length", "10", "--methods", "opiq", "dqn", "--no-progress"]
    compare_methods.main(argv)
    summary = json.loads((out / "summary.json").read_text())
    assert {row["group"] for row in summary["train_return"]} == {"opiq", "dqn"}
    assert (out / "chain_baselines_train_return.png").stat().st_size > 0
    compare_methods.main(argv)  # finished: nothing trains again, and the record grows by one invocation
    record = out / "run_info.json"
    info = json.loads(record.read_text())
    assert len(info["seconds_per_invocation"]) == 2 and info["runs"] == 4 and info["steps"] == 400
    assert info["total_seconds"] == sum(info["seconds_per_invocation"])

    # a record edited by hand into another shape is kept under "earlier", with its other fields, and a list starts
    record.write_text(json.dumps({"seconds_per_invocation": {"first machine": 500.0}, "note": "kept"}))
    compare_methods.main(argv)
    info = json.loads(record.read_text())
    assert len(info["seconds_per_invocation"]) == 1 and info["earlier"] == {"first machine": 500.0}
    assert info["note"] == "kept" and info["total_seconds"] == info["seconds_per_invocation"][0]

    # one cut short (a kill mid-write, as older versions wrote in place) is kept as its text
    record.write_text('{"seconds_per_invoc')
    compare_methods.main(argv)
    info = json.loads(record.read_text())
    assert len(info["seconds_per_invocation"]) == 1 and info["earlier"] == '{"seconds_per_invoc'
