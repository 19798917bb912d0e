"""``python -m experiments.paper.tabular_regret`` at a tiny size: the table, CSV and record it writes, and its figure's
title and lines."""

import csv
import json
import math

from experiments.paper.tabular_regret import Args, main


def test_a_tiny_run_writes_the_table_the_record_and_a_figure_that_states_what_it_shows(tmp_path, drawn, capsys):
    out = tmp_path / "tabular, ✓"  # a comma and unicode in the folder's name
    main(Args(out=out, num_mdps=2, num_seeds=3, num_episodes=50, chunk=25))
    labels = ["OPIQ (M=0.5)", "OPIQ (M=1)", "OPIQ (M=2)", "OPIQ (M=10)", "UCB-H",
              "Q-learning + b_N (pessimistic init, greedy)"]
    with open(out / "regret.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == labels
    for r in rows:  # regret is V* - V^pi per episode: between 0 and H = 10, so 0 to 500 over 50 episodes
        assert (0 <= float(r["final_regret_q25"]) <= float(r["final_regret_median"])
                <= float(r["final_regret_q75"]) <= 500)
    assert "| UCB-H |" in (out / "regret.md").read_text() and "| UCB-H |" in capsys.readouterr().out
    derived = json.loads((out / "config.json").read_text())["derived"]
    # b_1 = c sqrt(H^3 log(S A K H / p)) = 0.01 sqrt(1000 log(10 * 3 * 50 * 10 / 0.05))
    assert derived["b_1"] == math.sqrt(1000 * math.log(300_000)) / 100
    assert (derived["T"], derived["runs_per_method"], derived["slope_window"]) == (500, 6, [5, 50])

    (fig,) = drawn
    (ax,) = fig.axes
    title = ax.get_title()
    for part in ("S=10, A=3, H=10", "c=0.01", "float32", "2 MDPs x 3 seeds = 6 runs per method", "50 episodes",
                 "500 steps", "median cumulative regret across the 6 runs", "25-75% band"):
        assert part in title, (part, title)
    assert [t.get_text() for t in ax.get_legend().get_texts()][:6] == labels
    lines = {line.get_label(): line for line in ax.get_lines()}
    styles = [(str(lines[label].get_color()), lines[label].get_linestyle()) for label in labels]
    assert len(set(styles)) == len(labels) and len({s for _, s in styles}) > 1
    # UCB-H lies on OPIQ (M=10) here, as in the committed run: the broken line is drawn over the solid one
    opiq, ucb = lines["OPIQ (M=10)"], lines["UCB-H"]
    assert opiq.get_color() != ucb.get_color() and opiq.get_linestyle() != ucb.get_linestyle()
    broken, solid = (opiq, ucb) if ucb.get_linestyle() == "-" else (ucb, opiq)
    assert solid.get_linestyle() == "-" and broken.get_zorder() > solid.get_zorder()
