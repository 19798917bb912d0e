"""``python -m experiments.paper.regression_illustration`` (paper Figure 2 and the granularity appendix figure) at half
its default steps: the numbers it writes, worked out by hand where the data set's layout fixes them, and its
figures' captions."""

import json

import pytest
import tyro

from experiments.paper import regression_illustration as ri

STEPS = 1500  # half the default 3000: the networks still fit the data and disagree away from it


def test_the_run_writes_figures_and_numbers_and_says_what_each_figure_draws(tmp_path, monkeypatch, capsys):
    figures = []

    class Kept(ri.Figure):  # every figure main draws (without pyplot), kept for inspection
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            figures.append(self)

    monkeypatch.setattr(ri, "Figure", Kept)
    out = tmp_path / "regression, ✓"  # a comma and unicode in the folder's name
    args = tyro.cli(ri.Args, args=["--out", str(out), "--steps", str(STEPS)])
    assert args.steps == STEPS and args.num_networks == 10
    numbers = ri.main(args)
    assert "wall-clock" in capsys.readouterr().out
    for name in ("fig2_left_optimistic_init.png", "fig2_right_count_bonus.png", "granularity_6_vs_50_bins.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG" and (out / name).stat().st_size > 1000
    saved = json.loads((out / "regression_illustration.json").read_text())
    assert saved["settings"]["steps"] == STEPS and saved["settings"]["bins"] == 50
    assert saved["numbers"] == numbers  # the JSON holds what main returned, to the last digit

    # the data: 2 clusters of 20 in [-1.55, -1.05] and [0.25, 0.75]; at least 0.5 from both lie the grid's points
    # (step 0.01) in [-0.55, -0.25] and [1.25, 2]: 31 + 76 of them
    assert numbers["num_training_points"] == 40 and numbers["far_grid_points"] >= 107
    # 6 bins of width 2/3: bins 3 ([-2/3, 0)) and 6 ([4/3, 2], 2.0 in the last bin) are empty and get the full
    # bonus C = 3, at 66 + 67 of the 401 grid points; bin 5 ([2/3, 4/3)) holds 3 points: 3 / (3 + 1)^2 at the data
    coarse = numbers["bonus_6_bins"]
    assert coarse["nonempty_bins"] == 4 and coarse["fraction_of_grid_with_full_bonus"] == 133 / 401
    assert coarse["max_at_data"] == pytest.approx(3 / 16)
    fine = numbers["bonus_50_bins"]  # with 50 bins every far point's bin is empty: the full bonus
    assert fine["mean_far"] == pytest.approx(3.0) and fine["max_at_data"] <= 3 / (1 + 1) ** 2

    # the initialisation is optimistic (output bias 3), training fits the targets in [-0.5, 0.5], and far from the
    # data the networks disagree far more than at it, every one of them below its initial 3
    assert abs(numbers["init_mean_prediction"] - 3.0) < 0.5
    assert numbers["first_step_train_mse_mean"] > 1.0 > 0.02 > numbers["final_train_mse_max"]
    assert len(numbers["final_train_mse_per_network"]) == 10
    assert numbers["spread_ratio_far_over_data"] > 5 and numbers["fraction_of_networks_below_init_bias_far"] == 1.0

    # each figure's caption: the data, the networks and their seed, the steps, the precision and which networks are
    # drawn; where the bonus is near 0 (at the data) its line, dashed, stays apart from the network's
    assert len(figures) == 3
    setting = (f"1-D regression, 40 points; 10 ReLU MLPs 1-64-64-1 (seed 0), {STEPS:,} full-batch Adam steps, "
               "float32")
    left, right, granularity = (fig._suptitle.get_text() for fig in figures)
    assert left == f"{setting}\nevery network drawn, before and after training"
    assert right == granularity == f"{setting}\nnetwork 0 of the 10 drawn, after training"
    for ax in figures[2].axes[:2]:  # the two panels (their twin axes of counts come after them)
        network, bonus = ax.get_lines()[:2]
        assert network.get_linestyle() == "-" and bonus.get_linestyle() == "--"
        assert network.get_label() == "trained network f(x)" and bonus.get_label().startswith("f(x) + 3/")
