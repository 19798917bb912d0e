"""``experiments.throughput_table`` in its tiny mode on the CPU writes a complete folder with the README's table,
and the PyTorch loop's NumPy pieces (replay windows, SimHash counts) do what its docstring says.

Run: ``JAX_PLATFORMS=cpu pytest tests/test_throughput_table.py``. The PyTorch columns are measured only where
torch is importable; without it they read "not measured".
"""

import json

import numpy as np

from experiments import throughput_table as tt
from experiments.torch_loop import FrameCounts, Replay, SimHashCounts


def test_quick_run_writes_the_folder_and_the_table(tmp_path):
    out = tmp_path / "throughput-table"
    tt.main(["--quick", "--envs", "chain", "--torch-devices", "cpu", "--out", str(out)])

    assert sorted(p.name for p in out.iterdir()) == ["README.md", "run_info.json", "table.md", "throughput.json"]
    table = (out / "table.md").read_text().splitlines()
    assert table[2:4] == tt.HEADER
    chain = table[4].split(" | ")
    assert chain[0] == "| chain" and chain[1] == "4"
    report = json.loads((out / "throughput.json").read_text())
    (row,) = report["rows"]
    this, plain = row["this"]["steps_per_s"], row["baseline"]["steps_per_s"]
    assert this > 0 and plain > 0
    assert chain[2:5] == [f"{this:,.0f}", f"{plain:,.0f}", f"{this / plain:.2f}×"]
    assert "not their code" in table[-1]
    assert (out / "table.md").read_text().strip() in (out / "README.md").read_text()

    assert row["count_features"] == "exact" and row["settings"] == tt.SAFE_SETTINGS["chain"]
    assert row["this"]["runs"] == row["baseline"]["runs"] == 4
    assert report["options"]["quick"] is True

    info = json.loads((out / "run_info.json").read_text())
    assert info["device"] and info["jax"] and info["command"].startswith("python -m experiments.throughput_table")
    assert {"chain: this project, 4 runs", "chain: plain baseline, 4 runs"} <= set(info["seconds_per_measurement"])


def test_table_rows_for_montezuma_and_torch():
    montezuma = dict(env="montezuma", runs=64, this=dict(steps_per_s=11_000.4), baseline=dict(steps_per_s=40_000.0))
    line = tt.table_row(montezuma, {})
    assert line == "| Montezuma's Revenge | 64 | 11,000 | emulators alone: 40,000 |  | not measured | not measured |"
    maze = dict(env="maze", runs=512, this=dict(steps_per_s=200_000.0), baseline=dict(steps_per_s=50_000.0))
    torch_rows = {"cpu": dict(env_steps_per_second=150.2), "cuda": None}
    assert tt.table_row(maze, torch_rows) == "| maze | 512 | 200,000 | 50,000 | 4.00× | 150 | not measured |"


def test_replay_windows_stay_within_the_stored_steps():
    replay = Replay(capacity=8, obs_shape=(2,))
    for t in range(11):  # wraps: the stored steps are 3..10, the oldest at position 3
        replay.add(np.full(2, t), t % 2, 0.0, 0.0, 0.0, np.full(2, t + 1))
    windows = replay.windows(np.random.default_rng(0), batch=500, n=3)
    steps = replay.obs[windows][..., 0]
    assert steps.min() >= 3 and steps.max() <= 10
    assert (np.diff(steps, axis=1) == 1).all()  # consecutive, never across the write position


def test_simhash_counts_count_per_code_and_action():
    counts = SimHashCounts(bits=16, obs_size=4, num_actions=2, rng=np.random.default_rng(0))
    a, b = np.eye(4, dtype=np.float32)[:2]
    code_a, code_b = counts.codes(np.stack([a, b]))
    assert code_a != code_b and counts.codes(a[None]) == [code_a]
    counts.add(code_a, 1)
    counts.add(code_a, 1)
    counts.add(code_b, 0)
    np.testing.assert_array_equal(counts.counts([code_a, code_b, b"unseen"]), [[0, 2], [1, 0], [0, 0]])


def test_frame_counts_code_the_newest_frame_at_8_by_11():
    counts = FrameCounts(num_actions=18)
    stacks = np.zeros((3, 4, 84, 84), np.uint8)
    stacks[1, -1, :40] = 255  # the newest frame differs
    stacks[2, 0] = 255  # only an older frame differs
    first, second, third = counts.codes(stacks)
    assert len(first) == 8 * 11 and first != second and first == third
