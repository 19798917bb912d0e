"""Integer hashing shared by the environments and the counts (pure ``jax.numpy``, no other dependency)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def mix32(x: jax.Array) -> jax.Array:
    """The murmur3 32-bit finaliser: a bijective avalanche mix of ``uint32`` values."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)
