"""``experiments/studies/montezuma_defaults.py``: a cell trained as its own processes, recorded per call."""

import json

import pytest

from experiments.studies.montezuma_defaults import main

pytest.importorskip("envpool")


def test_a_cell_trains_at_the_paper_rate_and_records_its_call(tmp_path):
    main(["--out", str(tmp_path), "--cells", "opiq-pytorch", "--bases", "3", "--seeds-per-process", "1",
          "--steps", "400", "--log-every", "400", "--buffer-size", "2000", "--revision", "abc1234",
          "--no-tree-clean"])
    cell = tmp_path / "opiq-pytorch-base3"
    static = json.loads((cell / "config.json").read_text())["static"]
    assert (static["network_init"], static["precision"], static["envs_per_run"]) == ("pytorch", "float32", 8)
    config = json.loads((cell / "config.json").read_text())
    assert config["seed"] == 3 and len(config["runs"]) == 1 and abs(config["runs"][0]["hparams"]["lr"] - 5e-4) < 1e-9
    [call] = json.loads((cell / "calls.json").read_text())
    assert (call["revision"], call["tree_clean"], call["finished"], call["last_step"]) == ("abc1234", False, True, 400)


def test_an_unknown_cell_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="unknown cell 'opiq-torch'"):
        main(["--out", str(tmp_path), "--cells", "opiq-torch"])
