"""``python -m experiments.tools.sweep_last_step``: each setting's seeds at the last step all of them logged, read
from batch folders."""

import pytest

from experiments.tools import sweep_last_step as sls
from tests.results_folders import FIELDS, write_folder


def write_batch(folder, rows):
    """A sweep's batch folder holding ``rows`` (lists in the order of the metrics' columns)."""
    write_folder(folder, [dict(zip(FIELDS, row, strict=True)) for row in rows])


def test_table_takes_the_step_every_seed_logged_and_each_setting_separately(tmp_path):
    odd = 'β="1,2" ✓'  # a comma, a quote and unicode in a setting's label
    rows = [[0, "dqn_pc", odd, 0, 10, "max_return", 1], [0, "dqn_pc", odd, 0, 20, "max_return", 7],
            [1, "dqn_pc", odd, 1, 10, "max_return", 3],  # seed 1 has not logged step 20: the table stops at 10
            [2, "dqn_pc", "beta=1", 0, 10, "max_return", 5], [3, "dqn_pc", "beta=1", 1, 10, "max_return", 9]]
    write_batch(tmp_path / "batch_000", rows)
    write_batch(tmp_path / "batch_001", [[0, "bsp", "beta_bsp=1", 0, 30, "max_return", 4]])
    sls.main(sls.Args(tmp_path, metrics=("max_return",)))
    lines = (tmp_path / "last_step.md").read_text(encoding="utf-8").splitlines()
    body = [line for line in lines if line.startswith("| DQN") or line.startswith("| BSP")]
    assert body == [f"| DQN + PC | {odd} | 10 | 2 | 2 (1.5-2.5) |", "| DQN + PC | beta=1 | 10 | 2 | 7 (6-8) |",
                    "| BSP | beta_bsp=1 | 30 | 1 | 4 (4-4) |"]


def test_a_metric_the_sweep_did_not_log_and_a_folder_without_batches_are_one_line(tmp_path):
    write_batch(tmp_path / "batch_000", [[0, "dqn", "eps=1", 0, 10, "max_return", 0]])
    with pytest.raises(SystemExit, match="^sweep_last_step: error: .*: no rows of cells.*its metrics are max_return"):
        sls.main(sls.Args(tmp_path, metrics=("max_return", "cells")))
    with pytest.raises(SystemExit, match="^sweep_last_step: error: .*typo: the sweep folder holds no metrics"):
        sls.main(sls.Args(tmp_path / "typo"))
    assert not (tmp_path / "last_step.md").exists()
