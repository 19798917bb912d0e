"""The Q-network's backward pass, one strategy each, chosen once when the agent is built.

* :class:`XlaBackward`: XLA's backward pass of the loss, its gradients and nothing else;
* :class:`LeanBackward` (``mlp_backward``: ``pallas``, or ``auto`` on a GPU under packed storage): the probed
  layers' weight gradients come from :mod:`opiq_jax.kernels.mlp_backward`'s Pallas kernel with their sums of squares,
  which the packed storage's clip reads instead of the gradients.

Each owns how the loss is differentiated and the gradient bytes it spares the bench's work model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from ..kernels.mlp_backward import SQUARE_SUMS


class XlaBackward:
    """XLA's backward pass of the loss: its gradients, nothing else."""

    name = "xla"
    bench_note = ""  # the bench names only the backward pass that is not XLA's

    def value_and_grad(self, loss: Callable, params: chex.ArrayTree, *args: Any):
        """``(loss, gradients, None)`` of ``loss(params, *args)``."""
        return *jax.value_and_grad(loss)(params, *args), None


class LeanBackward:
    """This module's backward pass: the probed layers' weight gradients come with their square sums, as the
    cotangents of zero probes (``probes``, a flax collection :data:`SQUARE_SUMS`), so the clip's norm never reads
    those gradients again."""

    name = "pallas"
    bench_note = ", backward: the Pallas weight-gradient kernels (mlp_backward)"

    def __init__(self, probes: chex.ArrayTree, compute_dtype: jnp.dtype):
        self.probes, self.compute_dtype = probes, jnp.dtype(compute_dtype)

    def value_and_grad(self, loss: Callable, params: chex.ArrayTree, *args: Any):
        """``(loss, gradients, square sums)`` of ``loss(params, *args)``."""
        probed = {**params, SQUARE_SUMS: self.probes}
        value, grads = jax.value_and_grad(loss)(probed, *args)
        return value, {k: v for k, v in grads.items() if k != SQUARE_SUMS}, grads[SQUARE_SUMS]


__all__ = ["LeanBackward", "XlaBackward"]
