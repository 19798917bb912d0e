"""``mlp_backward="pallas"``: the MLP's backward pass without the gradient's second read for the clip's norm.

Under packed storage (:mod:`packed_state`) an update of the chain's network reads and writes every weight's
state once, at the card's copy rate; what is left of a step is mostly the backward pass, and within it two
passes over each hidden layer's weight gradient ``dW`` besides its write: the global-norm clip reads all of
``dW`` to get its norm, then RMSProp reads it again. This module removes the first of them, and the write
and read of the output layer's input gradient:

* each hidden layer's ``dW = relu(X)^T G`` (``X`` the layer's input before the previous layer's ReLU, ``G``
  its output's gradient) is written by a Pallas kernel that also returns ``dW``'s sum of squares, taken from
  the rounded values it stores. The sum leaves the backward pass as the cotangent of a scalar *probe* the
  layer reads from the flax collection ``square_sums`` (zero, never stored); the optimiser adds it up with the
  other leaves' (:func:`packed_state.rmsprop_step`), so the clip's norm is the same sum in another order;
* the output layer, which has a handful of outputs (the actions), computes its input's gradient as a sum of
  outer products rather than as a matrix product: XLA fuses those into the next layer's ReLU mask and bias
  gradient instead of writing them out.

The forward pass is the MLP's own, operation for operation. Layers whose shapes the kernel does not take
(:func:`kernel_fits`; the chain's first layer has 100 inputs) compute ``dW`` with XLA and its sum of squares
beside it, as before. Off GPUs the kernel runs in Pallas's interpreter (for tests), whose products are XLA's;
on GPUs the backward pass is fused differently, so gradients can differ from XLA's backward pass at bfloat16
rounding. Measured in ``docs/performance.md``.
"""

from __future__ import annotations

import functools

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

SQUARE_SUMS = "square_sums"  # the flax collection of the probes whose cotangents are the kernels' square sums
# One program per run writes all of its layer's dW, TILE_ROWS rows per step of its loop, with NUM_WARPS warps:
# the fastest of 32, 64 and 128 rows, 4 and 8 warps, 1 to 3 stages and two tiled grids in a probe of 4096
# runs' 256 x 256 layers on one H200 (tiled grids re-read G from memory for every tile).
TILE_ROWS = 128
MAX_OUTPUTS = 256  # a program holds TILE_ROWS x fan_out float32 accumulators
NUM_WARPS = 4
FEW_OUTPUTS = 8  # output layers with at most this many outputs get the outer-product input gradient
DIMENSIONS = (((1,), (0,)), ((), ()))  # [B, K] x [K, N] -> [B, N], as flax's Dense contracts 2-d inputs


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def kernel_fits(batch: int, fan_in: int, fan_out: int, dtype=jnp.bfloat16) -> bool:
    """Whether the Pallas kernel takes a bfloat16 layer of these sizes. Triton's blocks need powers of two of
    at least 16: the batch and the outputs are loaded whole, the inputs TILE_ROWS at a time (so any multiple of
    TILE_ROWS, or one smaller power of two). float32 layers keep XLA's product (Triton's would round to TF32)."""
    rows_ok = fan_in % TILE_ROWS == 0 or (_power_of_two(fan_in) and 16 <= fan_in < TILE_ROWS)
    return (jnp.dtype(dtype) == jnp.bfloat16 and rows_ok and _power_of_two(fan_out) and 16 <= fan_out <= MAX_OUTPUTS
            and _power_of_two(batch) and 16 <= batch <= 256)


def _transposed_product(x: jax.Array, g: jax.Array) -> jax.Array:
    """``x^T g`` in float32 (``x`` ``[B, K]``, ``g`` ``[B, N]``)."""
    if jax.default_backend() == "gpu":
        return plgpu.dot(x, g, trans_a=True)
    return jax.lax.dot_general(x, g, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _weight_gradient_kernel(x_ref, g_ref, dw_ref, square_sum_ref, *, rows: int, relu: bool):
    g = g_ref[...]
    total = jnp.zeros((), jnp.float32)
    for start in range(0, x_ref.shape[1], rows):  # G stays in registers; each step writes `rows` rows of dW
        x = x_ref[:, pl.dslice(start, rows)]
        stored = _transposed_product(jnp.maximum(x, 0) if relu else x, g).astype(dw_ref.dtype)
        dw_ref[pl.dslice(start, rows), :] = stored
        total += jnp.sum(jnp.square(stored.astype(jnp.float32)))  # the norm of what the optimiser will read
    square_sum_ref[...] = jnp.full((1,), total)


def weight_gradient(x: jax.Array, g: jax.Array, relu: bool) -> tuple[jax.Array, jax.Array]:
    """``(dW, sum(dW^2))`` of a dense layer: ``dW = relu(x)^T g`` (or ``x^T g``) in ``x``'s dtype, accumulated in
    float32, and its square sum in float32. ``x`` ``[B, K]``, ``g`` ``[B, N]``; one program per call (``vmap``
    over runs adds the runs to the grid)."""
    (batch, fan_in), fan_out = x.shape, g.shape[1]
    chex.assert_shape(g, (batch, fan_out))
    if not kernel_fits(batch, fan_in, fan_out, x.dtype):
        raise ValueError(f"the weight-gradient kernel does not take a {x.dtype} layer of {fan_in} x {fan_out} on "
                         f"{batch} rows")
    on_gpu = jax.default_backend() == "gpu"
    dw, square_sum = pl.pallas_call(
        functools.partial(_weight_gradient_kernel, rows=min(TILE_ROWS, fan_in), relu=relu), grid=(1,),
        out_shape=[jax.ShapeDtypeStruct((fan_in, fan_out), x.dtype), jax.ShapeDtypeStruct((1,), jnp.float32)],
        interpret=not on_gpu,
        compiler_params=plgpu.CompilerParams(num_warps=NUM_WARPS, num_stages=1) if on_gpu else None,
    )(x, g.astype(x.dtype))
    return dw, square_sum[0]


def _activated(x: jax.Array, relu: bool) -> jax.Array:
    return jax.nn.relu(x) if relu else x


def _product(x: jax.Array, kernel: jax.Array, relu: bool) -> jax.Array:
    """The layer's forward product, as flax's Dense computes it, with or without the probe."""
    return jax.lax.dot_general(_activated(x, relu), kernel, DIMENSIONS)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def probed_product(x: jax.Array, kernel: jax.Array, probe: jax.Array, relu: bool) -> jax.Array:
    """``relu(x) @ kernel`` (or ``x @ kernel``) as flax's Dense computes it; differentiated, ``probe``'s
    cotangent is the square sum of ``kernel``'s gradient."""
    del probe
    return _product(x, kernel, relu)


def _probed_forward(x, kernel, probe, relu):
    return probed_product(x, kernel, probe, relu), (x, kernel, probe)


def _probed_backward(relu, residuals, g):
    x, kernel, probe = residuals
    dx = jax.lax.dot_general(g, kernel, (((1,), (1,)), ((), ())))
    if relu:
        dx = jnp.where(x > 0, dx, jnp.zeros_like(dx))  # jax.nn.relu's derivative: 0 at 0
    if kernel_fits(*x.shape, kernel.shape[1], x.dtype):
        dw, square_sum = weight_gradient(x, g, relu)
    else:
        dw = jax.lax.dot_general(_activated(x, relu), g, (((0,), (0,)), ((), ()))).astype(kernel.dtype)
        square_sum = jnp.sum(jnp.square(dw.astype(jnp.float32)))
    return dx.astype(x.dtype), dw.astype(kernel.dtype), square_sum.astype(probe.dtype)


probed_product.defvjp(_probed_forward, _probed_backward)


@jax.custom_vjp
def few_outputs_product(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x @ kernel`` for a ``kernel`` of few columns; its input gradient is ``sum_k g[:, k] kernel[:, k]^T``."""
    return jax.lax.dot_general(x, kernel, DIMENSIONS)


def _few_forward(x, kernel):
    return few_outputs_product(x, kernel), (x, kernel)


def _few_backward(residuals, g):
    x, kernel = residuals
    columns = [g[:, k:k + 1] * kernel[:, k] for k in range(kernel.shape[1])]
    dx = functools.reduce(jnp.add, columns)
    dw = jax.lax.dot_general(x, g, (((0,), (0,)), ((), ())))
    return dx.astype(x.dtype), dw.astype(kernel.dtype)


few_outputs_product.defvjp(_few_forward, _few_backward)


def few_outputs_dot_general(x, kernel, dimension_numbers, precision=None, preferred_element_type=None):
    """flax's ``Dense(dot_general=...)`` hook for :func:`few_outputs_product` (2-d inputs, default precision)."""
    if dimension_numbers != DIMENSIONS or precision is not None or preferred_element_type is not None or x.ndim != 2:
        raise ValueError("few_outputs_dot_general takes a 2-d Dense product at the default precision")
    if kernel.shape[1] > FEW_OUTPUTS:
        return jax.lax.dot_general(x, kernel, DIMENSIONS)
    return few_outputs_product(x, kernel)


class ProbedDense(nn.Module):
    """flax's ``Dense`` (the same parameters, initialisers and operations) applied to ``relu(x)`` when
    ``relu_input``, whose kernel's gradient goes through :func:`probed_product` when the variables hold its
    probe (the trainer passes them to the loss only)."""

    features: int
    dtype: jnp.dtype = jnp.float32
    relu_input: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
        if self.is_initializing() or self.has_variable(SQUARE_SUMS, "kernel"):
            probe = self.variable(SQUARE_SUMS, "kernel", lambda: jnp.zeros((), jnp.float32)).value
            y = probed_product(x, kernel, probe, self.relu_input)
        else:
            y = _product(x, kernel, self.relu_input)
        return y + jnp.reshape(bias, (1, -1))


def square_sum_total(grads: chex.ArrayTree, square_sums: chex.ArrayTree) -> jax.Array:
    """The squared global norm of ``grads`` (``{"params": ...}``): ``square_sums`` (the probes' cotangents, one
    per kernel at the same path under ``params``) where given, each other leaf's own sum of squares."""
    known = {path: s for path, s in jax.tree_util.tree_leaves_with_path(square_sums)}
    leaves = jax.tree_util.tree_leaves_with_path(grads["params"])
    stray = set(known) - {path for path, _ in leaves}
    if stray:  # a sum without its gradient would be counted beside the gradient's own, silently
        raise ValueError(f"square sums of no gradient: {sorted(jax.tree_util.keystr(p) for p in stray)}")
    total = functools.reduce(jnp.add, list(known.values()), jnp.zeros((), jnp.float32))
    for path, g in leaves:
        if path not in known:
            total = total + jnp.sum(jnp.square(g.astype(jnp.float32)))
    return total
