"""``python -m experiments.paper.montezuma_headline`` on hand-written folders of timeboxed calls: its tables, verdicts
that say only what the evidence and the paper allow, and the projected cost of the paper's comparison."""

from __future__ import annotations

import json

from experiments.paper.montezuma_headline import main
from tests.results_folders import curve_rows, write_folder

METRICS = ("rooms_visited", "train_return", "max_return")
MONTEZUMA = dict(env="montezuma", total_steps=12_500_000, log_every=1_000_000, precision="float32")


def call_folder(folder, curves: dict[str, list[list[float]]], steps: tuple[int, ...], record: dict | None = None):
    """One timeboxed call's folder: ``curves[method][seed]`` logged at ``steps``, the same for every metric."""
    write_folder(folder, curve_rows(curves, steps, METRICS), **MONTEZUMA)
    if record is not None:
        (folder / "timeboxed.json").write_text(json.dumps(record))


def summary(folder, capsys) -> list[str]:
    main([str(folder)])
    text = (folder / "summary.md").read_text(encoding="utf-8")
    assert text in capsys.readouterr().out
    return text.splitlines()


def test_at_the_papers_length_the_claims_direction_and_p_decide(tmp_path, capsys):
    folder, steps = tmp_path / "montezuma, 12.5M ✓", (1_000_000, 12_500_000)
    gpus = ["NVIDIA H200"] * 4
    call_folder(folder / "call-1",
                {"opiq": [[1, 5], [1, 6], [1, 7], [1, 8]], "dqn_pc": [[1, 1], [1, 2], [1, 3], [1, 4]]},
                steps, dict(runs=8, env_steps_per_second=50_000.0, gpus=gpus))
    call_folder(folder / "call-2",
                {"bsp": [[1, 9], [1, 10], [1, 11], [1, 12]], "dqn_rnd": [[1, 4], [1, 5], [1, 6], [1, 7]]},
                steps, dict(runs=4, env_steps_per_second=25_000.0, gpus=gpus))
    call_folder(folder / "call-3", {"opiq_no_ob": [[1, 5], [1, 6], [1, 7], [1, 8]]}, steps)
    call_folder(folder / "call-4", {"dqn": [[1], [1], [1], [1]]}, steps[:1])  # cut short: the last common step is 1M
    lines = summary(folder, capsys)

    # 5, 6, 7, 8: median 6.5 with quartiles 5.75 and 7.25, the IQM the mean of the middle two
    assert "| OPIQ | 12,500,000 | 4 | 6.5 (5.75, 7.25) | 6.5 [" in "\n".join(lines)
    # 4 seeds against 4: 70 relabellings, the two most extreme 2/70 = 0.029
    rooms = {line.split(" | ")[1] + " at " + line.split(" | ")[2]: line for line in lines
             if line.startswith("| rooms_visited |")}
    assert rooms["DQN + PC at 12,500,000"].endswith("| 6.5 | 2.5 | 0.029 | reproduced |")
    assert rooms["BSP at 12,500,000"].endswith("| 6.5 | 10.5 | 0.029 | differs: OPIQ behind |")
    # the paper finds OPIQ w/o OB similar to OPIQ: no difference is its claim
    assert rooms["OPIQ w/o OB at 12,500,000"].endswith("| 6.5 | 6.5 | 1 | consistent with similar (p = 1) |")
    assert "| inconclusive (OPIQ ahead, p = 0." in rooms["DQN + RND at 12,500,000"]
    assert rooms["DQN + PC at 1,000,000"].endswith(
        "| 1 | 1 | 1 | inconclusive: the paper makes no claim at 1,000,000 steps (level, p = 1) |")

    # the projection: 12 runs x 12.5M at 50,000 steps/s = 0.83 h, each 4-run program at 25,000 = 0.56 h
    assert any(line.startswith("## The paper's comparison, projected") and "measured on 4 x NVIDIA H200" in line
               for line in lines)
    assert "| OPIQ, OPIQ w/o OB, DQN + PC | 12 | 50,000 (8 runs x 32 environments) | 0.83 | 0.42 |" in lines
    assert "| DQN + RND | 4 | 25,000 (4 runs x 32 environments) | 0.56 | 0.28 |" in lines
    assert "| all, one after another | 20 | | **1.94** | **0.97** |" in lines
    assert lines[0] == "# montezuma, 12.5M ✓: the last common step (1,000,000) and each method's last step"


def test_no_claim_is_tested_short_of_the_papers_length(tmp_path, capsys):
    folder = tmp_path / "montezuma-5m"
    call_folder(folder / "call-1", {"opiq": [[5], [6], [7], [8]], "dqn_pc": [[1], [2], [3], [4]]}, (5_000_000,))
    lines = summary(folder, capsys)
    assert lines[0] == "# montezuma-5m: the last common step (5,000,000) and each method's last step"
    (verdict,) = [line for line in lines if line.startswith("| rooms_visited | DQN + PC |")]
    assert verdict.endswith("| inconclusive: the paper makes no claim at 5,000,000 steps (OPIQ ahead, p = 0.029) |")
    assert not any("projected" in line for line in lines)  # no call measured the rates it needs
