"""experiments/before_after.py: the same experiment from two revisions, compared curve by curve."""

import pytest

import numpy as np

from experiments.before_after import comparison_rows, main, mean_difference_interval, rank_sum_p_value, seed_areas
from opiq_jax.environments import method_hparams, static_for_env
from opiq_jax.methods import program_parts
from opiq_jax.runner import Experiment, RunSpec, read_metrics, run_experiment

STATIC = static_for_env("chain", chain_length=8, total_steps=400, log_every=200, buffer_size=300, hidden=(16,),
                        parts=program_parts(["opiq"]))


def experiment(lr_scale: float = 1.0) -> Experiment:
    runs = []
    for method in ("opiq", "dqn_pc"):
        hp = method_hparams("chain", method)
        runs += [RunSpec(method, "paper", s, {**hp, "lr": hp["lr"] * lr_scale}) for s in range(2)]
    return Experiment(STATIC, tuple(runs))


def test_same_code_twice_is_identical_and_a_change_shows(tmp_path):
    run_experiment(experiment(), tmp_path / "before", progress=False)
    run_experiment(experiment(), tmp_path / "after", progress=False)
    rows = main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after"), "--out", str(tmp_path / "cmp")])
    assert {r["method"] for r in rows} == {"opiq", "dqn_pc"}
    assert all(r["identical"] == 1.0 and r["auc_before"] == r["auc_after"] and r["seed_area_p"] == 1.0 for r in rows)
    assert (tmp_path / "cmp" / "before_after_train_return.png").stat().st_size > 10_000
    assert "| opiq | states_visited |" in (tmp_path / "cmp" / "before_after.md").read_text()

    run_experiment(experiment(lr_scale=10.0), tmp_path / "changed", progress=False)
    changed = comparison_rows(read_metrics(tmp_path / "before"), read_metrics(tmp_path / "changed"), "loss")
    assert all(r["identical"] < 1.0 for r in changed)


def test_folders_of_different_shapes_are_refused(tmp_path):
    run_experiment(experiment(), tmp_path / "before", progress=False)
    shorter = Experiment(STATIC, experiment().runs[:3])
    run_experiment(shorter, tmp_path / "after", progress=False)
    with pytest.raises(ValueError, match="different seeds or steps"):
        comparison_rows(read_metrics(tmp_path / "before"), read_metrics(tmp_path / "after"), "train_return")


def test_rank_sum_p_value():
    # separated samples of five: the exact two-sided Mann-Whitney p is 2/252 = 0.0079; the normal
    # approximation with continuity correction gives 0.0122 (as scipy's asymptotic method)
    assert rank_sum_p_value(np.arange(5), np.arange(5) + 5) == pytest.approx(0.012186, rel=1e-4)
    assert rank_sum_p_value(np.arange(5) + 5, np.arange(5)) == pytest.approx(0.012186, rel=1e-4)
    assert rank_sum_p_value(np.zeros(4), np.zeros(6)) == 1.0  # all tied
    assert rank_sum_p_value(np.array([1.0, 2, 3, 4]), np.array([1.5, 2.5, 3.5, 4.5])) > 0.5
    rng = np.random.default_rng(0)
    shifted = [rank_sum_p_value(rng.normal(size=20), rng.normal(size=20) + 2) for _ in range(20)]
    assert max(shifted) < 1e-3


def test_seed_areas_count_missing_points_as_zero():
    values = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    np.testing.assert_allclose(seed_areas(values), [4.0 / 3.0, 0.0])


def test_mean_difference_interval():
    # before 1, 2, 3 (variance 1), after 4, 6, 8 (variance 4): change 4, standard error sqrt(1/3 + 4/3)
    change, low, high = mean_difference_interval(np.array([1.0, 2, 3]), np.array([4.0, 6, 8]))
    assert change == pytest.approx(4.0)
    assert (low, high) == pytest.approx((4.0 - 1.96 * np.sqrt(5 / 3), 4.0 + 1.96 * np.sqrt(5 / 3)))
    rng = np.random.default_rng(1)
    covered = [low <= 0.5 <= high for low, high in
               (mean_difference_interval(rng.normal(size=50), rng.normal(size=50) + 0.5)[1:] for _ in range(400))]
    assert 0.92 < np.mean(covered) < 0.98
