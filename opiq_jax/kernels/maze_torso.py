"""The maze network's two convolutions (3x3, stride 2, 16 channels, each with its ReLU) as Pallas kernels.

Under ``vmap`` over runs XLA writes out the first convolution's 11x11x16 map and then gathers the
second convolution's patch matrix from it, 16 channels at a time; in the backward pass it scatters
that matrix's gradient back onto the map. On one H200 those steps take about half of a bfloat16
maze step (``docs/results/profile/``). The kernels here keep everything between the observation and
the second convolution's output in registers:

* for every row (sample, position of the second convolution) and every tap of the second
  convolution, the 3x3 input patch the first convolution sees there is gathered straight from the
  observation, so the first convolution is evaluated where the second reads it (225 instead of 121
  positions of a 9-by-16 product, no 16-channel map in memory);
* the forward kernel sums the nine taps' ``relu(conv1) @ W2[tap]`` and writes only the output;
* the backward kernel recomputes the first convolution tile by tile (the saved output gives the
  second ReLU's mask) and accumulates all four parameter gradients in float32 registers, so the only
  memory traffic is the observations, the output and its gradient, and the weights.

Rounding follows XLA's form of the same network (``networks.PatchConv``): each product accumulates in
float32 and is rounded to the compute dtype before its bias is added. A program handles up to 16
of a run's samples (the backward kernel's per-program gradients are summed after it); ``vmap`` over
runs (the trainer's) adds the runs to the kernels' grid. Off GPUs the
kernels run in Pallas's interpreter (for tests). Inside the kernels shapes are padded to powers of two
as Triton needs: 25 output positions to 32 rows per sample, 9 patch pixels to 16 (the padded kernel rows
are zero). The output and its gradient are read and written in their own ``[B, 25, 16]`` layout with
masked stores and loads, so no padded copy of either is made outside the kernels.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

SIDE = 24  # the observation is SIDE x SIDE x 1
KERNEL = 3
STRIDE = 2
FEATURES = 16
TAPS = KERNEL * KERNEL
OUT_SIDE = 5  # 24 -> 11 -> 5
POSITIONS = OUT_SIDE * OUT_SIDE
ROWS_PER_SAMPLE = 32  # POSITIONS padded to a power of two
PIXELS = 16  # TAPS padded to a power of two


class Launch(NamedTuple):
    """How a kernel is launched: the most samples per program, the most per step of its loop, warps."""

    program_samples: int
    tile_samples: int
    num_warps: int


# Tuned on one H200 (docs/results/profile: maze_network_variants*.json, 512 runs, batch 64): four programs per run,
# four samples per loop step; the backward kernel with two warps (1.27 ms for the network's forward
# and backward pass against 1.41 with four, 1.60 with one, 1.80 with eight); no software pipelining
# (two or more stages ask for more shared memory than the card has at larger tiles, and were slower
# at smaller ones).
FORWARD = Launch(16, 4, 4)
BACKWARD = Launch(16, 4, 2)
NUM_STAGES = 1


def _split(batch: int, launch: Launch) -> tuple[int, int]:
    """Samples per program and per step of its loop."""
    program = math.gcd(batch, launch.program_samples)
    return program, math.gcd(program, launch.tile_samples)


def _patch_offsets(tile: int) -> jax.Array:
    """``[tile * 32, 16]`` flat offsets into a tile's observations: row ``(sample, position)`` and column
    ``pixel`` address that pixel of the first convolution's patch under tap (0, 0) of the second
    convolution's output ``position``; another tap adds a constant (:func:`_tap_patches`). Padding rows
    and columns address the sample's pixel 0, which the padded kernel rows and output rows make harmless."""
    shape = (tile * ROWS_PER_SAMPLE, PIXELS)
    row = jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    pixel = jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    position = row % ROWS_PER_SAMPLE
    in_row = STRIDE * STRIDE * (position // OUT_SIDE) + pixel // KERNEL
    in_col = STRIDE * STRIDE * (position % OUT_SIDE) + pixel % KERNEL
    inside = (position < POSITIONS) & (pixel < TAPS)
    return (row // ROWS_PER_SAMPLE) * SIDE * SIDE + jnp.where(inside, in_row * SIDE + in_col, 0)


def _output_offsets(tile: int) -> tuple[jax.Array, jax.Array]:
    """``[tile * 32, 16]`` flat offsets into a tile's ``[tile, 25, 16]`` output, and which of them are real
    (rows past a sample's 25 positions are padding)."""
    shape = (tile * ROWS_PER_SAMPLE, FEATURES)
    row = jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    channel = jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    position = row % ROWS_PER_SAMPLE
    return (row // ROWS_PER_SAMPLE) * POSITIONS * FEATURES + position * FEATURES + channel, position < POSITIONS


def _load_outputs(ref, offsets: jax.Array, valid: jax.Array, first_sample) -> jax.Array:
    """``[tile * 32, 16]`` rows of an output-shaped ref (flat ``[B * 400]``), zero in the padding rows."""
    return plgpu.load(ref.at[offsets + first_sample * POSITIONS * FEATURES], mask=valid, other=0)


def _tap_patches(x_ref, offsets: jax.Array, first_sample, tap: int) -> jax.Array:
    """``[tile * 32, 16]``: row ``(sample, position)`` holds the input patch that the first convolution
    reads at tap ``tap`` of the second convolution's output ``position``: the first convolution's output
    ``(2 * out_row + tap_row, 2 * out_col + tap_col)`` reads input rows and columns from twice that."""
    tap_row, tap_col = divmod(tap, KERNEL)
    return x_ref[offsets + (first_sample * SIDE * SIDE + STRIDE * (tap_row * SIDE + tap_col))]


def _conv1(patches: jax.Array, w1: jax.Array, b1: jax.Array) -> jax.Array:
    """The first convolution's pre-activation, rounded to the compute dtype before the bias (as XLA)."""
    return plgpu.dot(patches, w1).astype(w1.dtype) + b1


def _conv2_preactivation(x_ref, offsets, w1, b1, w2_ref, b2, first_sample) -> jax.Array:
    acc = jnp.zeros((offsets.shape[0], FEATURES), jnp.float32)
    for tap in range(TAPS):
        hidden = jnp.maximum(_conv1(_tap_patches(x_ref, offsets, first_sample, tap), w1, b1), 0)
        acc = acc + plgpu.dot(hidden, w2_ref[tap])
    return acc.astype(w1.dtype) + b2


def _forward_kernel(x_ref, w1_ref, b1_ref, w2_ref, b2_ref, y_ref, *, samples: int, tile: int):
    w1, b1, b2 = w1_ref[...], b1_ref[...], b2_ref[...]
    start = pl.program_id(0) * samples
    offsets = _patch_offsets(tile)
    out_offsets, valid = _output_offsets(tile)

    def body(step, carry):
        first = start + step * tile
        y = jnp.maximum(_conv2_preactivation(x_ref, offsets, w1, b1, w2_ref, b2, first), 0)
        plgpu.store(y_ref.at[out_offsets + first * POSITIONS * FEATURES], y, mask=valid)
        return carry

    jax.lax.fori_loop(0, samples // tile, body, 0)


def _backward_kernel(x_ref, w1_ref, b1_ref, w2_ref, y_ref, dy_ref, dw1_ref, db1_ref, dw2_ref, db2_ref, *,
                     samples: int, tile: int):
    """One program's share of the parameter gradients (``[program, ...]`` outputs, summed outside)."""
    w1, b1 = w1_ref[...], b1_ref[...]
    dtype = w1.dtype
    program = pl.program_id(0)
    offsets = _patch_offsets(tile)
    out_offsets, valid = _output_offsets(tile)

    def body(step, grads):
        dw1, db1, dw2, db2 = grads
        first = program * samples + step * tile
        y = _load_outputs(y_ref, out_offsets, valid, first)
        d2 = jnp.where(y > 0, _load_outputs(dy_ref, out_offsets, valid, first), 0).astype(dtype)
        db2 = db2 + jnp.sum(d2.astype(jnp.float32), axis=0, keepdims=True)
        new_dw2 = []
        for tap in range(TAPS):
            patches = _tap_patches(x_ref, offsets, first, tap)
            pre1 = _conv1(patches, w1, b1)
            new_dw2.append(dw2[tap] + plgpu.dot(jnp.maximum(pre1, 0), d2, trans_a=True))
            d1 = jnp.where(pre1 > 0, plgpu.dot(d2, w2_ref[tap], trans_b=True).astype(dtype), 0).astype(dtype)
            dw1 = dw1 + plgpu.dot(patches, d1, trans_a=True)
            db1 = db1 + jnp.sum(d1.astype(jnp.float32), axis=0, keepdims=True)
        return dw1, db1, tuple(new_dw2), db2

    square = jnp.zeros((PIXELS, FEATURES), jnp.float32)
    row = jnp.zeros((1, FEATURES), jnp.float32)
    dw1, db1, dw2, db2 = jax.lax.fori_loop(0, samples // tile, body, (square, row, (square,) * TAPS, row))
    dw1_ref[program] = dw1
    db1_ref[program] = db1
    for tap in range(TAPS):
        dw2_ref[program, tap] = dw2[tap]
    db2_ref[program] = db2


def _kernel_operands(obs, k1, b1, k2):
    """The layouts both kernels read: the observations as one flat vector, ``k1`` as ``[16, 16]`` (rows
    past 9 zero), ``b1`` as a row, ``k2`` per tap (``[9, 16, 16]``)."""
    dtype = k1.dtype
    w1 = jnp.pad(k1.reshape(TAPS, FEATURES), ((0, PIXELS - TAPS), (0, 0)))
    return (obs.reshape(obs.shape[0] * SIDE * SIDE).astype(dtype), w1, b1.reshape(1, FEATURES),
            k2.reshape(TAPS, FEATURES, FEATURES))


def _call(kernel, launch: Launch, operands, out_shape, batch: int):
    on_gpu = jax.default_backend() == "gpu"
    samples, tile = _split(batch, launch)
    return pl.pallas_call(
        functools.partial(kernel, samples=samples, tile=tile), out_shape=out_shape, grid=(batch // samples,),
        interpret=not on_gpu,
        compiler_params=plgpu.CompilerParams(num_warps=launch.num_warps, num_stages=NUM_STAGES) if on_gpu else None,
    )(*operands)


def _check_shapes(obs, k1, b1, k2, b2) -> None:
    chex.assert_shape(obs, (None, SIDE, SIDE, 1))
    chex.assert_shape([k1, b1, k2, b2], [(KERNEL, KERNEL, 1, FEATURES), (FEATURES,),
                                         (KERNEL, KERNEL, FEATURES, FEATURES), (FEATURES,)])
    chex.assert_type([b1, k2, b2], k1.dtype)


def _forward(obs, k1, b1, k2, b2) -> jax.Array:
    """``[B, 5, 5, 16]``: the output."""
    batch = obs.shape[0]
    operands = (*_kernel_operands(obs, k1, b1, k2), b2.reshape(1, FEATURES))
    flat = _call(_forward_kernel, FORWARD, operands, jax.ShapeDtypeStruct((batch * POSITIONS * FEATURES,), k1.dtype),
                 batch)
    return flat.reshape(batch, OUT_SIDE, OUT_SIDE, FEATURES)


@jax.custom_vjp
def maze_torso(obs: jax.Array, k1: jax.Array, b1: jax.Array, k2: jax.Array, b2: jax.Array) -> jax.Array:
    """``relu(conv2(relu(conv1(obs))))`` (``[B, 5, 5, 16]``) for ``obs`` ``[B, 24, 24, 1]`` and the two
    ``PatchConv`` layers' kernels and biases, all in one compute dtype. Differentiable in the weights
    (the observations get a zero cotangent: nothing upstream of them is learnt)."""
    _check_shapes(obs, k1, b1, k2, b2)
    return _forward(obs, k1, b1, k2, b2)


def _maze_torso_fwd(obs, k1, b1, k2, b2):
    _check_shapes(obs, k1, b1, k2, b2)
    y = _forward(obs, k1, b1, k2, b2)
    return y, (obs, k1, b1, k2, y)


def _maze_torso_bwd(residuals, dy):
    obs, k1, b1, k2, y = residuals  # the output's sign is the second ReLU's mask
    batch = obs.shape[0]
    operands = (*_kernel_operands(obs, k1, b1, k2), y.reshape(-1), dy.astype(k1.dtype).reshape(-1))
    programs = batch // _split(batch, BACKWARD)[0]
    shapes = [jax.ShapeDtypeStruct((programs, *s), jnp.float32) for s in
              ((PIXELS, FEATURES), (1, FEATURES), (TAPS, FEATURES, FEATURES), (1, FEATURES))]
    dw1, db1, dw2, db2 = (g.sum(axis=0).astype(k1.dtype)
                          for g in _call(_backward_kernel, BACKWARD, operands, shapes, batch))
    return (jnp.zeros_like(obs), dw1[:TAPS].reshape(k1.shape), db1.reshape(b1.shape), dw2.reshape(k2.shape),
            db2.reshape(-1))


maze_torso.defvjp(_maze_torso_fwd, _maze_torso_bwd)
