"""The Montezuma headline's comparisons: the verdict says only what the evidence and the paper allow."""

from __future__ import annotations

import numpy as np

from experiments.paper.montezuma_headline import PAPER_STEPS, comparison_table, verdict


def test_no_claim_is_tested_short_of_the_papers_length():
    ahead, behind = np.array([5.0, 6, 7, 8]), np.array([1.0, 2, 3, 4])
    text = verdict(ahead, behind, "dqn_pc", 5_000_000, 2 / 70)
    assert text.startswith("inconclusive: the paper makes no claim at 5,000,000 steps") and "OPIQ ahead" in text


def test_at_the_papers_length_the_claims_direction_and_p_decide():
    ahead, behind = np.array([5.0, 6, 7, 8]), np.array([1.0, 2, 3, 4])
    assert verdict(ahead, behind, "dqn_pc", PAPER_STEPS, 0.029) == "reproduced"
    assert verdict(behind, ahead, "bsp", PAPER_STEPS, 0.029) == "differs: OPIQ behind"
    assert verdict(ahead, behind, "dqn_pc", PAPER_STEPS, 0.2).startswith("inconclusive (OPIQ ahead, p = 0.2")
    # the paper finds OPIQ w/o OB similar to OPIQ: no difference is its claim
    assert verdict(ahead, behind, "opiq_no_ob", PAPER_STEPS, 0.4) == "consistent with similar (p = 0.4)"
    assert verdict(ahead, behind, "opiq_no_ob", PAPER_STEPS, 0.029) == "differs: OPIQ ahead"


def test_the_table_compares_opiq_with_each_method_at_the_common_and_the_last_step():
    steps = np.array([1_000_000, 2_000_000])
    curve = lambda values: {"steps": steps, "values": np.array(values, float)}  # noqa: E731 (seeds x steps)
    by_metric = {"rooms_visited": {"opiq": curve([[1, 6], [1, 5], [1, 6], [1, 7]]),
                                   "dqn_pc": curve([[1, 2], [1, 2], [1, 3], [1, 2]])}}
    rows = comparison_table(by_metric, 1_000_000)
    assert len(rows) == 4  # header, rule, the common step, the last step
    assert "| rooms_visited | DQN + PC | 2,000,000 | 6 | 2 | 0.029 |" in rows[3]
    assert "| 1,000,000 | 1 | 1 | 1 |" in rows[2]
