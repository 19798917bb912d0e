"""``python -m experiments.bench.montezuma_bench`` times no compile: each rate reports the XLA compiles made in its
timed window (``compiles_timed``), and on EnvPool's Montezuma, on one device and split over two, every one makes none.

The agent's chunk, jitted and called, compiled again on its second call (the timed one) when it ran on one device:
the first state, fresh from ``init``, is not committed to a device and the chunk's output is. It is now compiled
ahead of its first call, as ``opiq-jax train`` compiles it. A tiny pool and chunks: this checks what is timed, not
how fast. Needs EnvPool (the ``atari`` extra). Run: ``JAX_PLATFORMS=cpu pytest tests/test_montezuma_bench.py``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from opiq_jax.benchmark.throughput import counting_compiles
from tests.conftest import xla_flags_with_host_devices

pytest.importorskip("envpool")

from experiments.bench import montezuma_bench  # noqa: E402  (after the skip: it times EnvPool's pools)



def test_counting_compiles_counts_a_new_program_and_not_a_cached_one():
    double, x = jax.jit(lambda x: 2 * x), jax.block_until_ready(jnp.arange(3))
    with counting_compiles() as first:
        jax.block_until_ready(double(x))
    with counting_compiles() as again:
        jax.block_until_ready(double(x))
    assert (first[0], again[0]) == (1, 0)


# A pool of 2, 40 steps per environment (more than a batch of 32, so the timed chunk learns), on one device and split
# over two CPU devices (a subprocess: the device count is fixed at start-up). The agent without overlap and without
# updates is timed by the same function as the agent, with other options (four more Montezuma programs to compile,
# which EnvPool keeps out of the compilation cache): --no-strict leaves them out, and their table is checked by hand.
COMMAND = ["--pool-sizes", "2", "--steps", "40", "--buffer-size", "200", "--devices", "2", "--no-strict"]


def test_every_rate_on_one_device_and_split_over_two_times_no_compile(tmp_path):
    out = tmp_path / "bench, ✓"  # a comma and unicode in the folder's name
    env = {**os.environ, "XLA_FLAGS": xla_flags_with_host_devices(2), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-m", "experiments.bench.montezuma_bench", *COMMAND, "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((out / "montezuma_bench.json").read_text())
    assert [(r["kind"], r["devices"]) for r in saved["rows"]] == [(k, d) for d in (1, 2) for k in ("raw", "agent")]
    assert all(r["compiles_timed"] == 0 and r["env_steps_per_second"] > 0 for r in saved["rows"]), saved["rows"]
    assert saved["device"] == "2 x cpu" and saved["settings"]["pool_sizes"] == [2]
    assert saved["settings"]["strict"] is False
    table = (out / "montezuma_bench.md").read_text()
    assert table.startswith("Montezuma throughput on 2 x cpu") and "XLA compiles" not in table
    assert "Where a step's time goes" not in table  # its parts were not timed
    rates = [line.split(" | ") for line in table.splitlines() if line.startswith("| 2 |")]
    assert [r[:2] for r in rates] == [["| 2", "1"], ["| 2", "2"]] and all("not timed" in r[5] for r in rates)


def made_up_rows(devices: int) -> list[dict]:
    """Rows of every kind at a pool of 2 on ``devices`` devices: 900, 300, 250 and 400 steps/s."""
    agent = dict(pool_size=2, devices=devices, runs=2, envs_per_run=1, compiles_timed=0, state_bytes_per_run=2**20,
                 paper_state_bytes_per_run=2**30, buffer_size=200)
    return [dict(pool_size=2, devices=devices, kind="raw", env_steps_per_second=900.0, compiles_timed=0),
            {**agent, "kind": "agent", "env_steps_per_second": 300.0},
            {**agent, "kind": "agent_strict", "env_steps_per_second": 250.0},
            {**agent, "kind": "agent_no_updates", "env_steps_per_second": 400.0}]


def test_the_strict_agents_rates_split_a_steps_time_by_layout():
    """Where a step's time goes, from the strict agent's rates (by hand): emulators 1e6/900, the per-step work
    1e6/400 - 1e6/900, the updates 1e6/250 - 1e6/400, hidden by the overlap 1e6/250 - 1e6/300."""
    table = montezuma_bench.table(made_up_rows(1) + made_up_rows(2), "CPU")
    rates, shares = (part.splitlines() for part in table.split("Where a step's time goes"))
    assert [line.split(" | ")[:2] for line in rates if line.startswith("| 2 |")] == [["| 2", "1"], ["| 2", "2"]]
    assert [line.split(" | ")[:2] for line in shares if line.startswith("| 2 |")] == [["| 2", "1"], ["| 2", "2"]]
    first = [line for line in shares if line.startswith("| 2 | 1 |")][0]
    assert first == "| 2 | 1 | 1111.11 (28%) | 1388.89 (35%) | 1500.00 (38%) | 666.67 (17%) |"
    assert "| 300 | 33% | 250 | 28% | 400 | 44% |" in [line for line in rates if line.startswith("| 2 | 1 |")][0]


def test_the_table_names_a_rate_whose_window_held_a_compile():
    """By hand: a sound run has no compile in its windows (above), so the note for one is checked on made-up rows."""
    raw = dict(pool_size=2, devices=1, kind="raw", env_steps_per_second=900.0, compiles_timed=0)
    agent = dict(pool_size=2, devices=1, kind="agent", runs=2, envs_per_run=1, env_steps_per_second=300.0,
                 compiles_timed=1, state_bytes_per_run=2**20, paper_state_bytes_per_run=2**30, buffer_size=200)
    assert "XLA compiles" not in montezuma_bench.table([raw, {**agent, "compiles_timed": 0}], "CPU")
    assert "too low): agent at 2 on 1 device(s): 1." in montezuma_bench.table([raw, agent], "CPU")
