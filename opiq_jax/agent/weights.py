"""How a run keeps its Q-network's weights, one strategy per storage, chosen once when the agent is built.

* :class:`Float32Weights`: float32 weights, read by the forward passes and stepped by clipped RMSProp;
* :class:`ComputeCopyWeights` (``precision="bfloat16"``): float32 master weights, and the bfloat16 copy that the
  forward passes read, written after every step;
* :class:`PackedWeights` (``weight_storage="packed"``): the bfloat16 copy is the weights' high bytes, a ``uint8``
  array their low bytes (:mod:`opiq_jax.pieces.packed_state`), and RMSProp's accumulator is bfloat16: an update reads
  and writes 3 bytes a weight instead of 4 + 4 + 2.

Each strategy owns the weights' initialisation, what the forward passes read, the float32 master weights, the
optimiser's step and the bytes an update moves (the bench's work model asks it). A run's state keeps the three
fields ``params``, ``compute_params`` and ``params_low``; a strategy fills those it uses and leaves the others
None, so the state's layout (and the checkpoints') is the same for every storage.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax

from ..common.config import StaticConfig
from ..pieces import packed_state
from ..pieces.networks import in_compute_precision
from ..pieces.state import RunState


def sgd_step(optimiser: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any, lr: jax.Array):
    """One clipped RMSProp step of float32 ``params`` with the run's learning rate."""
    grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)  # bfloat16 under mixed precision
    updates, opt_state = optimiser.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: p - lr * u, params, updates), opt_state


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
    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        """``run`` after one clipped RMSProp step on ``grads`` (``key``: stochastic rounding where the storage
        rounds; ``square_sums``: the lean backward pass's sums of squares of some gradients, or None)."""


class Float32Weights(WeightStorage):
    name = "float32"

    def copy(self, params: Any) -> Any:
        """What the forward passes read besides the float32 weights: nothing here (a compute copy below)."""
        del params
        return None

    def initial(self, run: RunState, params: Any, key: jax.Array) -> RunState:
        del key
        return run.replace(params=params, compute_params=self.copy(params), opt_state=self.optimiser.init(params))

    def forward(self, run: RunState) -> Any:
        return run.params

    def master(self, run: RunState) -> Any:
        return run.params

    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        del key, square_sums
        params, opt_state = sgd_step(self.optimiser, run.params, run.opt_state, grads, run.hparams["lr"])
        return run.replace(params=params, opt_state=opt_state, compute_params=self.copy(params))


class ComputeCopyWeights(Float32Weights):
    """Float32 master weights, stepped as :class:`Float32Weights` steps them, and their copy in the compute
    precision, which the forward passes read."""

    name = "compute copy"

    def copy(self, params: Any) -> Any:
        return in_compute_precision(params, self.compute_dtype)

    def forward(self, run: RunState) -> Any:
        return run.compute_params


class PackedWeights(WeightStorage):
    name = "packed"
    takes_square_sums = True

    def initial(self, run: RunState, params: Any, key: jax.Array) -> RunState:
        compute, lows = packed_state.pack_tree(params, jax.random.bits(key, (), jnp.uint32))
        return run.replace(params=None, compute_params=compute, params_low=lows,
                           opt_state=packed_state.init_accumulator(params))

    def forward(self, run: RunState) -> Any:
        return run.compute_params

    def master(self, run: RunState) -> Any:
        return packed_state.unpack_tree(run.compute_params, run.params_low)

    def step(self, run: RunState, grads: Any, key: jax.Array, square_sums: Any = None) -> RunState:
        compute, lows, accumulator = packed_state.rmsprop_step(
            self.static, run.compute_params, run.params_low, run.opt_state, grads, run.hparams["lr"],
            jax.random.bits(key, (), jnp.uint32), square_sums)
        return run.replace(compute_params=compute, params_low=lows, opt_state=accumulator)


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


__all__ = ["ComputeCopyWeights", "Float32Weights", "PackedWeights", "WeightStorage", "master_params", "sgd_step",
           "weight_storage"]
