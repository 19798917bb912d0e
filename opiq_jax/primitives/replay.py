"""A fixed-size replay ring per run, held in device memory (flashbax-style ``init / add / sample``).

An item is any pytree of arrays (one environment step); the buffer stores each leaf with a leading
``capacity`` axis. What the trainer stores is the compact environment state (chain position, maze
coordinates) from which an observation is rebuilt at sampling time, which is what lets thousands of
runs fit on one device.

``sample_windows`` draws ``batch`` start indices uniformly over the stored steps and returns the
``n`` consecutive steps that follow each one (in insertion order), with a mask saying which of them
exist yet. Episode boundaries are the targets' business (see ``targets.window_mask``).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ReplayBuffer:
    items: Any  # pytree, each leaf [capacity, ...]
    position: jax.Array  # int32: where the next item goes
    size: jax.Array  # int32: how many items are stored (<= capacity)

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.items)[0].shape[0]


def init(example_item: Any, capacity: int) -> ReplayBuffer:
    """An empty buffer whose items have the shapes and dtypes of ``example_item``."""
    if capacity <= 0:
        raise ValueError(f"replay capacity must be positive, got {capacity}")
    items = jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example_item)
    return ReplayBuffer(items=items, position=jnp.int32(0), size=jnp.int32(0))


def add(buffer: ReplayBuffer, item: Any) -> ReplayBuffer:
    """Writes ``item`` at the current position, overwriting the oldest item once full."""
    chex.assert_trees_all_equal_structs(buffer.items, item)
    items = jax.tree.map(lambda store, x: store.at[buffer.position].set(x), buffer.items, item)
    capacity = buffer.capacity
    return ReplayBuffer(
        items=items,
        position=(buffer.position + 1) % capacity,
        size=jnp.minimum(buffer.size + 1, capacity),
    )


def newest_slots(buffer: ReplayBuffer, count: int) -> tuple[jax.Array, jax.Array]:
    """The slots of the ``count`` newest items (int32[count], newest first) and whether each is stored yet."""
    ages = jnp.arange(count)
    return (buffer.position - 1 - ages) % buffer.capacity, ages < buffer.size


def sample_windows(buffer: ReplayBuffer, key: chex.PRNGKey, batch_size: int, window: int) -> tuple[Any, jax.Array]:
    """``batch_size`` windows of ``window`` consecutive items, uniformly over the stored items.

    Returns ``(items, exists)``: every leaf ``[batch_size, window, ...]``, and ``exists``
    ``bool[batch_size, window]``, False where the window runs past the newest item. Call it only
    when the buffer is not empty.
    """
    capacity = buffer.capacity
    oldest = (buffer.position - buffer.size) % capacity
    age = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    ages = age[:, None] + jnp.arange(window)[None, :]
    exists = ages < buffer.size
    slots = (oldest + ages) % capacity
    items = jax.tree.map(lambda store: store[slots], buffer.items)
    return items, exists
