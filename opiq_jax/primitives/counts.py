"""Visit counts held in jit-compatible hashed arrays.

Three pieces, all pure functions of arrays:

* features: what is counted. SimHash bits ``sign(A @ flatten(obs))`` (chain, maze, any flat
  observation), the environment's exact cell id, or the Montezuma frame feature (last frame
  area-downsampled to 8x11, 8 intensity levels).
* codes: a feature packed into a short ``uint32`` vector, so that every feature type reaches the
  sketch in the same form.
* the count-min sketch: ``int32[actions, rows, width]`` per run. ``update`` adds one to a cell in
  every row, ``query`` takes the minimum over rows, so a count is never under-counted and is
  over-counted only when a code collides with another code in *every* row.
* the probe: exact counts of a sample of the codes a run counts, read against the sketch's counts of
  the same codes, so that a run reports how much its sketch over-counts (:class:`CountProbe`).

The hash family that maps a code to one column per row is fixed (derived arithmetically from the
row index), so two runs that saw the same codes hold identical sketches.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

from flax import struct

from opiq_jax.envs.hashing import LOWBIAS32, mix32

DEFAULT_ROWS = 4
DEFAULT_WIDTH = 1 << 14

MONTEZUMA_FEATURE_SHAPE = (8, 11)
MONTEZUMA_LEVELS = 8


# --------------------------------------------------------------------------------------------
# Features


def simhash_matrix(key: chex.PRNGKey, num_bits: int, obs_dim: int) -> jax.Array:
    """The SimHash projection ``A``: ``num_bits x obs_dim`` with i.i.d. N(0, 1) entries."""
    if num_bits <= 0 or obs_dim <= 0:
        raise ValueError(f"SimHash needs positive sizes, got num_bits={num_bits}, obs_dim={obs_dim}")
    return jax.random.normal(key, (num_bits, obs_dim), dtype=jnp.float32)


def simhash_bits(matrix: jax.Array, obs: jax.Array) -> jax.Array:
    """``sign(A @ flatten(obs)) > 0`` as a bool vector of ``num_bits``."""
    flat = jnp.reshape(obs, (-1,)).astype(jnp.float32)
    chex.assert_rank(matrix, 2)
    chex.assert_equal(matrix.shape[1], flat.shape[0])
    # Full float32 precision: with TF32 (the GPU default) a projection near zero can change sign
    # between a batched and an unbatched evaluation, and the same state would get two codes.
    return jnp.dot(matrix, flat, precision=jax.lax.Precision.HIGHEST) > 0


def pack_bits(bits: jax.Array) -> jax.Array:
    """Packs a bool vector into ``uint32`` words (32 bits each, zero padded)."""
    chex.assert_rank(bits, 1)
    num_words = -(-bits.shape[0] // 32)
    padded = jnp.zeros((num_words * 32,), jnp.uint32).at[: bits.shape[0]].set(bits.astype(jnp.uint32))
    shifts = jnp.arange(32, dtype=jnp.uint32)
    return jnp.sum(padded.reshape(num_words, 32) << shifts, axis=1, dtype=jnp.uint32)


def pack_levels(levels: jax.Array, bits_per_level: int) -> jax.Array:
    """Packs small non-negative integers (each < 2**bits_per_level) into ``uint32`` words."""
    per_word = 32 // bits_per_level
    flat = jnp.reshape(levels, (-1,)).astype(jnp.uint32)
    num_words = -(-flat.shape[0] // per_word)
    padded = jnp.zeros((num_words * per_word,), jnp.uint32).at[: flat.shape[0]].set(flat)
    shifts = (jnp.arange(per_word, dtype=jnp.uint32) * bits_per_level).astype(jnp.uint32)
    return jnp.sum(padded.reshape(num_words, per_word) << shifts, axis=1, dtype=jnp.uint32)


def simhash_code(matrix: jax.Array, obs: jax.Array) -> jax.Array:
    """The SimHash feature of ``obs`` packed as ``uint32[ceil(num_bits / 32)]``."""
    return pack_bits(simhash_bits(matrix, obs))


def cell_code(cell_id: jax.Array) -> jax.Array:
    """An exact integer state id as a one-word code."""
    return jnp.reshape(jnp.asarray(cell_id).astype(jnp.uint32), (1,))


def _area_weights(in_size: int, out_size: int) -> np.ndarray:
    """Row-stochastic ``[out, in]`` matrix of area interpolation (OpenCV's INTER_AREA)."""
    scale = in_size / out_size
    weights = np.zeros((out_size, in_size), np.float64)
    for o in range(out_size):
        start, end = o * scale, (o + 1) * scale
        for i in range(int(np.floor(start)), int(np.ceil(end))):
            weights[o, i] = max(0.0, min(end, i + 1) - max(start, i))
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


_MR_ROWS = _area_weights(84, MONTEZUMA_FEATURE_SHAPE[0])
_MR_COLS = _area_weights(84, MONTEZUMA_FEATURE_SHAPE[1])


def montezuma_feature(frame: jax.Array) -> jax.Array:
    """The Montezuma count feature of one 84x84 greyscale frame (uint8 or float in [0, 255]).

    Area-downsampled to 8 rows x 11 columns, then each pixel binned into 8 levels as the
    reference does: ``int(v * 255 / 32)`` for ``v`` in [0, 1], i.e. ``floor(pixel / 32)``.
    """
    chex.assert_shape(frame, (84, 84))
    small = _MR_ROWS @ frame.astype(jnp.float32) @ _MR_COLS.T
    # A tiny tolerance keeps exact bin edges (e.g. an all-64 frame) from flooring one level low
    # after the float matrix products.
    levels = jnp.floor(small / 32.0 + 1e-4).astype(jnp.int32)
    return jnp.clip(levels, 0, MONTEZUMA_LEVELS - 1)


def montezuma_code(frame: jax.Array) -> jax.Array:
    """The Montezuma feature packed 3 bits per pixel into ``uint32[9]``."""
    return pack_levels(montezuma_feature(frame), bits_per_level=3)


# --------------------------------------------------------------------------------------------
# Hashing codes to sketch columns


def sketch_columns(code: jax.Array, num_rows: int, width: int) -> jax.Array:
    """One column in ``[0, width)`` per sketch row for a ``uint32`` code vector."""
    chex.assert_rank(code, 1)
    code = code.astype(jnp.uint32)
    rows = jnp.arange(num_rows, dtype=jnp.uint32)
    h = mix32(rows * jnp.uint32(0x9E3779B9) + jnp.uint32(0x7F4A7C15))
    for w in range(code.shape[0]):
        h = mix32(h ^ mix32(code[w] + jnp.uint32(w) * jnp.uint32(0x632BE5AB)))
    return (h % jnp.uint32(width)).astype(jnp.int32)


# --------------------------------------------------------------------------------------------
# The count-min sketch


def init_sketch(num_actions: int, num_rows: int = DEFAULT_ROWS, width: int = DEFAULT_WIDTH) -> jax.Array:
    """An empty count-min sketch, one per action: ``int32[num_actions, num_rows, width]``."""
    if num_actions <= 0 or num_rows <= 0 or width <= 0:
        raise ValueError(f"sketch sizes must be positive, got {num_actions=}, {num_rows=}, {width=}")
    return jnp.zeros((num_actions, num_rows, width), jnp.int32)


def update(sketch: jax.Array, columns: jax.Array, action: jax.Array, valid: jax.Array | bool = True) -> jax.Array:
    """Adds one visit of ``(code, action)``; ``columns`` from :func:`sketch_columns`.

    ``valid=False`` leaves the sketch unchanged (used to mask EnvPool's fake reset steps).
    """
    chex.assert_rank(sketch, 3)
    chex.assert_shape(columns, (sketch.shape[1],))
    rows = jnp.arange(sketch.shape[1])
    return sketch.at[action, rows, columns].add(jnp.asarray(valid, jnp.int32))


def query(sketch: jax.Array, columns: jax.Array, action: jax.Array) -> jax.Array:
    """``N(s, a)``: the minimum over rows of the action's counters (never below the true count)."""
    chex.assert_shape(columns, (sketch.shape[1],))
    rows = jnp.arange(sketch.shape[1])
    return jnp.min(sketch[action, rows, columns])


def query_all_actions(sketch: jax.Array, columns: jax.Array) -> jax.Array:
    """``N(s, .)`` for every action: ``int32[num_actions]``."""
    chex.assert_shape(columns, (sketch.shape[1],))
    rows = jnp.arange(sketch.shape[1])
    return jnp.min(sketch[:, rows, columns], axis=-1)


# --------------------------------------------------------------------------------------------
# The probe: exact counts of a sample of codes, to measure the sketch's over-counting


@struct.dataclass
class CountProbe:
    """Exact visit counts of up to ``slots`` codes, one code per slot.

    A code owns the slot its hash picks (:func:`probe_slot`) if the slot is free at the code's first visit;
    slots are never freed, so a code that owns a slot owned it from its first visit on and its counts are
    exact. Codes whose slot was taken first are not tracked. The sample is therefore weighted towards the
    codes a run met early, which is what a fixed-size, collision-free table can hold.
    """

    codes: jax.Array  # uint32[slots, words]: the code owning each slot
    owned: jax.Array  # bool[slots]: the slot has an owner
    counts: jax.Array  # int32[slots, actions]: its exact visits per action


def init_probe(slots: int, code_words: int, num_actions: int) -> CountProbe:
    """An empty probe of ``slots`` codes of ``code_words`` ``uint32`` words each."""
    if slots <= 0 or code_words <= 0 or num_actions <= 0:
        raise ValueError(f"probe sizes must be positive, got {slots=}, {code_words=}, {num_actions=}")
    return CountProbe(codes=jnp.zeros((slots, code_words), jnp.uint32), owned=jnp.zeros((slots,), bool),
                      counts=jnp.zeros((slots, num_actions), jnp.int32))


def probe_slot(code: jax.Array, slots: int) -> jax.Array:
    """The probe slot of a ``uint32`` code vector: a hash of its own (another mix than the sketch's rows)."""
    chex.assert_rank(code, 1)
    h = jnp.uint32(0x5BD1E995)
    for w in range(code.shape[0]):
        h = mix32(h ^ mix32(code[w].astype(jnp.uint32) + jnp.uint32(w), LOWBIAS32), LOWBIAS32)
    return (h % jnp.uint32(slots)).astype(jnp.int32)


def probe_update(probe: CountProbe, code: jax.Array, action: jax.Array, valid: jax.Array | bool = True) -> CountProbe:
    """One visit of ``(code, action)``: counted where the code owns its slot, or claims it while it is free."""
    chex.assert_shape(code, probe.codes.shape[1:])
    slot = probe_slot(code, probe.codes.shape[0])
    mine = jnp.all(probe.codes[slot] == code.astype(jnp.uint32)) & probe.owned[slot]
    take = jnp.asarray(valid, bool) & (mine | ~probe.owned[slot])
    return probe.replace(
        codes=probe.codes.at[slot].set(jnp.where(take, code.astype(jnp.uint32), probe.codes[slot])),
        owned=probe.owned.at[slot].set(probe.owned[slot] | take),
        counts=probe.counts.at[slot, action].add(take.astype(jnp.int32)),
    )


def probe_overcount(probe: CountProbe, sketch: jax.Array) -> dict[str, jax.Array]:
    """The sketch against the probe's exact counts, over every (tracked code, action) pair.

    ``overcount``: the mean of ``N_sketch - N_exact`` (never negative); ``false_visits``: the share of the pairs
    never taken that the sketch reads as taken at least once (an untried action OPIQ would no longer treat as
    untried); ``codes``: how many codes the probe tracks. NaN where it tracks none.
    """
    chex.assert_rank(sketch, 3)
    columns = jax.vmap(lambda code: sketch_columns(code, sketch.shape[1], sketch.shape[2]))(probe.codes)
    read = jax.vmap(lambda cols: query_all_actions(sketch, cols))(columns)  # [slots, actions]
    owned = jnp.broadcast_to(probe.owned[:, None], read.shape)
    pairs = jnp.sum(owned)
    untaken = owned & (probe.counts == 0)
    over = jnp.where(owned, read - probe.counts, 0).astype(jnp.float32)
    return {
        "overcount": jnp.where(pairs > 0, jnp.sum(over) / jnp.maximum(pairs, 1), jnp.nan),
        "false_visits": jnp.where(jnp.sum(untaken) > 0,
                                  jnp.sum(untaken & (read > 0)) / jnp.maximum(jnp.sum(untaken), 1), jnp.nan),
        "codes": jnp.sum(probe.owned).astype(jnp.float32),
    }
