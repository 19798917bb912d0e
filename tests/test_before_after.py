"""experiments/tools/before_after.py: the same experiment from two revisions, compared curve by curve."""

import numpy as np
import pytest

from experiments.tools.before_after import (
    AFTER_STYLE,
    BEFORE_STYLE,
    comparison_rows,
    draw,
    main,
    markdown,
    mean_difference_interval,
    rank_sum_p_value,
    seed_areas,
)
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import program_parts
from opiq_jax.running.host_loop import run_experiment
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.runs.results_folder import read_metrics

STATIC = static_for_env("chain", chain_length=8, total_steps=400, log_every=200, buffer_size=300, hidden=(16,),
                        parts=program_parts(["opiq"]))


def experiment(lr_scale: float = 1.0) -> Experiment:
    runs = []
    for method in ("opiq", "dqn_pc"):
        hp = method_hparams("chain", method)
        runs += [RunSpec(method, "paper", s, {**hp, "lr": hp["lr"] * lr_scale}) for s in range(2)]
    return Experiment(STATIC, tuple(runs))


def figure_texts(fig) -> list[str]:
    """Every text of a figure: titles, labels, tick labels and legends."""
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_same_code_twice_is_identical_and_a_change_shows(tmp_path, drawn):
    run_experiment(experiment(), tmp_path / "before", progress=False)
    run_experiment(experiment(), tmp_path / "after", progress=False)
    rows = main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after"), "--out", str(tmp_path / "cmp")])
    assert {r["method"] for r in rows} == {"opiq", "dqn_pc"}
    assert all(r["identical"] == 1.0 and r["auc_before"] == r["auc_after"] and r["seed_area_p"] == 1.0 for r in rows)
    assert (tmp_path / "cmp" / "before_after_train_return.png").stat().st_size > 10_000
    assert "| opiq | states_visited |" in (tmp_path / "cmp" / "before_after.md").read_text()

    # the figures: a panel per method named as the paper does, and a title read from the two folders' configs
    fig = drawn[0]
    assert [ax.get_title() for ax in fig.axes] == ["OPIQ", "DQN + PC"]
    title = fig._suptitle.get_text()
    for part in ("before", "after", "chain of 8 states", "2 seeds", "400 steps", "float32", "median", "25-75%"):
        assert part in title, (part, title)
    assert "before (grey, dashed): before (" in title and "after (blue, solid): after (" in title
    assert not any(method in text for text in figure_texts(fig) for method in ("opiq", "dqn_pc"))

    # --figures-only redraws the figures and leaves the table as it was
    (tmp_path / "cmp" / "before_after.md").write_text("kept")
    main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after"), "--out", str(tmp_path / "cmp"),
          "--figures-only"])
    assert (tmp_path / "cmp" / "before_after.md").read_text() == "kept"

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


def tidy_rows(areas: dict[str, list[float]], metric: str = "train_return") -> list[dict]:
    """A tidy table whose seeds' curves are flat at the given areas (two logged points each)."""
    rows = []
    for method, per_seed in areas.items():
        for seed, area in enumerate(per_seed):
            run = len({r["run"] for r in rows})
            rows += [dict(run=run, method=method, setting="paper", seed=seed, step=step, metric=metric, value=area)
                     for step in (100, 200)]
    return rows


def test_iqm_and_probability_of_improvement_by_hand():
    before, after = tidy_rows({"opiq": [1.0, 2.0, 3.0, 4.0]}), tidy_rows({"opiq": [5.0, 3.0, 4.0, 2.0]})
    (row,) = comparison_rows(before, after, "train_return")
    # IQM of four seeds cuts one from each end: before 1, 2, 3, 4 -> mean(2, 3) = 2.5; after 2, 3, 4, 5 -> 3.5
    assert (row["iqm_before"], row["iqm_after"]) == (2.5, 3.5)
    assert 1.0 <= row["iqm_before_low"] <= 2.5 <= row["iqm_before_high"] <= 4.0
    assert 2.0 <= row["iqm_after_low"] <= 3.5 <= row["iqm_after_high"] <= 5.0
    # P(after > before) over the 16 pairs: after's 2, 3, 4, 5 beat 1, 2, 3, 4 (greater) of before's values in
    # 1 + 2 + 3 + 4 = 10 pairs and tie in 3 (each half): (10 + 1.5) / 16 = 0.71875
    assert row["improvement"] == pytest.approx(0.71875)
    assert 0.0 <= row["improvement_low"] <= 0.71875 <= row["improvement_high"] <= 1.0
    # no change: P(after > before) = 1/2 (each seed ties itself, the others win and lose as often)
    (same,) = comparison_rows(before, before, "train_return")
    assert same["improvement"] == 0.5 and same["iqm_before"] == same["iqm_after"] == 2.5


def test_every_after_seed_better_gives_improvement_one():
    (row,) = comparison_rows(tidy_rows({"dqn": [0.0, 0.0, 1.0]}), tidy_rows({"dqn": [2.0, 3.0, 4.0]}), "train_return")
    assert (row["improvement"], row["improvement_low"], row["improvement_high"]) == (1.0, 1.0, 1.0)
    # three seeds: nothing is cut, the IQM is the mean
    assert row["iqm_before"] == pytest.approx(1 / 3) and row["iqm_after"] == 3.0


def test_markdown_shows_iqm_and_improvement_columns():
    rows = comparison_rows(tidy_rows({"opiq": [1.0, 2.0, 3.0, 4.0]}), tidy_rows({"opiq": [2.0, 3.0, 4.0, 5.0]}),
                           "train_return")
    text = markdown(rows)
    header, rule, line = text.splitlines()
    assert header.count("|") == rule.count("|") == line.count("|") == 15
    assert "P(after > before) (95 % CI)" in header and "| 2.5 (" in line and "| 0.72 (" in line


METHODS = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias",
           "dqn_bias_pc", "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")


def test_thirteen_methods_get_a_panel_each_named_as_the_paper(tmp_path, drawn):
    """Every method its own panel (in the paper's order), before and after differing in colour and line style, and
    every panel without one below it labelling its steps."""
    rows = tidy_rows({m: [1.0, 2.0] for m in reversed(METHODS)})
    draw(tmp_path / "f.png", rows, rows, "train_return", "the title")
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [
        "OPIQ", "OPIQ w/o OB", "OPIQ w/o PC", "ε-greedy DQN", "DQN + PC", "DQN R-Subtract", "DQN R-Subtract + PC",
        "DQN Bias", "DQN Bias + PC", "DQN + DORA", "DQN + DORA OA", "DQN + RND", "BSP"]
    assert len(fig.axes) == 16 and fig._suptitle.get_text() == "the title"
    for ax in panels:
        before, after = ax.get_lines()
        assert (before.get_linestyle(), before.get_color()) == ("--", BEFORE_STYLE["color"])
        assert (after.get_linestyle(), after.get_color()) == ("-", AFTER_STYLE["color"])
    # 4 columns: the last row holds BSP only, so the three panels above the empty places label their steps too
    labelled = [ax.get_title() for ax in panels if ax.get_xlabel() == "environment steps"]
    assert labelled == ["DQN + DORA", "DQN + DORA OA", "DQN + RND", "BSP"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["before", "after (25-75% band)"]
