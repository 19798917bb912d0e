"""``python -m experiments.paper.fig5_analysis`` on tiny hand-written maze folders whose answers are worked out by
hand: the seeds' goals, areas and dips, the methods' summaries, the probability of improvement, the verdict, the
Markdown and JSON it writes, and its figure."""

import json

import numpy as np
import pytest

from experiments.paper.fig5_analysis import main
from tests.results_folders import tidy_row, write_folder

NAN = float("nan")
STEPS = (10, 20, 30, 40)
MAZE = dict(env="maze", total_steps=40, log_every=10, precision="bfloat16")
# method -> per seed: (training returns, maximum returns) at STEPS; the goal's reward is 10.
DATA = {
    "opiq": [
        ([0, 5, 10, 10], [0, 10, 10, 10]),  # area 6.25, first goal 20, full at 30, then 10: dips 0
        ([0, 0, 10, 5], [0, 0, 10, 10]),  # area 3.75, first goal 30, full at 30, then 5: dips 1
        ([NAN, 10, 10, 10], [0, 10, 10, 10]),  # area 7.5 (NaN counts 0), first goal 20, dips 0
        ([0, 0, 0, 0], [0, 0, 0, 0]),  # area 0, never
    ],
    "opiq_no_pc": [
        ([0, 0, 0, 10], [0, 0, 0, 10]),  # area 2.5, first goal 40, nothing after the full point: no dips
        ([0, 0, 10, 10], [0, 0, 10, 10]),  # area 5, first goal 30, dips 0
    ],
}


def maze_rows(with_max: bool = True) -> list[dict]:
    rows, run = [], 0
    for method, seeds in DATA.items():
        for seed, (returns, best) in enumerate(seeds):
            for step, r, b in zip(STEPS, returns, best, strict=True):
                rows.append(tidy_row(run, method, seed, step, "train_return", float(r)))
                if with_max:
                    rows.append(tidy_row(run, method, seed, step, "max_return", float(b)))
                rows.append(tidy_row(run, method, seed, step, "epsilon", 0.01))
            run += 1
    return rows


def analysed(folder, out, reps: int = 500) -> dict:
    main([str(folder), "--out", str(out), "--reps", str(reps)])
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_the_summary_of_a_hand_worked_folder(tmp_path, drawn, capsys):
    folder = write_folder(tmp_path / "fig5, \"run\" ✓", maze_rows(), **MAZE)  # a comma, a quote and unicode
    document = analysed(folder, tmp_path / "out")

    seeds = document["seeds"]
    assert [s["method"] for s in seeds] == ["opiq"] * 4 + ["opiq_no_pc"] * 2
    assert [s["area"] for s in seeds] == [6.25, 3.75, 7.5, 0.0, 2.5, 5.0]
    assert [s["first_goal"] for s in seeds] == [20, 30, 20, None, 40, 30]
    assert [s["reached"] for s in seeds] == [True, True, True, False, True, True]
    assert [s["dips"] for s in seeds] == [0.0, 1.0, 0.0, None, None, 0.0]  # NaN (no dips to count) is null

    assert list(document["methods"]) == ["opiq", "opiq_no_pc"]
    s = document["methods"]["opiq"]
    assert (s["seeds"], s["reached"]) == (4, 3)
    assert s["first_goal_median"] == 25.0  # median of 20, 20, 30, never
    assert s["first_goal_min"] == 20 and s["first_goal_max"] is None  # "never" is written as null
    assert s["area_iqm"] == pytest.approx(5.0)  # middle two of 0, 3.75, 6.25, 7.5
    assert s["area_median"] == pytest.approx(5.0)
    assert s["area_q25"] == pytest.approx(2.8125) and s["area_q75"] == pytest.approx(6.5625)
    assert s["area_iqr"] == pytest.approx(3.75)
    assert s["dips_mean"] == pytest.approx(1 / 3)
    assert s["area_iqm_low"] <= s["area_iqm"] <= s["area_iqm_high"]
    n = document["methods"]["opiq_no_pc"]
    assert n["area_iqm"] == pytest.approx(3.75)  # two seeds: nothing trimmed
    assert n["first_goal_median"] == 35.0 and n["dips_mean"] == 0.0

    (pair,) = document["improvements"]
    assert (pair["better"], pair["worse"]) == ("opiq", "opiq_no_pc")
    assert pair["p"] == pytest.approx(5 / 8)  # 5 of the 8 (opiq, opiq_no_pc) pairs of areas favour opiq
    assert pair["low"] <= pair["p"] <= pair["high"]
    verdict = document["verdict"]
    assert verdict["ordering_holds"] is True and verdict["pairs"][0]["resolved"] == (pair["low"] > 0.5)
    assert verdict["opiq_more_stable_than_no_ob"] is None  # no opiq_no_ob in the folder
    assert document["settings"]["reps"] == 500

    text = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "| opiq | 3/4 |" in text and "never" in text and text in capsys.readouterr().out
    assert (tmp_path / "out" / "fig5_analysis.png").stat().st_size > 0

    # the figure: paper names in the legend and on the axis, a (colour, line style) per method, and a title naming
    # the folder, environment, seeds, steps and precision (read from the config), with each panel's statistic
    (fig,) = drawn
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["OPIQ", "OPIQ w/o PC"]
    assert [t.get_text() for t in right.get_xticklabels()] == ["OPIQ", "OPIQ w/o PC"]
    styles = [(line.get_color(), line.get_linestyle()) for line in left.get_lines()]
    assert styles[0][0] != styles[1][0] and styles[0][1] != styles[1][1]
    assert fig._suptitle.get_text() == "fig5, \"run\" ✓: maze 24x24, 2-4 seeds, 40 steps, bfloat16"
    assert "median" in left.get_title() and "25-75 %" in left.get_title()
    assert "IQM" in right.get_title() and "95 % CI" in right.get_title()


def test_without_max_return_a_positive_return_is_the_goal_and_a_missing_folder_is_one_line(tmp_path):
    folder = write_folder(tmp_path / "no-max", maze_rows(with_max=False), **MAZE)
    document = analysed(folder, tmp_path / "out", reps=50)
    assert [s["first_goal"] for s in document["seeds"]] == [20, 30, 20, None, 40, 30]
    with pytest.raises(SystemExit, match="^fig5_analysis: error: .*nowhere does not exist"):
        main([str(tmp_path / "nowhere")])
    assert not (tmp_path / "nowhere").exists()  # the mistyped folder is not made


ALL_METHODS = ("opiq", "opiq_no_ob", "opiq_no_pc", "dqn", "dqn_pc", "dqn_rsubtract", "dqn_rsubtract_pc", "dqn_bias",
               "dqn_bias_pc", "dqn_dora", "dqn_dora_oa", "dqn_rnd", "bsp")


def test_thirteen_methods_names_on_the_axis_do_not_overlap(tmp_path, drawn):
    """The maze figure's 13 methods: their paper names under the right panel, slanted so that no two run into one
    another (side by side they did), and the left panel's broken lines drawn over the solid ones."""
    rows = [tidy_row(i, m, 0, step, "train_return", float(i)) for i, m in enumerate(ALL_METHODS) for step in STEPS]
    analysed(write_folder(tmp_path / "all", rows, **MAZE), tmp_path / "out", reps=20)
    (fig,) = drawn
    left, right = fig.axes
    labels = right.get_xticklabels()
    assert [t.get_text() for t in labels][:4] == ["OPIQ", "OPIQ w/o OB", "OPIQ w/o PC", "BSP"]
    assert "ε-greedy DQN" in [t.get_text() for t in labels] and len(labels) == 13
    # slanted labels anchored at ticks d pixels apart lie on parallel lines d * sin(angle) apart: they stay clear of
    # one another when that is at least a line of text (upright ones, at angle 0, would need their widths)
    ticks = right.transData.transform([(i, 0) for i in range(13)])[:, 0]
    angle = np.radians(labels[0].get_rotation())
    line_height = labels[0].get_fontsize() * fig.dpi / 72
    assert 0 < angle <= np.pi / 2 and np.min(np.diff(ticks)) * np.sin(angle) >= line_height
    solid = [line.get_zorder() for line in left.get_lines() if line.get_linestyle() == "-"]
    broken = [line.get_zorder() for line in left.get_lines() if line.get_linestyle() != "-"]
    assert max(solid) < min(broken)
