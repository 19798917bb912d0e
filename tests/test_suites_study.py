"""``python -m experiments.studies.suites``: the suite's own score of each method, and bad environments.

A run of the script is a suite's training: its command runs on the folders that ``tests/test_minigrid.py`` and
``tests/test_craftax.py`` train (the same experiment, so it resumes a finished run and only reports). A success
in a few hundred steps cannot be made to happen there, so the scores are checked here on made-up metrics.
"""

import math

import pytest

from experiments.studies import suites


def made_up_rows(finals: dict[str, list[float]]) -> list[dict]:
    """Metrics rows of each method's seeds: greedy test returns of 0 at step 100, then ``finals`` at step 200."""
    rows = []
    for method, values in finals.items():
        for run, value in enumerate(values):
            rows += [dict(method=method, setting="", run=f"{method}-{run}", step=step, metric="test_return", value=v)
                     for step, v in ((100, 0.0), (200, value))]
    return rows


def test_minigrid_scores_the_share_of_seeds_whose_greedy_episode_reached_the_goal():
    rows = made_up_rows({"opiq": [0.9, 0.0, 0.55, 0.2], "dqn": [0.0, 0.0, float("nan"), 0.0]})
    score = {t["method"]: t for t in suites.suite_score("minigrid", "minigrid:DoorKey-16x16", rows)}
    assert score["opiq"]["success_rate"] == 0.75 and score["opiq"]["seeds"] == 4
    assert score["dqn"]["success_rate"] == 0.0 and score["dqn"]["seeds"] == 3  # a seed with no value is left out


def test_craftax_scores_the_return_as_a_share_of_what_an_episode_can_earn():
    rows = made_up_rows({"opiq": [2.2, 4.4, 6.6, 11.0]})
    [classic] = suites.suite_score("craftax", "craftax:Classic", rows)
    assert math.isclose(classic["median_percent"], 25.0)  # (4.4 + 6.6) / 2 of 22
    assert classic["iqm_percent_low"] <= classic["iqm_percent"] <= classic["iqm_percent_high"]
    assert math.isclose(classic["iqm_percent"], 25.0)  # the middle two of four
    [full] = suites.suite_score("craftax", "craftax:Craftax", rows)
    assert math.isclose(full["median_percent"], 100 * 5.5 / 226)
    assert suites.suite_score("minatar", "minatar:Breakout", rows) == []  # its returns are its score


@pytest.mark.parametrize("env", ["chain", "maze", "gymnax:CartPole-v1", "minigrid"])
def test_an_environment_that_is_not_a_suites_task_is_refused_in_one_line(env, capsys):
    with pytest.raises(SystemExit, match="is not a suite's task"):
        suites.main(["--env", env, "--no-progress"])
