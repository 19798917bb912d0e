"""A learned pseudo-count from coin flips (the coin-flip network, CFN: Lobel, Bagaria and Konidaris, 2023).

At every visit of a state-action pair, draw ``d`` fair signs ``c ∈ {-1, +1}^d`` and store them with the step. A
network ``f`` trained by least squares to output the signs of the pairs it is shown converges, at each pair, to the
mean of the signs drawn there; after ``N`` visits each coordinate of that mean has variance ``1 / N``, so

    Ñ = 1 / mean_i f_i²

estimates ``N`` (unbiasedly in ``1 / N``; each of the ``d`` coordinates is an independent estimate, so the relative
spread of ``1 / Ñ`` is about ``sqrt(2 / d)``). Nothing here updates a density model step by step, so the count is
compiled, vmapped and trained on the replay's minibatches like any other network.

A pair never visited has no signs to fit, and a network's output there is whatever it generalises to (near 0 for a
fresh network: a huge count). A fixed random *prior* network, added to the trained one and normalised to unit
variance per output by running moments of the states visited, makes ``f`` start at ``mean f² ≈ 1`` everywhere:
every pair's count starts near one, and only the pairs trained on move from there (the authors' remedy).

The pieces, all pure functions of arrays:

* :func:`draw_signs` and :func:`signs_of`: ``d <= 32`` signs packed into one ``uint32`` per step (as the replay
  stores them), and unpacked to ``±1.0``;
* :func:`pseudo_count`: ``1 / mean f²`` over the last axis;
* :func:`coin_flip_loss`: the squared error of the taken actions' outputs against their signs;
* :class:`Moments`, :func:`moments_update` and :func:`normalised`: Welford's running mean and variance per output,
  and outputs scaled by them.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

MAX_SIGNS = 32
"""Signs per step: one ``uint32`` of the replay holds them."""
PRIOR_EPS = 1e-8
"""Added to the prior's running variance before its square root (a constant output has variance 0)."""
SMALLEST_COUNT = 1e-6
"""Where ``mean f²`` would divide by zero, it reads as this (a count of a million)."""


def draw_signs(key: jax.Array, num_signs: int) -> jax.Array:
    """``uint32``: ``num_signs`` fair coin flips packed as bits (bit ``i`` set: sign ``i`` is ``+1``); the bits above
    ``num_signs`` are zero."""
    if not 1 <= num_signs <= MAX_SIGNS:
        raise ValueError(f"between 1 and {MAX_SIGNS} signs fit one uint32, got {num_signs}")
    bits = jax.random.bits(key, (), jnp.uint32)
    return bits if num_signs == MAX_SIGNS else bits & jnp.uint32((1 << num_signs) - 1)


def signs_of(packed: jax.Array, num_signs: int) -> jax.Array:
    """``float32[..., num_signs]``: the packed signs as ``+1.0`` (bit set) and ``-1.0``."""
    chex.assert_type(packed, jnp.uint32)
    bits = (packed[..., None] >> jnp.arange(num_signs, dtype=jnp.uint32)) & jnp.uint32(1)
    return bits.astype(jnp.float32) * 2.0 - 1.0


def pseudo_count(outputs: jax.Array) -> jax.Array:
    """``1 / mean f²`` over the last axis (``outputs``: ``[..., d]``)."""
    return 1.0 / jnp.maximum(jnp.mean(jnp.square(outputs.astype(jnp.float32)), axis=-1), SMALLEST_COUNT)


def coin_flip_loss(taken: jax.Array, signs: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """The mean over rows (with weight, where ``weights`` is given) of ``mean_i (f_i - c_i)²``: ``taken`` is the
    network's outputs for the action each row took, ``[B, d]``, and ``signs`` the signs stored with it."""
    chex.assert_equal_shape([taken, signs])
    errors = jnp.mean(jnp.square(taken - signs), axis=-1)
    if weights is None:
        return jnp.mean(errors)
    chex.assert_shape(weights, errors.shape)
    return jnp.sum(errors * weights) / jnp.maximum(jnp.sum(weights), 1.0)


@struct.dataclass
class Moments:
    """Welford's running mean and sum of squared deviations of a vector, over ``count`` samples."""

    count: jax.Array  # float32: samples so far
    mean: jax.Array  # float32[k]
    squares: jax.Array  # float32[k]: sum of squared deviations from the running mean

    @classmethod
    def zeros(cls, size: int) -> Moments:
        return cls(count=jnp.float32(0), mean=jnp.zeros((size,), jnp.float32),
                   squares=jnp.zeros((size,), jnp.float32))

    def variance(self) -> jax.Array:
        """The population variance so far; 1 before two samples (no spread is known yet: outputs left as drawn)."""
        return jnp.where(self.count >= 2, self.squares / jnp.maximum(self.count, 1.0), 1.0)


def moments_update(moments: Moments, sample: jax.Array, real: jax.Array) -> Moments:
    """``moments`` with ``sample`` (``float32[k]``) added where ``real`` (a bool) holds, Welford's update."""
    chex.assert_shape(sample, moments.mean.shape)
    count = moments.count + 1.0
    delta = sample - moments.mean
    mean = moments.mean + delta / count
    squares = moments.squares + delta * (sample - mean)
    updated = Moments(count=count, mean=mean, squares=squares)
    return jax.tree.map(lambda new, old: jnp.where(real, new, old), updated, moments)


def normalised(outputs: jax.Array, moments: Moments) -> jax.Array:
    """``(outputs - mean) / sqrt(variance + eps)`` per output (``outputs``: ``[..., k]``)."""
    return (outputs - moments.mean) / jnp.sqrt(moments.variance() + PRIOR_EPS)


__all__ = ["MAX_SIGNS", "Moments", "coin_flip_loss", "draw_signs", "moments_update", "normalised", "pseudo_count",
           "signs_of"]
