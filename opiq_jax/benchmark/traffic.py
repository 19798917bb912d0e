"""The bench's byte model of the agent's strategies: what an update moves through memory under each weight storage,
target values and backward pass. The strategies (:mod:`opiq_jax.agent`) compute; this module counts their bytes,
by their names, so that the agent carries no benchmark accounting. A strategy of a new name must be counted here
(a one-line ``ValueError`` says so)."""

from __future__ import annotations

from typing import Any

import chex
import jax

from ..common.config import StaticConfig
from ..kernels.mlp_backward import kernel_fits


def not_counted(kind: str, name: str) -> ValueError:
    return ValueError(f"the bench has no byte model of the {kind} {name!r}: add it to opiq_jax/benchmark/traffic.py")


def weight_update_bytes(weights: Any, param_bytes: float, runs: Any) -> float:
    """Bytes an update reads and writes of the stored weights (``weights``: the agent's storage; ``runs``: one run's
    state, as shapes)."""
    if weights.name == "packed":
        # the copy and the low bytes read and written; the copy needs no write of its own
        stored = jax.tree.leaves(weights.stored_weights(runs))
        return 2 * float(sum(x.size * x.dtype.itemsize for x in stored))
    if weights.name not in ("float32", "compute copy"):
        raise not_counted("weight storage", weights.name)
    read_and_written = 2 * param_bytes  # the float32 weights
    if weights.name == "compute copy":  # then their copy written in the compute precision
        return read_and_written + param_bytes * weights.compute_dtype.itemsize / 4
    return read_and_written


def target_work(targets: Any, static: StaticConfig, compute_bytes: float, obs_bytes: float,
                runs: Any) -> tuple[float, float, float]:
    """Per environment step of one run: the target's bytes, the bytes of the observations it rebuilds, and its
    forward passes (on one observation each); ``runs``: one run's state, as shapes."""
    per_update, per_copy, batch = 1.0 / static.train_every, 1.0 / static.target_update, static.batch_size
    if targets.name == "network":
        # read once for the bootstrap forward; copied (read + write) every target_update steps
        return (compute_bytes * per_update + 2 * compute_bytes * per_copy, 2 * batch * obs_bytes * per_update,
                batch * per_update)
    if targets.name != "table":
        raise not_counted("target values", targets.name)
    table = runs.target_table
    table_bytes, cells = float(table.size * table.dtype.itemsize), table.shape[1]
    # per copy: the network read (and copied) and the table written; per update: batch x actions values read
    target = (3 * compute_bytes + table_bytes) * per_copy + batch * table.shape[-1] * 4.0 * per_update
    return target, 2 * cells * obs_bytes * per_copy, cells * per_copy


def unread_gradient_bytes(backward: Any, params: chex.ArrayTree, batch: int) -> float:
    """Bytes of gradients the clip's norm does not read again: none under XLA's backward pass; under the lean one,
    the probed layers' weight gradients that the kernel writes with their square sums (those :func:`kernel_fits`
    takes)."""
    if backward.name == "xla":
        return 0.0
    if backward.name != "pallas":
        raise not_counted("backward pass", backward.name)
    kernels = [params["params"][layer]["kernel"] for layer in backward.probes]
    fitting = [k for k in kernels if kernel_fits(batch, *k.shape, backward.compute_dtype)]
    return float(sum(k.size for k in fitting) * backward.compute_dtype.itemsize)


__all__ = ["target_work", "unread_gradient_bytes", "weight_update_bytes"]
