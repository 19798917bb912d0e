"""``experiments/studies/reward_scale.py`` end to end, small: every cell's log is written in units of the bound, the
cells start from one network (the same reward scale and rate give the same numbers), and bad cells are refused."""

import json

import pytest

from experiments.studies import reward_scale


def test_a_small_run_writes_every_cell_and_equal_cells_agree(tmp_path):
    out = tmp_path / "a, \"quoted\" folder – ü"
    reward_scale.main(["--out", str(out), "--states", "16", "--features", "8", "--hidden", "16", "--updates", "400",
                       "--log-every", "200", "--target-every", "100", "--cells", "0.1:1e-3", "0.1:1e-3",
                       "0.01:1e-3:0.1"])
    rows = json.loads((out / "reward_scale.json").read_text())
    assert [(r["scale"], r["lr"], r["head"]) for r in rows] == [(0.1, 1e-3, 1.0), (0.1, 1e-3, 1.0), (0.01, 1e-3, 0.1)]
    assert all(len(r["q_abs_max"]) == len(r["q_error"]) == 2 for r in rows)
    assert rows[0]["q_abs_max"] == rows[1]["q_abs_max"]  # one start, one stream of batches
    assert rows[2]["q_abs_max"] != rows[0]["q_abs_max"]
    assert "| 0.01 | 0.001 | 0.1 | x0.1 |" in (out / "reward_scale.md").read_text()
    assert (out / "reward_scale.png").stat().st_size > 0
    assert json.loads((out / "run_info.json").read_text())["seconds"] > 0


@pytest.mark.parametrize("cell", ["0.1", "a:b", "0:1e-3", "0.1:1e-3:-1"])
def test_a_bad_cell_is_refused_in_one_line(tmp_path, cell):
    with pytest.raises(SystemExit, match="--cells"):
        reward_scale.main(["--out", str(tmp_path), "--cells", cell])
