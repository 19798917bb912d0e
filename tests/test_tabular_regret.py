"""experiments/paper/tabular_regret.py's figure: what its title states and how its lines are told apart."""

import numpy as np

from experiments.paper import tabular_regret as tr


def test_regret_figure_states_runs_episodes_statistic_and_precision(tmp_path, drawn):
    args = tr.Args(num_mdps=2, num_seeds=3, num_episodes=50)
    labels = [m.label for m in tr.methods(args)]
    runs = args.num_mdps * args.num_seeds
    cumulative = np.cumsum(np.random.default_rng(0).uniform(size=(len(labels), runs, 50)), axis=-1)
    cumulative[4] = cumulative[3]  # UCB-H exactly on OPIQ (M=10), as they nearly are in the committed run
    tr.plot(labels, cumulative, args, tmp_path / "regret.png")
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
    # where the two overlap, the broken line lies over the solid one, so both show
    opiq, ucb = lines["OPIQ (M=10)"], lines["UCB-H"]
    assert opiq.get_color() != ucb.get_color() and opiq.get_linestyle() != ucb.get_linestyle()
    broken, solid = (opiq, ucb) if ucb.get_linestyle() == "-" else (ucb, opiq)
    assert solid.get_linestyle() == "-" and broken.get_zorder() > solid.get_zorder()
