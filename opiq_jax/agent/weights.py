"""How a run keeps its Q-network's weights, one strategy per storage, chosen once when the agent is built.

* :class:`Float32Weights`: float32 weights, read by the forward passes and stepped by clipped RMSProp;
* :class:`ComputeCopyWeights` (``precision="bfloat16"``): float32 master weights, and the bfloat16 copy that the
  forward passes read, written after every step;
* :class:`PackedWeights` (``weight_storage="packed"``): the bfloat16 copy is the weights' high bytes, a ``uint8``
  array their low bytes (:mod:`opiq_jax.primitives.packed_state`), and RMSProp's accumulator is bfloat16: an update
  reads and writes 3 bytes a weight instead of 4 + 4 + 2.

Each strategy owns the weights' initialisation, what the forward passes read, the float32 master weights, the
optimiser's step, and the subtree it keeps in a run's state (``RunState.weights``): :class:`Float32Stored`,
:class:`ComputeCopyStored` or :class:`PackedStored`, each holding only what its storage uses. Nothing outside this
module reads a subtree's fields: callers ask the strategy (``forward``, ``master``, ``optimiser_state``,
``stored_weights``). The state's layout, and so a checkpoint's, is therefore the storage's own.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from ..common.config import StaticConfig
from ..primitives import packed_state
from ..primitives.networks import in_compute_precision
from ..primitives.optimiser import sgd_step
from ..primitives.state import RunState


@struct.dataclass
class Float32Stored:
    """What :class:`Float32Weights` keeps of a run."""

    params: Any  # float32 weights, which the forward passes read
    opt_state: Any  # optax's state of clipped RMSProp


@struct.dataclass
class ComputeCopyStored:
    """What :class:`ComputeCopyWeights` keeps of a run."""

    params: Any  # float32 master weights, which the optimiser steps
    opt_state: Any  # optax's state of clipped RMSProp
    compute: Any  # the weights as the forward passes read them: hidden layers in the compute precision


@struct.dataclass
class PackedStored:
    """What :class:`PackedWeights` keeps of a run (:mod:`opiq_jax.primitives.packed_state`)."""

    compute: Any  # the bfloat16 copy the forward passes read, which is the weights' high bytes
    low: Any  # uint8: the weights' low bytes (empty arrays for the leaves that compute in float32)
    accumulator: Any  # RMSProp's accumulator in bfloat16


class WeightStorage(abc.ABC):
    """How the Q-network's weights are stored and stepped (module docstring)."""

    name: ClassVar[str]
    takes_square_sums: ClassVar[bool] = False
    """Whether its step takes the lean backward pass's square sums of the gradients
    (:mod:`opiq_jax.kernels.mlp_backward`)."""

    def __init__(self, static: StaticConfig, optimiser: optax.GradientTransformation | None = None):
        self.static, self.optimiser = static, optimiser
        self.compute_dtype = jnp.dtype(static.execution.precision)

    @abc.abstractmethod
    def initial(self, run: RunState, params: Any, key: jax.Array) -> RunState:
        """``run`` holding the float32 weights ``params`` as this storage keeps them, with a fresh optimiser."""

    @abc.abstractmethod
    def forward(self, run: RunState) -> Any:
        """The weights the forward passes read (acting, the loss, the target network's copy)."""

    @abc.abstractmethod
    def master(self, run: RunState) -> Any:
        """The weights in float32 (any number of leading runs axes)."""

    @abc.abstractmethod
    def optimiser_state(self, run: RunState) -> Any:
        """What the optimiser keeps between steps (for the bench's byte count)."""

    @abc.abstractmethod
    def stored_weights(self, run: RunState) -> Any:
        """The weights as this storage keeps them, without the optimiser's state (for the bench's byte count)."""

    @abc.abstractmethod
    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        """``run`` after one clipped RMSProp step on ``grads`` (``key``: stochastic rounding where the storage
        rounds; ``square_sums``: the lean backward pass's sums of squares of some gradients, or None)."""


def check_gradients(grads: Any, forward: Any) -> None:
    """The gradients are taken in the weights the forward passes read: one leaf per weight, of its shape."""
    chex.assert_trees_all_equal_shapes(grads, forward)


class Float32Weights(WeightStorage):
    name = "float32"

    def stored(self, params: Any, opt_state: Any) -> Float32Stored | ComputeCopyStored:
        """The run's subtree for the float32 weights ``params`` and the optimiser's ``opt_state``."""
        return Float32Stored(params=params, opt_state=opt_state)

    def initial(self, run: RunState, params: Any, key: jax.Array) -> RunState:
        del key
        return run.replace(weights=self.stored(params, self.optimiser.init(params)))

    def forward(self, run: RunState) -> Any:
        return run.weights.params

    def master(self, run: RunState) -> Any:
        return run.weights.params

    def optimiser_state(self, run: RunState) -> Any:
        return run.weights.opt_state

    def stored_weights(self, run: RunState) -> Any:
        return run.weights.params

    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        del key, square_sums
        check_gradients(grads, self.forward(run))
        params, opt_state = sgd_step(self.optimiser, run.weights.params, run.weights.opt_state, grads,
                                     run.hparams["lr"])
        return run.replace(weights=self.stored(params, opt_state))


class ComputeCopyWeights(Float32Weights):
    """Float32 master weights, stepped as :class:`Float32Weights` steps them, and their copy in the compute
    precision, which the forward passes read."""

    name = "compute copy"

    def stored(self, params: Any, opt_state: Any) -> ComputeCopyStored:
        # the copy is written with every step, so the forward passes never cast the master weights themselves
        return ComputeCopyStored(params=params, opt_state=opt_state,
                                 compute=in_compute_precision(params, self.compute_dtype))

    def forward(self, run: RunState) -> Any:
        return run.weights.compute

    def stored_weights(self, run: RunState) -> Any:
        return run.weights.params, run.weights.compute


class PackedWeights(WeightStorage):
    name = "packed"
    takes_square_sums = True

    def initial(self, run: RunState, params: Any, key: jax.Array) -> RunState:
        compute, low = packed_state.pack_tree(params, jax.random.bits(key, (), jnp.uint32))
        return run.replace(weights=PackedStored(compute=compute, low=low,
                                                accumulator=packed_state.init_accumulator(params)))

    def forward(self, run: RunState) -> Any:
        return run.weights.compute

    def master(self, run: RunState) -> Any:
        return packed_state.unpack_tree(run.weights.compute, run.weights.low)

    def optimiser_state(self, run: RunState) -> Any:
        return run.weights.accumulator

    def stored_weights(self, run: RunState) -> Any:
        return run.weights.compute, run.weights.low

    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        check_gradients(grads, self.forward(run))
        stored = run.weights
        compute, low, accumulator = packed_state.rmsprop_step(
            self.static, stored.compute, stored.low, stored.accumulator, grads, run.hparams["lr"],
            jax.random.bits(key, (), jnp.uint32), square_sums)
        return run.replace(weights=PackedStored(compute=compute, low=low, accumulator=accumulator))


def weight_storage(static: StaticConfig, optimiser: optax.GradientTransformation | None = None) -> WeightStorage:
    """The storage ``static`` asks for (``weight_storage``, ``precision``), built once with the agent."""
    if static.execution.weight_storage == "packed":
        return PackedWeights(static, optimiser)
    if jnp.dtype(static.execution.precision) != jnp.float32:
        return ComputeCopyWeights(static, optimiser)
    return Float32Weights(static, optimiser)


def master_params(static: StaticConfig, runs: RunState) -> Any:
    """The float32 weights of ``runs`` (any number of leading runs axes), as ``static``'s storage keeps them."""
    return weight_storage(static).master(runs)


__all__ = ["ComputeCopyStored", "ComputeCopyWeights", "Float32Stored", "Float32Weights", "PackedStored",
           "PackedWeights", "WeightStorage", "master_params", "sgd_step", "weight_storage"]
