"""``weight_storage="packed"``: what an update of a bfloat16 network reads and writes, in fewer bytes.

Under ``precision="bfloat16"`` with the default ``weight_storage="float32"``, an update reads and writes each
weight's float32 value (8 bytes), writes its bfloat16 copy for the forward passes (2) and reads and writes RMSProp's
float32 accumulator (8): 18 bytes per weight, beside the gradient. On the chain these passes are most of a
training step, which moves memory at the card's copy rate. Packed storage keeps:

* each weight as its bfloat16 copy, which the forward passes read, plus 8 more bits (``uint8``): a float with 16
  bits of significand (a spacing of 2^-16 to 2^-15 of the weight) rather than float32's 24;
* RMSProp's accumulator in bfloat16.

An update reads and writes 2 + 1 + 2 bytes of state per weight, 10 in all. It computes as before, in float32: the
weight is unpacked exactly, the clipped RMSProp step is taken in float32, and only the results are rounded for
storage, *stochastically*: up or down with the probabilities that make the stored value's expectation the exact
result. The accumulator needs it: its decay of 0.99 moves it by only one to three bfloat16 units a step, so
rounding to nearest would distort most of its updates. For the weights, a step at the paper's learning rate is
many units of their 16-bit spacing; stochastic rounding keeps even the smallest steps unbiased there, at a noise
of at most one spacing per step.

The random bits come from a hash of each element's index and a per-run, per-update salt (taken from the run's
learning key), so a run is reproducible, runs differ, and no random numbers are stored. The output layers, which
compute in float32 (:func:`networks.in_compute_precision`), keep float32 weights; their accumulators are
bfloat16 as the others'.

Learning with packed storage was checked against float32 storage (``docs/performance.md``).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import optax

from ..envs.hashing import LOWBIAS32, mix32
from ..kernels.mlp_backward import square_sum_total
from .networks import in_compute_precision

HALF = 0x7FFF  # added before dropping 16 bits: rounds to nearest, ties toward zero (sign and magnitude)
LOW_FILL = 0xFF  # the 8 bits below the stored ones: always 0xFF after HALF is added (see pack_weight)
NONFINITE_LOW = HALF >> 8  # unpacks to the bfloat16 copy's own bits: (LOW << 8 | LOW_FILL) - HALF == 0
GOLDEN = 0x9E3779B9  # spreads the leaves' salts apart


def element_noise(shape: tuple[int, ...], salt: jax.Array) -> jax.Array:
    """uint32 random bits for each element of an array of ``shape``, from its flat index and ``salt``."""
    index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    return mix32(index ^ salt, LOWBIAS32)


def round_bits(x: jax.Array, noise: jax.Array, dropped: int) -> jax.Array:
    """Finite float32 ``x``'s bit pattern with its lowest ``dropped`` bits rounded away stochastically by
    ``noise``. (A carry out of a NaN's significand would make it a zero: callers keep non-finite values apart.)"""
    mask = jnp.uint32((1 << dropped) - 1)
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return (bits + (noise & mask)) & ~mask


def to_bfloat16(x: jax.Array, noise: jax.Array) -> jax.Array:
    """float32 -> bfloat16, rounded stochastically (``noise``'s low 16 bits)."""
    chex.assert_type(x, jnp.float32)
    rounded = round_bits(x, noise, 16)
    stochastic = jax.lax.bitcast_convert_type((rounded >> 16).astype(jnp.uint16), jnp.bfloat16)
    return jnp.where(jnp.isfinite(x), stochastic, x.astype(jnp.bfloat16))  # NaN stays NaN, infinity infinity


def pack_weight(w: jax.Array, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """float32 -> (bfloat16 copy, uint8 low bits): ``w`` rounded stochastically to 24 bits (``noise`` bits 16-23),
    then split exactly. The copy is the 24-bit value rounded to nearest (ties toward zero), as a forward pass
    wants it; the low byte is what that rounding left over."""
    chex.assert_type(w, jnp.float32)
    bits = round_bits(w, noise >> 16, 8)
    high = (bits + jnp.uint32(HALF)) >> 16
    # bits - high * 2^16 lies in [-HALF, HALF + 1] and ends in 8 zero bits, so + HALF ends in LOW_FILL
    low = (bits - (high << 16) + jnp.uint32(HALF)) >> 8
    # NaN and infinity: the bfloat16 conversion's own (NaN stays NaN), and the low byte unpack turns back into it
    finite = jnp.isfinite(w)
    converted = jax.lax.bitcast_convert_type(w.astype(jnp.bfloat16), jnp.uint16).astype(jnp.uint32)
    high = jnp.where(finite, high, converted)
    low = jnp.where(finite, low, jnp.uint32(NONFINITE_LOW)).astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(high.astype(jnp.uint16), jnp.bfloat16), low


def unpack_weight(high: jax.Array, low: jax.Array) -> jax.Array:
    """The float32 value :func:`pack_weight` stored as ``high`` and ``low`` (exact)."""
    chex.assert_type([high, low], [jnp.bfloat16, jnp.uint8])
    high_bits = jax.lax.bitcast_convert_type(high, jnp.uint16).astype(jnp.uint32)
    bits = (high_bits << 16) + ((low.astype(jnp.uint32) << 8) | jnp.uint32(LOW_FILL)) - jnp.uint32(HALF)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def store_weight(w: jax.Array, in_bfloat16: bool, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(compute copy, low byte) of float32 ``w``: packed if the network computes with it in bfloat16, else ``w``
    itself (it is its own copy) and an empty low byte."""
    return pack_weight(w, noise) if in_bfloat16 else (w, jnp.zeros((0,), jnp.uint8))


def pack_tree(params: chex.ArrayTree, salt: jax.Array) -> tuple[chex.ArrayTree, chex.ArrayTree]:
    """float32 weights -> (the compute copy the forward passes read, the low bytes). Leaves the compute precision
    keeps in float32 stay float32 (their low byte is an empty array)."""
    cast = in_compute_precision(params, jnp.bfloat16)  # which leaves compute in bfloat16 (the casts are dead code)
    leaves, treedef = jax.tree.flatten(params)
    pairs = [store_weight(w, c.dtype == jnp.bfloat16, element_noise(w.shape, leaf_salt(salt, i)))
             for i, (w, c) in enumerate(zip(leaves, jax.tree.leaves(cast)))]
    return treedef.unflatten([p[0] for p in pairs]), treedef.unflatten([p[1] for p in pairs])


def unpack_tree(compute: chex.ArrayTree, lows: chex.ArrayTree) -> chex.ArrayTree:
    """The float32 weights from the compute copy and the low bytes (:func:`pack_tree`'s inverse)."""
    return jax.tree.map(lambda c, low: unpack_weight(c, low) if c.dtype == jnp.bfloat16 else c, compute, lows)


def leaf_salt(salt: jax.Array, index: int) -> jax.Array:
    return mix32(salt + jnp.uint32((index * GOLDEN) % 2**32), LOWBIAS32)


def init_accumulator(params: chex.ArrayTree) -> chex.ArrayTree:
    """RMSProp's accumulator at the start: zeros in bfloat16."""
    return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.bfloat16), params)


def clipped(grads: chex.ArrayTree, square_sum: jax.Array, max_norm: float) -> chex.ArrayTree:
    """``optax.clip_by_global_norm``'s operations for gradients whose squared global norm is ``square_sum``."""
    norm = jnp.sqrt(square_sum)
    return jax.tree.map(lambda g: jax.lax.select(norm < max_norm, g, (g / norm) * max_norm), grads)


def rmsprop_step(static, compute, lows, accumulator, grads, lr: jax.Array, salt: jax.Array, square_sums=None):
    """One clipped RMSProp step on packed storage: ``optimiser.make_optimiser``'s operations in float32 (the step
    is one division where optax multiplies by a reciprocal, which can differ in the last bit).

    Returns the new ``(compute, lows, accumulator)``; ``salt`` (uint32) seeds the stochastic rounding.
    ``square_sums``: the sums of squares of some kernels' gradients, from the lean backward pass
    (:mod:`mlp_backward`), so the clip's norm reads only the other leaves."""
    as_float32 = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
    if square_sums is not None:
        grads = clipped(as_float32, square_sum_total(grads, square_sums), static.grad_clip)
    else:
        grads, _ = optax.clip_by_global_norm(static.grad_clip).update(as_float32, optax.EmptyState())
    leaves, treedef = jax.tree.flatten(unpack_tree(compute, lows))
    out = []
    for i, (w, nu, g, c) in enumerate(zip(leaves, jax.tree.leaves(accumulator), jax.tree.leaves(grads),
                                          jax.tree.leaves(compute))):
        nu = static.rms_decay * nu.astype(jnp.float32) + (1.0 - static.rms_decay) * jnp.square(g)
        w = w - lr * (g / (jnp.sqrt(nu) + static.rms_eps))
        noise = element_noise(w.shape, leaf_salt(salt, i))
        out.append((*store_weight(w, c.dtype == jnp.bfloat16, noise), to_bfloat16(nu, noise)))
    return tuple(treedef.unflatten([o[k] for o in out]) for k in range(3))
