"""experiments/program_overlap.py: the figure's programs timed one after another and in one scan (CPU, tiny)."""

import json

import pytest

from experiments.program_overlap import main, program_row, projected_seconds


def test_projection_is_the_sum_one_after_another_and_the_longest_at_once():
    """Two programs of 100 steps: one took 2 s (50 steps/s: 1,000 steps in 20 s), the other 0.5 s (200 steps/s: 5 s)."""
    rows = [program_row("plain", 72, 100, 10.0, 12.0, 1.0), program_row("rnd", 8, 100, 10.0, 10.5, 1.0)]
    assert [r["steps_per_second"] for r in rows] == [50.0, 200.0]
    assert [r["env_steps_per_second"] for r in rows] == [3600.0, 1600.0]
    assert projected_seconds(rows, 1000, at_once=False) == pytest.approx(25.0)
    assert projected_seconds(rows, 1000, at_once=True) == pytest.approx(20.0)


@pytest.mark.parametrize("mode,methods,programs", [("sequential", ["opiq"], ["plain"]),
                                                   ("joint", ["opiq", "dqn_rnd"], ["plain", "rnd"])])
def test_script_times_each_program_and_writes_its_table(tmp_path, mode, methods, programs):
    common = ["--env", "chain", "--seeds", "1", "--steps", "70", "--chunks", "1", "--methods", *methods,
              "--out", str(tmp_path)]
    result = main([*common, "--mode", mode])
    saved = json.loads((tmp_path / f"overlap_{mode}.json").read_text())
    assert saved["mode"] == mode and saved["env"] == "chain" and saved["device"]
    assert [(r["program"], r["runs"], r["steps"]) for r in saved["rows"]] == [(p, 1, 70) for p in programs]
    assert all(r["steps_per_second"] > 0 for r in saved["rows"])
    if mode == "joint":  # one scan: one interval for both programs
        assert saved["rows"][0]["seconds"] == saved["rows"][1]["seconds"]
    assert saved["projected_seconds"] == pytest.approx(result["projected_seconds"])
    assert f"| {programs[-1]} | 1 |" in (tmp_path / f"overlap_{mode}.md").read_text()


def test_bad_numbers_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="must be >= 1"):
        main(["--steps", "0", "--out", str(tmp_path)])
