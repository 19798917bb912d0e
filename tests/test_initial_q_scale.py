"""``experiments/studies/initial_q_scale.py``: the untrained Q-values of flax's and PyTorch's initialisations."""

import json

import numpy as np

from experiments.studies.initial_q_scale import main


def test_flax_starts_the_chain_and_nature_networks_larger(tmp_path):
    """On the chain's thermometer codes and on noise frames, flax's LeCun normal weights (three times the variance
    of PyTorch's uniform, compounding through the ReLU layers) start |Q| several times larger; the maze network's
    values are within a factor of two of each other (PyTorch's biases add about as much as flax's larger weights).
    Fixed keys: the same draws every run."""
    main(["--out", str(tmp_path), "--keys", "4", "--frames", "noise", "--frame-steps", "8"])
    rows = {row["network"]: row for row in json.loads((tmp_path / "initial_q_scale.json").read_text())["rows"]}
    for row in rows.values():
        medians = {style: np.median(row["draws"][style]["mean_abs_q"]) for style in ("flax", "pytorch")}
        assert row["ratio_flax_to_pytorch"] == medians["flax"] / medians["pytorch"]
        assert len(row["draws"]["pytorch"]["max_abs_q"]) == 4
    assert rows["mlp"]["ratio_flax_to_pytorch"] > 3 and rows["nature"]["ratio_flax_to_pytorch"] > 2
    assert 0.5 < rows["maze_conv"]["ratio_flax_to_pytorch"] < 2
    assert (rows["mlp"]["observations"], rows["maze_conv"]["observations"]) == (100, 340)
    assert "| mlp (chain, 100 observations) |" in (tmp_path / "initial_q_scale.md").read_text()
    assert json.loads((tmp_path / "run_info.json").read_text())["command"][:3] == [
        "python", "-m", "experiments.studies.initial_q_scale"]
