"""Integer hashing shared by the environments and the counts (pure ``jax.numpy``, no other dependency)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


MURMUR3 = (0x85EBCA6B, 13, 0xC2B2AE35)
"""The murmur3 32-bit finaliser's multipliers and middle shift (the counts' and the environments' hash)."""
LOWBIAS32 = (0x7FEB352D, 15, 0x846CA68B)
"""Wellons's "lowbias32" constants: the same two rounds with a lower bias (packed storage's rounding bits)."""


def mix32(x: jax.Array, constants: tuple[int, int, int] = MURMUR3) -> jax.Array:
    """A bijective avalanche mix of ``uint32`` values: xorshift, multiply, xorshift, multiply, xorshift."""
    first, shift, second = constants
    x = x ^ (x >> 16)
    x = x * jnp.uint32(first)
    x = x ^ (x >> shift)
    x = x * jnp.uint32(second)
    return x ^ (x >> 16)
