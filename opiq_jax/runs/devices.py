"""Where a state's runs live: one device, or split over every local device (runs never communicate)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def shard_over_devices(state, num_runs: int, say: Callable[[str], None] | None = print):
    """Splits the runs axis over all local devices (data parallelism: runs never communicate).

    The step counter is replicated; every leaf of ``state.runs`` is sharded along its leading axis,
    and ``train_chunk`` (jitted without explicit shardings) follows the placement of its input. With
    one device, or a number of runs the devices do not divide, the state stays where it is.
    """
    devices = jax.local_devices()
    if len(devices) == 1:
        return state
    if num_runs % len(devices):
        if say:
            say(f"opiq-jax: {num_runs} runs do not divide over {len(devices)} devices; using one device")
        return state
    mesh = devices_mesh(devices)
    by_run, replicated = NamedSharding(mesh, PartitionSpec("runs")), NamedSharding(mesh, PartitionSpec())
    return state.replace(
        step=jax.device_put(state.step, replicated),
        runs=jax.tree.map(lambda x: jax.device_put(x, by_run), state.runs),
    )


def devices_mesh(devices) -> Mesh:
    """The one-axis mesh (``runs``) the runs are split over: the state's, and a pool per device's."""
    return Mesh(np.array(devices), ("runs",))


def runs_mesh(state) -> Mesh | None:
    """The mesh ``state``'s runs are split over (see :func:`shard_over_devices`), or None on one device."""
    sharding = jax.tree.leaves(state.runs)[0].sharding
    if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
        return sharding.mesh
    return None
