"""A pool per device: on a host with several devices the pool path splits its runs over them, each device's runs
stepping the emulators of their own EnvPool pool (two CPU devices stand in for two GPUs, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from opiq_jax.envs.atari import threads_per_pool
from tests.conftest import xla_flags_with_host_devices

TWO_DEVICES = textwrap.dedent('''
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec
    from opiq_jax import train, read_metrics
    from opiq_jax.runs.devices import devices_mesh
    from opiq_jax.envs.atari import DevicePools
    from opiq_jax.envs.montezuma import MontezumaPool

    # raw: two pools of 3, one per device, against one pool of 6 seeded alike, under the same actions
    pools = DevicePools([MontezumaPool(3, seed=3 * d, num_threads=1) for d in range(2)], devices_mesh(jax.devices()))
    one = MontezumaPool(6, seed=0, num_threads=2)
    handle, first = pools.reset()
    one_handle, one_first = one.reset()
    actions = jax.random.randint(jax.random.key(1), (40, 6), 0, 18)
    spec = PartitionSpec("runs")

    def local(handle, actions):
        def body(h, a):
            h, out = pools.step(h, a)
            return h, (out.obs[:, -1], out.reward, out.first)
        return jax.lax.scan(body, handle, actions.T)

    per_device = jax.jit(jax.shard_map(local, mesh=pools.mesh, in_specs=(spec, PartitionSpec("runs")),
                                       out_specs=(spec, PartitionSpec(None, "runs")), check_vma=False))
    _, split = per_device(handle, actions.T)
    _, whole = jax.lax.scan(lambda h, a: (lambda r: (r[0], (r[1].obs[:, -1], r[1].reward, r[1].first)))(one.step(h, a)),
                            one_handle, actions)
    same = all(bool(jnp.array_equal(a, b)) for a, b in zip(split, whole))

    # the trainer: 4 runs over the 2 devices
    out = sys.argv[1]
    results = train("montezuma", ["opiq"], 4, steps=32, log_every=16, buffer_size=256, batch_size=8, sketch_width=512,
                    out=out, verbose=False, progress=False)
    rows = sorted((r["run"], r["step"], r["metric"], r["value"]) for r in read_metrics(out))
    print(json.dumps(dict(first_equal=bool(jnp.array_equal(first.obs, one_first.obs)), steps_equal=same,
                          handle_devices=len(handle.sharding.device_set), rows=rows)))
''')


def test_threads_are_shared_out_among_the_pools_never_more_than_a_pool_has_environments():
    assert threads_per_pool(4, 64, cores=64) == 16
    assert threads_per_pool(2, 3, cores=64) == 3
    assert threads_per_pool(4, 64, cores=2) == 1


def test_each_pool_is_seeded_so_that_every_environment_gets_the_seed_one_pool_would_give_it():
    from opiq_jax.host.host_loop import pool_seeds

    seeds = pool_seeds(7, per_pool=3, count=4)
    assert [s + i for s in seeds for i in range(3)] == list(range(7, 7 + 12))


def test_two_devices_each_step_their_own_pool_and_train_as_one_device_does(tmp_path):
    pytest.importorskip("envpool")
    from opiq_jax import read_metrics, train

    # the session's XLA flags (tests/conftest.py), as the one-device run below compiles with, and 2 devices
    flags = xla_flags_with_host_devices(2)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    done = subprocess.run([sys.executable, "-c", TWO_DEVICES, str(tmp_path / "two")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    split = json.loads(done.stdout.strip().splitlines()[-1])
    assert split["handle_devices"] == 2
    assert split["first_equal"] and split["steps_equal"]  # each device's pool holds its runs' environments

    train("montezuma", ["opiq"], 4, steps=32, log_every=16, buffer_size=256, batch_size=8, sketch_width=512,
          out=tmp_path / "one", verbose=False, progress=False)
    one = sorted((r["run"], r["step"], r["metric"], r["value"]) for r in read_metrics(tmp_path / "one"))
    two = [tuple(r) for r in split["rows"]]
    assert [r[:3] for r in one] == [r[:3] for r in two]
    # the same episodes: what the emulators gave is equal; the learner's floats may round differently in a
    # program compiled for two devices
    for (_, _, metric, a), (_, _, _, b) in zip(one, two):
        if metric in ("loss", "q_start", "qplus_start", "intrinsic_reward"):
            assert a == pytest.approx(b, rel=1e-2, abs=1e-5), metric
        else:
            assert a == b or (a != a and b != b), metric  # NaN: no episode ended yet
