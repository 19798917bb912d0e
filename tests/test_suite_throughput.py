"""``python -m experiments.bench.suite_throughput``: the trainer beside raw stepping, at the same width.

The rates themselves are the GPU's to measure; here the chain stands in for a suite (the same code, a fast compile):
every environment and width gets a raw and a trainer row, the table gives their ratio, the files are written into
an oddly named folder, and bad arguments are refused in one line before JAX starts.
"""

import json

import pytest

from experiments.bench import suite_throughput


def test_each_width_times_raw_stepping_and_the_trainer_and_the_table_gives_their_ratio(tmp_path):
    out = tmp_path / "suites, \"quoted\" ✓"
    suite_throughput.main(["--envs", "chain", "--runs", "2", "--steps", "20", "--buffer-size", "100",
                           "--out", str(out)])
    saved = json.loads((out / "suite_throughput.json").read_text())
    assert [(r["kind"], r["envs"]) for r in saved["rows"]] == [("raw", 2), ("trainer", 2)]
    raw, trainer = (r["steps_per_s"] for r in saved["rows"])
    assert raw > 0 and trainer > 0 and all(r["compiles_timed"] == 0 for r in saved["rows"])
    table = (out / "README.md").read_text()
    assert f"| chain | 2 | {raw:,.0f} | {trainer:,.0f} | {trainer / raw:.3f} |" in table
    info = json.loads((out / "run_info.json").read_text())
    assert info["settings"]["runs"] == [2] and "/" not in info["settings"]["out"]  # portable


@pytest.mark.parametrize("argv, message", [
    (["--envs", "chian"], "suite_throughput: error: "),
    (["--envs", "chain", "--runs", "0"], "must be >= 1|>= 1"),
    (["--envs"], "at least one environment"),
])
def test_bad_arguments_are_refused_in_one_line(argv, message, tmp_path):
    with pytest.raises(SystemExit, match=message) as refused:
        suite_throughput.main([*argv, "--out", str(tmp_path / "out")])
    assert "\n" not in str(refused.value)


def test_a_row_that_runs_out_of_memory_is_kept_as_such_and_any_other_error_propagates():
    """The wide rows of a bench may not fit the card: that is a row of the table, where any other failure is a bug."""
    from experiments.bench.report import unless_out_of_memory

    def exhausted() -> dict:
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.2GiB")

    def broken() -> dict:
        raise ValueError("a shape that does not broadcast")

    assert unless_out_of_memory(lambda: dict(steps_per_s=5.0), env="chain", envs=2) == dict(
        env="chain", envs=2, steps_per_s=5.0, error=None)
    assert unless_out_of_memory(exhausted, env="chain", envs=512) == dict(env="chain", envs=512, error="out of memory")
    with pytest.raises(ValueError, match="broadcast"):
        unless_out_of_memory(broken, env="chain", envs=2)
