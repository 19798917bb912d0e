"""``python -m experiments.tools.before_after``: the same experiment from two revisions, compared curve by curve;
trained folders for what is identical and what changed, hand-written ones for the statistics worked out by hand."""

import numpy as np
import pytest

from experiments.tools.before_after import main
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import program_parts
from opiq_jax.host.host_loop import run_experiment
from opiq_jax.runs.experiment import Experiment, RunSpec
from tests.results_folders import curve_rows, write_folder

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
    rows = main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after"),
                 "--out", str(tmp_path / "cmp")])
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
    changed = main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "changed"), "--metrics", "loss"])
    assert {r["method"] for r in changed} == {"opiq", "dqn_pc"} and all(r["identical"] < 1.0 for r in changed)

    # another experiment's folder (fewer seeds) is refused in one line, and a mistyped folder is not made
    run_experiment(Experiment(STATIC, experiment().runs[:3]), tmp_path / "shorter", progress=False)
    with pytest.raises(SystemExit, match="^before_after: error: .*different seeds or steps"):
        main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "shorter")])
    with pytest.raises(SystemExit, match="^before_after: error: .*does not exist"):
        main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "typo")])
    assert not (tmp_path / "typo").exists()


CHAIN = dict(env="chain", chain_length=10, total_steps=300, log_every=100, precision="float32")
NAN = float("nan")


def flat_rows(areas: dict[str, list[float]]) -> list[dict]:
    """A tidy table whose seeds' curves are flat at the given areas (three logged points each); a NaN area is a seed
    whose curve is all NaN (no finished episode)."""
    return curve_rows({method: [[area] * 3 for area in per_seed] for method, per_seed in areas.items()},
                      (100, 200, 300))


def compared(tmp_path, before: list[dict], after: list[dict]) -> dict[str, dict]:
    """``before_after`` on two hand-written folders: its rows by method, and the Markdown it wrote."""
    write_folder(tmp_path / "before", before, **CHAIN)
    write_folder(tmp_path / "after, ✓", after, **CHAIN)  # a comma and unicode in a folder's name
    rows = main(["--before", str(tmp_path / "before"), "--after", str(tmp_path / "after, ✓"), "--out",
                 str(tmp_path / "cmp")])
    return {r["method"]: r for r in rows}


def test_the_statistics_of_hand_worked_seeds(tmp_path):
    before = flat_rows({"opiq": [0.0, 1, 2, 3, 4], "dqn": [1.0, 2, 3], "dqn_pc": [1.0, 2, 3, 4], "bsp": [0.0] * 4,
                        "opiq_no_pc": [2.0, NAN]})
    after = flat_rows({"opiq": [5.0, 6, 7, 8, 9], "dqn": [4.0, 6, 8], "dqn_pc": [5.0, 3, 4, 2], "bsp": [0.0] * 4,
                       "opiq_no_pc": [2.0, NAN]})
    rows = compared(tmp_path, before, after)

    # rank sum: separated samples of five; the exact two-sided Mann-Whitney p is 2/252 = 0.0079, the normal
    # approximation with continuity correction gives 0.0122 (as scipy's asymptotic method); all tied gives 1
    assert rows["opiq"]["seed_area_p"] == pytest.approx(0.012186, rel=1e-4)
    assert rows["bsp"]["seed_area_p"] == 1.0 and rows["bsp"]["identical"] == 1.0
    assert rows["opiq"]["identical"] == 0.0

    # before 1, 2, 3 (variance 1), after 4, 6, 8 (variance 4): change 4, standard error sqrt(1/3 + 4/3)
    dqn = rows["dqn"]
    assert dqn["seed_area_change"] == pytest.approx(4.0)
    low, high = 4.0 - 1.96 * np.sqrt(5 / 3), 4.0 + 1.96 * np.sqrt(5 / 3)
    assert (dqn["seed_area_change_low"], dqn["seed_area_change_high"]) == pytest.approx((low, high))
    # every after seed better: P(after > before) = 1 with a degenerate interval; three seeds: the IQM is the mean
    assert (dqn["improvement"], dqn["improvement_low"], dqn["improvement_high"]) == (1.0, 1.0, 1.0)
    assert dqn["iqm_before"] == pytest.approx(2.0) and dqn["iqm_after"] == pytest.approx(6.0)

    # IQM of four seeds cuts one from each end: before 1, 2, 3, 4 -> mean(2, 3) = 2.5; after 2, 3, 4, 5 -> 3.5
    pc = rows["dqn_pc"]
    assert (pc["iqm_before"], pc["iqm_after"]) == (2.5, 3.5)
    assert 1.0 <= pc["iqm_before_low"] <= 2.5 <= pc["iqm_before_high"] <= 4.0
    assert 2.0 <= pc["iqm_after_low"] <= 3.5 <= pc["iqm_after_high"] <= 5.0
    # P(after > before) over the 16 pairs: after's 2, 3, 4, 5 beat before's 1, 2, 3, 4 in 1 + 2 + 3 + 4 = 10 pairs
    # and tie in 3 (each half): (10 + 1.5) / 16 = 0.71875
    assert pc["improvement"] == pytest.approx(0.71875)
    assert 0.0 <= pc["improvement_low"] <= 0.71875 <= pc["improvement_high"] <= 1.0

    # a seed with no finished episode (all NaN) has area 0: the mean of 2 and 0; NaN equals NaN point by point
    none = rows["opiq_no_pc"]
    assert none["seed_area_mean_before"] == pytest.approx(1.0) and none["identical"] == 1.0
    # no change: P(after > before) = 1/2 (each seed ties itself, the others win and lose as often)
    assert rows["bsp"]["improvement"] == 0.5 and none["improvement"] == 0.5

    header, rule, *lines = (tmp_path / "cmp" / "before_after.md").read_text(encoding="utf-8").splitlines()[4:]
    assert header.count("|") == rule.count("|") == 15 and all(line.count("|") == 15 for line in lines)
    assert "P(after > before) (95 % CI)" in header
    (pc_line,) = [line for line in lines if line.startswith("| dqn_pc |")]
    assert "| 2.5 (" in pc_line and "| 0.72 (" in pc_line


METHODS = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias",
           "dqn_bias_pc", "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")


def test_thirteen_methods_get_a_panel_each_named_as_the_paper(tmp_path, drawn):
    """Every method its own panel (in the paper's order), before and after differing in colour and line style, and
    every panel without one below it labelling its steps."""
    rows = flat_rows({m: [1.0, 2.0] for m in reversed(METHODS)})
    compared(tmp_path, rows, rows)
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [
        "OPIQ", "OPIQ w/o OB", "OPIQ w/o PC", "ε-greedy DQN", "DQN + PC", "DQN R-Subtract", "DQN R-Subtract + PC",
        "DQN Bias", "DQN Bias + PC", "DQN + DORA", "DQN + DORA OA", "DQN + RND", "BSP"]
    assert len(fig.axes) == 16 and "after (blue, solid): after, ✓ (chain of 10 states" in fig._suptitle.get_text()
    before_lines = {(line.get_linestyle(), line.get_color()) for ax in panels for line in ax.get_lines()[:1]}
    after_lines = {(line.get_linestyle(), line.get_color()) for ax in panels for line in ax.get_lines()[1:]}
    assert len(before_lines) == len(after_lines) == 1 and before_lines != after_lines
    assert {style for style, _ in before_lines | after_lines} == {"--", "-"}
    # 4 columns: the last row holds BSP only, so the three panels above the empty places label their steps too
    labelled = [ax.get_title() for ax in panels if ax.get_xlabel() == "environment steps"]
    assert labelled == ["DQN + DORA", "DQN + DORA OA", "DQN + RND", "BSP"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["before", "after (25-75% band)"]
