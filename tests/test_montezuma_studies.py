"""The scripts behind Montezuma's defaults, run as their commands on folders whose answers are worked out by hand:
the cells compared (``montezuma_divergence``) and the cost of the paper's length (``montezuma_projection``)."""

import json

from experiments.bench.montezuma_projection import Args as ProjectionArgs
from experiments.bench.montezuma_projection import main as project
from experiments.studies.montezuma_divergence import main as compare
from tests.results_folders import tidy_row, write_folder

DIAGNOSTICS = ("loss", "td_error_max", "sketch_overcount", "unknown_return_share")


def cell(folder, peaks_by_seed, last_step, network_init, rooms, method="opiq"):
    """A cell of ``method``'s runs logged every 100 steps to ``last_step``, each seed's |Q| at its peak throughout."""
    rows = []
    for seed, peak in enumerate(peaks_by_seed):
        for step in range(100, last_step + 1, 100):
            values = dict.fromkeys(DIAGNOSTICS, 0.01) | dict(q_abs_max=peak, rooms_visited=rooms[seed],
                                                             max_return=100 * rooms[seed])
            rows += [tidy_row(seed, method, seed, step, metric, value) for metric, value in values.items()]
    write_folder(folder, rows, precision="float32", envs_per_run=8, network_init=network_init)
    config = json.loads((folder / "config.json").read_text())
    for run in config["runs"]:
        run["hparams"] = {"lr": 5e-4, "beta": 0.1}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "run_info.json").write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "env_steps_per_second": 1}))


def test_cells_are_compared_where_all_runs_are_and_where_the_longer_ones_are(tmp_path, capsys):
    folder = tmp_path / "cells, ✓"
    cell(folder / "authors", [5.0, 6.0], 200, "pytorch", rooms=[5, 6])
    cell(folder / "flax", [500.0, 10.0], 200, "flax", rooms=[2, 3])
    cell(folder / "short", [1.0, 2.0], 100, "flax-short", rooms=[1, 1])
    # another method, listed first: its runs are no reference for OPIQ's settings
    cell(folder / "a-baseline", [1.0, 2.0, 3.0], 200, "pytorch", rooms=[1, 1, 1], method="dqn_pc")
    # a program of two methods timed beside the cells (seed 0 of each): no cell, whose seeds would mix the methods
    write_folder(folder / "timed", [tidy_row(run, method, 0, 100, "loss", 0.01)
                                    for run, method in enumerate(("opiq", "dqn_pc"))])
    compare([str(folder)])
    assert "timed: not a cell (its runs train several methods), left out" in capsys.readouterr().out
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    assert "| timed |" not in summary
    at_all, at_longer = summary.split("At step 100 (the last every run reached)")[1].split(
        "At step 200 (the settings whose runs all reached it)")
    assert "flax-short init" in at_all and "flax-short init" not in at_longer
    rows = [line for line in at_longer.splitlines() if line.startswith("| OPIQ")]
    authors, flax = (next(line for line in rows if f"{init} init |" in line) for init in ("pytorch", "flax"))
    assert "| 5, 6 (5.5) |" in authors and "| 5, 6 | 0 of 2 |" in authors
    assert "| 500, 10 | 1 of 2 |" in flax
    # against the first setting (the authors'): rooms, returns and peaks each split 2 against 2 with no overlap, the
    # most extreme 2 of the 6 splits (p = 0.33); 1 of 2 out against 0 of 2 by Fisher's exact test (p = 1)
    assert flax.rstrip().endswith("| 0.33 / 0.33 / 1.00 / 0.33 |")
    [baseline] = [line for line in at_longer.splitlines() if line.startswith("| DQN + PC")]
    assert baseline.rstrip().endswith("| 0 of 3 |  |")
    assert (folder / "divergence.png").stat().st_size > 0


def test_the_projection_never_makes_a_run_faster_than_one_run_alone(tmp_path):
    folder = tmp_path / "one actor, ✓"
    folder.mkdir()
    (folder / "timeboxed.json").write_text(json.dumps(
        {"runs": 12, "gpus": ["NVIDIA H100 80GB HBM3"], "env_steps_per_second": 6000.0}))
    out = tmp_path / "projection.md"
    project(ProjectionArgs(folder=folder, cards=4, per_run_cap=500.0, out=out))
    [row] = [line for line in out.read_text().splitlines() if line.startswith(f"| {folder.name} |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # 12 runs x 12.5M steps at 6,000 env steps/s: 6.94 h on one card; 4 cards would give 24,000, but 12 runs at
    # 500 each make 6,000 at most, so 4 cards take as long
    assert cells[1:4] == ["12", "6,000", "6.94"] and cells[5:7] == ["4", "6.94"]
    project(ProjectionArgs(folder=folder, cards=4, out=out))  # without the bound each card keeps its rate
    [row] = [line for line in out.read_text().splitlines() if line.startswith(f"| {folder.name} |")]
    assert [c.strip() for c in row.strip("|").split("|")][6] == "1.74"
