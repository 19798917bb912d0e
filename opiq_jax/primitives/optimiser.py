"""The optimiser every network of a program learns with: the authors' clipped, PyTorch-style RMSProp.

One place for it, so the Q-network, the parts' networks and a learned count step alike. The learning rate is applied
after the optimiser's scaling, so it may be a traced number (one per run, vmapped).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from ..common.config import StaticConfig


def make_optimiser(static: StaticConfig) -> optax.GradientTransformation:
    """Global-norm clip then PyTorch-style RMSProp scaling; the per-run learning rate is applied after."""
    return optax.chain(
        optax.clip_by_global_norm(static.grad_clip),
        optax.scale_by_rms(decay=static.rms_decay, eps=static.rms_eps, eps_in_sqrt=False),
    )


def sgd_step(optimiser: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any, lr: jax.Array):
    """One clipped RMSProp step of float32 ``params`` with the run's learning rate."""
    grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)  # bfloat16 under mixed precision
    updates, opt_state = optimiser.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: p - lr * u, params, updates), opt_state


__all__ = ["make_optimiser", "sgd_step"]
