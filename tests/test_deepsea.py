"""``python -m experiments.studies.deepsea --plot-only`` on hand-written results: the measures of a finished size folder
worked out by hand, and the figure redrawn from a committed ``deepsea_runs.csv`` (no size folders) without rewriting
it. The learning itself (OPIQ finds the treasure, epsilon-greedy DQN does not) is tests/test_gymnax.py's."""

import csv
import math

from experiments.studies.deepsea import RUNS_CSV, main
from tests.results_folders import tidy_row, write_folder

NAN = float("nan")


def size_rows(run: int, method: str, max_returns: list[float], test_returns: list[float]) -> list[dict]:
    """One run of DeepSea of size 4 logged every 40 steps (10 episodes of 4 steps)."""
    rows = []
    for i, (best, greedy) in enumerate(zip(max_returns, test_returns, strict=True)):
        rows += [tidy_row(run, method, run, (i + 1) * 40, "max_return", best),
                 tidy_row(run, method, run, (i + 1) * 40, "test_return", greedy)]
    return rows


def read_csv(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_measures_of_a_finished_size_worked_out_by_hand(tmp_path, capsys):
    out = tmp_path / "deepsea, ✓"  # a comma and unicode in the folder's name
    # OPIQ: the treasure first found by step 120 (episode 30); the greedy policy finds it at steps 160 and 200 but not
    # at 120, so reliably from step 160 (episode 40). DQN: never.
    rows = size_rows(0, "opiq", [NAN, -0.01, 0.99, 0.99, 0.99], [-0.01, 0.99, -0.01, 0.99, 0.99])
    rows += size_rows(1, "dqn", [NAN, 0.0, 0.0, 0.0, 0.0], [0.0] * 5)
    write_folder(out / "size_4", rows, env="gymnax:DeepSea-bsuite", total_steps=200, log_every=40)
    main(["--out", str(out), "--sizes", "4", "--methods", "opiq", "dqn", "--plot-only"])
    runs = read_csv(out / RUNS_CSV)
    assert [(r["method"], r["first_found"], r["reliable"], r["budget"]) for r in runs] == [
        ("opiq", "30.0", "40.0", "50.0"), ("dqn", "inf", "inf", "50.0")]
    table = (out / "deepsea_scaling.md").read_text(encoding="utf-8")
    assert "| 4 | OPIQ | 50 | 1/1 | 30 (30, 30) | 1/1 | 40 (40, 40) |" in table
    assert "| 4 | ε-greedy DQN | 50 | 0/1 | > 50 (> 50, > 50) | 0/1 | > 50 (> 50, > 50) |" in table
    assert table.strip() in capsys.readouterr().out
    summary = {r["method"]: r for r in read_csv(out / "deepsea_scaling.csv")}
    assert summary["opiq"]["first_found_runs"] == "1" and math.isinf(float(summary["dqn"]["reliable_median"]))


def test_the_figure_redrawn_from_a_committed_runs_csv_which_is_left_whole(tmp_path, drawn):
    """No size folders: --plot-only reads deepsea_runs.csv (inf included); the figure names the methods as the paper
    does, tells them apart by colour, line style and marker, and its title states the seeds, steps, counting,
    precision and statistic."""
    fields = ["size", "run", "method", "seed", "first_found", "reliable", "budget"]
    committed = [[size, run, method, seed, first, "inf", 100.0 * size] for size in (4, 6)
                 for run, (method, seed, first) in enumerate([("opiq", 0, 30.0), ("opiq", 1, 50.0), ("dqn", 0, "inf"),
                                                              ("dqn", 1, "inf"), ("dqn_pc", 0, "inf"),
                                                              ("dqn_pc", 1, 70.0)])]
    with open(tmp_path / RUNS_CSV, "w", newline="") as f:
        csv.writer(f).writerows([fields, *committed])
    before = (tmp_path / RUNS_CSV).read_bytes()
    main(["--out", str(tmp_path), "--sizes", "4", "6", "--plot-only"])
    (fig,) = drawn
    title = fig._suptitle.get_text()
    for part in ("N = 4, 6", "2 seeds per method and size", "SimHash k=32", "float32", "budget 100·N episodes",
                 "1,600-3,600 steps per run", "median and 25-75% of the seeds"):
        assert part in title, (part, title)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "budget", "random policy: 2^N", "OPIQ", "ε-greedy DQN", "DQN + PC"]
    bars = [c for c in fig.axes[0].containers if c.get_label() in ("OPIQ", "ε-greedy DQN", "DQN + PC")]
    styles = {(str(c.lines[0].get_color()), c.lines[0].get_linestyle()) for c in bars}
    assert len(bars) == 3 and len(styles) == 3 and len({s for _, s in styles}) == 3
    assert "| 6 | DQN + PC | 600 | 1/2 |" in (tmp_path / "deepsea_scaling.md").read_text(encoding="utf-8")
    # a redraw of fewer sizes leaves the committed runs csv whole
    main(["--out", str(tmp_path), "--sizes", "4", "--plot-only"])
    assert (tmp_path / RUNS_CSV).read_bytes() == before
