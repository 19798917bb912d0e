"""``experiments.bench.throughput_table`` in its tiny mode on the CPU writes a complete folder with the README's table,
its Montezuma row times the plain baseline's Atari form on EnvPool's pool (where EnvPool is installed), and the
PyTorch loop's NumPy pieces (replay windows, SimHash counts) do what its docstring says.

Run: ``JAX_PLATFORMS=cpu pytest tests/test_throughput_table.py``. The PyTorch columns are measured only where
torch is importable; without it they read "not measured".
"""

import json

import numpy as np
import pytest

from experiments.bench import throughput_table as tt
from experiments.bench.torch_loop import FrameCounts, Replay, SimHashCounts


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
    assert row["this"]["compiles_timed"] == row["baseline"]["compiles_timed"] == 0  # both compiled before the timing
    assert "XLA compile" not in (out / "table.md").read_text()
    assert report["options"]["quick"] is True

    info = json.loads((out / "run_info.json").read_text())
    assert info["device"] and info["jax"] and info["command"].startswith("python -m experiments.bench.throughput_table")
    assert {"chain: this project, 4 runs", "chain: plain baseline, 4 runs"} <= set(info["seconds_per_measurement"])


def test_table_rows_for_montezuma_and_torch():
    montezuma = dict(env="montezuma", runs=64, this=dict(steps_per_s=11_000.4), baseline=dict(steps_per_s=4_000.0),
                     emulators=dict(steps_per_s=40_000.0))
    line = tt.table_row(montezuma, {})
    assert line == "| Montezuma's Revenge | 64 | 11,000 | 4,000 | 2.75× | not measured | not measured |"
    assert tt.emulators_note(montezuma) == ("Montezuma's pool of 64 emulators alone, stepping random actions, runs "
                                            "40,000 env steps/s: the ceiling of any agent on that pool.")
    out_of_memory = {**montezuma, "baseline": dict(error="out of memory")}
    assert tt.table_row(out_of_memory, {}).startswith("| Montezuma's Revenge | 64 | 11,000 | out of memory |  |")
    maze = dict(env="maze", runs=512, this=dict(steps_per_s=200_000.0), baseline=dict(steps_per_s=50_000.0))
    torch_rows = {"cpu": dict(env_steps_per_second=150.2), "cuda": None}
    assert tt.table_row(maze, torch_rows) == "| maze | 512 | 200,000 | 50,000 | 4.00× | 150 | not measured |"


def test_montezuma_row_times_the_plain_baseline_on_the_pool(tmp_path, monkeypatch):
    """The plain baseline's Atari form really runs on EnvPool's Montezuma (two environments, a few steps); this
    project's agent and the emulators alone are stand-ins here (tests/test_montezuma.py trains the agent)."""
    pytest.importorskip("envpool")
    from experiments.bench import montezuma_bench

    monkeypatch.setattr(montezuma_bench, "time_agent", lambda pool, steps, buffer_size: dict(
        env_steps_per_second=30.0, first_call_seconds=1.0, buffer_size=buffer_size, compiles_timed=1))
    monkeypatch.setattr(montezuma_bench, "time_raw", lambda pool, steps: dict(
        env_steps_per_second=900.0, first_call_seconds=0.5, compiles_timed=0))
    monkeypatch.setattr(tt, "measure_torch", lambda *args: None)
    out = tmp_path / "throughput-table"
    tt.main(["--quick", "--envs", "montezuma", "--out", str(out)])  # the plain baseline: 5 steps timed, replay 200

    (row,) = json.loads((out / "throughput.json").read_text())["rows"]
    plain = row["baseline"]
    assert row["runs"] == 2 and plain["steps_per_s"] > 0 and plain["steps_timed"] == 5
    # of 38 steps, the 36th trains, and it is timed
    assert plain["buffer_size"] == 200 and plain["updates_timed_per_run"] == 1
    assert plain["state_bytes_per_run"] > 200 * 2 * 4 * 84 * 84  # both stacks of every transition, whole
    assert row["emulators"]["steps_per_s"] == 900.0 and "plain" in row["baseline_kind"]
    assert (row["this"]["compiles_timed"], plain["compiles_timed"], row["emulators"]["compiles_timed"]) == (1, 0, 0)
    table = (out / "table.md").read_text()
    line = next(line for line in table.splitlines() if line.startswith("| Montezuma"))
    assert line.split(" | ")[2:5] == ["30", f"{plain['steps_per_s']:,.0f}", f"{30.0 / plain['steps_per_s']:.2f}×"]
    assert tt.emulators_note(row) in table and "emulators alone" not in line
    assert "Montezuma's Revenge: 1 XLA compile fell inside this project's timed window" in table  # the stand-in's
    info = json.loads((out / "run_info.json").read_text())
    assert "montezuma: plain baseline, pool of 2" in info["seconds_per_measurement"]


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
