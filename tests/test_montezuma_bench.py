"""The Montezuma timers (``experiments/bench/montezuma_bench.py``) time no compile: each reports the XLA compiles made in
its timed window (``compiles_timed``), and on EnvPool's Montezuma every one of them makes none.

The agent's chunk, jitted and called, compiled again on its second call (the timed one) when it ran on one device:
the first state, fresh from ``init``, is not committed to a device and the chunk's output is. It is now compiled
ahead of its first call, as ``opiq-jax train`` compiles it. Tiny pools and chunks: these check what is timed, not
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

POOL, STEPS = 2, 40  # 40 steps per environment: more than a batch of 32, so the timed chunk learns


def test_counting_compiles_counts_a_new_program_and_not_a_cached_one():
    double, x = jax.jit(lambda x: 2 * x), jax.block_until_ready(jnp.arange(3))
    with counting_compiles() as first:
        jax.block_until_ready(double(x))
    with counting_compiles() as again:
        jax.block_until_ready(double(x))
    assert (first[0], again[0]) == (1, 0)


@pytest.mark.parametrize("overlap", [True, False])
def test_the_agents_timed_chunk_compiles_nothing(overlap):
    row = montezuma_bench.time_agent(POOL, STEPS, buffer_size=200, overlap=overlap)
    assert row["compiles_timed"] == 0
    assert row["kind"] == ("agent" if overlap else "agent_strict") and row["env_steps_per_second"] > 0


def test_the_raw_pool_and_the_plain_baseline_time_no_compile():
    raw = montezuma_bench.time_raw(POOL, STEPS)
    plain = montezuma_bench.time_plain(POOL, STEPS, buffer_size=200)
    assert (raw["compiles_timed"], plain["compiles_timed"]) == (0, 0)
    assert plain["updates_timed_per_run"] == STEPS // 4  # it learned in the timed window: one update per 4 steps


def test_the_table_names_a_rate_whose_window_held_a_compile():
    raw = dict(pool_size=2, devices=1, kind="raw", env_steps_per_second=900.0, compiles_timed=0)
    agent = dict(pool_size=2, devices=1, kind="agent", runs=2, envs_per_run=1, env_steps_per_second=300.0,
                 compiles_timed=1, state_bytes_per_run=2**20, paper_state_bytes_per_run=2**30, buffer_size=200)
    assert "XLA compiles" not in montezuma_bench.table([raw, {**agent, "compiles_timed": 0}], "CPU")
    assert "too low): agent at 2 on 1 device(s): 1." in montezuma_bench.table([raw, agent], "CPU")


TWO_DEVICES = """
import json
from experiments.bench import montezuma_bench
row = montezuma_bench.time_agent(4, 40, buffer_size=200, devices=2)
print(json.dumps(dict(devices=row["devices"], compiles_timed=row["compiles_timed"])))
"""


def test_the_agent_split_over_two_devices_times_no_compile():
    """A pool per device, the state sharded before the first call (two CPU devices, in a subprocess)."""
    env = {**os.environ, "XLA_FLAGS": xla_flags_with_host_devices(2), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == dict(devices=2, compiles_timed=0)
