"""Could a fused kernel lift the chain past 1M steps/s? One dense layer's update, XLA against Pallas.

The H200 profile of the chain (``docs/results/profile/``) shows every large op of a training step
running at the card's copy rate, and most of the step spent in passes over the runs' 256 x 256
weight matrices. Three of those passes come from the update's shape in XLA: the weight-gradient
GEMM writes ``dW``, the global-norm clip reads it, RMSProp reads it again (with the weights and the
accumulator, and writes both). A kernel that computes each ``dW`` tile from the layer's inputs
``H`` and output gradients ``D`` and applies the clipped RMSProp step to it at once never stores
``dW``: it reads and writes only weights and accumulator (4 passes instead of 7). The clip needs
the norm of ``dW`` before any tile is updated; it comes without ``dW`` from the two small Gram
matrices, ``|H^T D|_F^2 = sum((H H^T) * (D D^T))`` (``B x B`` each per run).

This script measures that on one layer of ``R`` runs, in one process, side by side:

* ``xla``: what the trainer does, ``dW = H^T D`` then ``make_optimiser``'s clip and RMSProp
  (optax), vmapped over runs;
* ``pallas``: the norm from the Gram matrices (XLA), then one Pallas kernel computing each ``dW``
  tile and the clipped RMSProp step, written in place of the weights and accumulator. Its grid
  puts the runs last, so that the tiles of one run run together and share its ``H`` and ``D`` in
  the cache (Pallas launches the first grid axis fastest).

It reports how far apart the two results are (on a GPU both multiply in TF32 by default, the
trainer's precision), their times, and the bandwidth each achieves by its byte model (7 and 4
passes of ``R x K x N`` float32, plus one and two reads of ``H`` and ``D``), beside the copy rate
measured in the same run. On a CPU the Pallas kernel runs in interpret mode (for tests
only; the times mean nothing there). Only this layer is modelled: the clip's norm here covers this
layer alone (the trainer's covers every parameter; the arithmetic is the same).

Run: ``python -m experiments.fused_update --runs 4096`` (the chain: K = N = 256, batch 64; every tile of
``--tiles`` is a variant). It also times the Gram matrices' norm alone.

Reaches inside: the trainer's optimiser and the bench's bandwidth probe, to time one optimiser step against the
memory traffic it needs.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import tyro
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from opiq_jax.agent.trainer import make_optimiser
from opiq_jax.benchmark.throughput import measure_bandwidth
from opiq_jax.common.config import StaticConfig
from opiq_jax.registry.environments import static_for_env


@dataclass
class Args:
    runs: int = 4096
    """Runs, each with its own weight matrix."""
    fan_in: int = 256
    """K: the layer's inputs (the chain's second layer: 256)."""
    fan_out: int = 256
    """N: the layer's outputs."""
    batch: int = 64
    """Minibatch rows (the paper: 64)."""
    tiles: tuple[str, ...] = ("64x64", "32x128", "32x256", "16x256", "128x64")
    """Weight tiles of the Pallas kernel to time, each ``KxN`` (rows of K by columns of N): powers of 2,
    at least 16, dividing K and N. Each is a variant ``pallas_KxN``."""
    num_warps: int | None = None
    """Triton warps per program (None: Pallas's default)."""
    calls: int = 20
    """Timed calls per variant (the median is reported)."""
    out: Path = Path("results/fused_update")
    """Folder for ``fused_update.json``."""

    def validate(self) -> None:
        for ok, message in [
            (min(self.runs, self.fan_in, self.fan_out, self.batch, self.calls) >= 1, "every size must be >= 1"),
            (len(self.tiles) >= 1 and all(_tile_ok(t, self.fan_in, self.fan_out) for t in self.tiles),
             "--tiles must be KxN pairs of powers of 2, at least 16, K dividing --fan-in and N --fan-out"),
            (self.batch >= 16 and self.batch & (self.batch - 1) == 0,
             "--batch must be a power of 2, at least 16 (the kernels' blocks and matrix product need it)"),
        ]:
            if not ok:
                raise SystemExit(message)


def _tile_ok(tile: str, fan_in: int, fan_out: int) -> bool:
    try:
        k, n = parse_tile(tile)
    except ValueError:
        return False
    return all(t >= 16 and t & (t - 1) == 0 for t in (k, n)) and fan_in % k == 0 and fan_out % n == 0


def parse_tile(tile: str) -> tuple[int, int]:
    """``"32x128"`` -> ``(32, 128)``."""
    k, n = tile.lower().split("x")
    return int(k), int(n)


def xla_update(static: StaticConfig, h, d, w, acc, lr):
    """The trainer's path for one layer of every run: ``dW`` stored, then ``make_optimiser``'s clip and RMSProp."""
    optimiser = make_optimiser(static)

    def one_run(h, d, w, acc, lr):
        clip_state, rms_state = optimiser.init({"w": w})
        state = (clip_state, rms_state._replace(nu={"w": acc}))
        updates, (_, rms_state) = optimiser.update({"w": h.T @ d}, state, {"w": w})
        return w - lr * updates["w"], rms_state.nu["w"]

    return jax.vmap(one_run)(h, d, w, acc, lr)


def xla_gram_update(static: StaticConfig, h, d, w, acc, lr):
    """XLA alone without the norm's read of ``dW``: the clip's norm from the Gram matrices, then ``dW`` and RMSProp."""
    scale = clip_scale(static, gradient_norms(h, d))
    g = scale[:, None, None] * jnp.einsum("rbk,rbn->rkn", h, d)
    acc = static.rms_decay * acc + (1.0 - static.rms_decay) * g * g
    return w - lr[:, None, None] * g / (jnp.sqrt(acc) + static.rms_eps), acc


def clip_scale(static: StaticConfig, norm: jax.Array) -> jax.Array:
    """``optax.clip_by_global_norm``'s factor for a gradient of this norm."""
    return jnp.where(norm < static.grad_clip, 1.0, static.grad_clip / norm)


def _tile_gradient(h_ref, d_ref):
    if jax.default_backend() == "gpu":
        return plgpu.dot(h_ref[...], d_ref[...], trans_a=True)
    return h_ref[...].T @ d_ref[...]


def _update_kernel(h_ref, d_ref, w_ref, acc_ref, scale_ref, lr_ref, w_out, acc_out, *, decay: float, eps: float):
    g = _tile_gradient(h_ref, d_ref) * scale_ref[0]
    acc = decay * acc_ref[...] + (1.0 - decay) * g * g
    w_out[...] = w_ref[...] - lr_ref[0] * g / (jnp.sqrt(acc) + eps)
    acc_out[...] = acc


def gradient_norms(h: jax.Array, d: jax.Array) -> jax.Array:
    """Per-run Frobenius norm of ``H^T D`` without forming it: ``sqrt(sum((H H^T) * (D D^T)))``."""
    gram_h = jnp.einsum("rbk,rck->rbc", h, h)
    gram_d = jnp.einsum("rbn,rcn->rbc", d, d)
    return jnp.sqrt(jnp.maximum(jnp.sum(gram_h * gram_d, axis=(1, 2)), 0.0))


def pallas_update(static: StaticConfig, h, d, w, acc, lr, tile_k: int = 64, tile_n: int = 64,
                  num_warps: int | None = None, num_stages: int | None = None):
    """The fused path: the clip's norm from Gram matrices, then each ``dW`` tile's clipped RMSProp step in place.

    A program updates one ``tile_k x tile_n`` tile of one run's weights; the grid puts the runs last.
    """
    runs, batch, fan_in = h.shape
    fan_out = d.shape[2]
    scale = clip_scale(static, gradient_norms(h, d))
    h_spec = pl.BlockSpec((None, batch, tile_k), lambda j, i, r: (r, 0, i))
    d_spec = pl.BlockSpec((None, batch, tile_n), lambda j, i, r: (r, 0, j))
    w_spec = pl.BlockSpec((None, tile_k, tile_n), lambda j, i, r: (r, i, j))
    per_run = pl.BlockSpec((None, 1), lambda j, i, r: (r, 0))
    on_gpu = jax.default_backend() == "gpu"
    return pl.pallas_call(
        functools.partial(_update_kernel, decay=static.rms_decay, eps=static.rms_eps),
        grid=(fan_out // tile_n, fan_in // tile_k, runs),
        in_specs=[h_spec, d_spec, w_spec, w_spec, per_run, per_run], out_specs=[w_spec, w_spec],
        out_shape=[jax.ShapeDtypeStruct(w.shape, w.dtype), jax.ShapeDtypeStruct(acc.shape, acc.dtype)],
        input_output_aliases={2: 0, 3: 1}, interpret=not on_gpu,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages) if on_gpu else None,
    )(h, d, w, acc, scale[:, None], lr[:, None])


def layer_inputs(key: jax.Array, runs: int, batch: int, fan_in: int, fan_out: int):
    """Random layer inputs, output gradients, weights, accumulator and per-run learning rates."""
    k_h, k_d, k_w, k_a = jax.random.split(key, 4)
    h = jax.nn.relu(jax.random.normal(k_h, (runs, batch, fan_in), jnp.float32))
    d = 0.01 * jax.random.normal(k_d, (runs, batch, fan_out), jnp.float32)
    w = jax.random.normal(k_w, (runs, fan_in, fan_out), jnp.float32) / np.sqrt(fan_in)
    acc = 1e-4 * jax.random.uniform(k_a, (runs, fan_in, fan_out), jnp.float32)
    lr = jnp.full((runs,), 1e-4, jnp.float32)
    return h, d, w, acc, lr


def relative_difference(x: jax.Array, reference: jax.Array) -> float:
    """Largest ``|x - reference|`` relative to the reference's largest magnitude."""
    return float(jnp.max(jnp.abs(x - reference)) / jnp.maximum(jnp.max(jnp.abs(reference)), 1e-30))


def median_seconds(step, h, d, w, acc, lr, calls: int, jit: bool = False) -> float:
    """Median wall-clock of ``calls`` synchronised calls of ``step`` (weights and accumulator donated)."""
    step = jax.jit(step) if jit else step
    w, acc = jax.block_until_ready(step(h, d, w, acc, lr))  # compile and warm up
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        w, acc = jax.block_until_ready(step(h, d, w, acc, lr))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    args.validate()
    static = static_for_env("chain")
    inputs = layer_inputs(jax.random.key(0), args.runs, args.batch, args.fan_in, args.fan_out)
    variants = {
        "xla": jax.jit(functools.partial(xla_update, static), donate_argnums=(2, 3)),
        "xla_gram": jax.jit(functools.partial(xla_gram_update, static), donate_argnums=(2, 3)),
    }
    for tile in args.tiles:
        tile_k, tile_n = parse_tile(tile)
        variants[f"pallas_{tile_k}x{tile_n}"] = jax.jit(functools.partial(
            pallas_update, static, tile_k=tile_k, tile_n=tile_n, num_warps=args.num_warps), donate_argnums=(2, 3))
    matrix_bytes = 4 * args.runs * args.fan_in * args.fan_out
    activation_bytes = 4 * args.runs * args.batch * (args.fan_in + args.fan_out)
    # passes over the weights; H and D are read once by xla, twice by the others (the Gram matrices, then the tiles)
    passes = {name: 7 if name == "xla" else 6 if name == "xla_gram" else 4 for name in variants}
    activation_reads = {name: 1 if name == "xla" else 2 for name in variants}
    model_bytes = {name: passes[name] * matrix_bytes + activation_reads[name] * activation_bytes for name in passes}
    copy_rate = measure_bandwidth(min(4 * matrix_bytes, 2**31))
    h, d = inputs[0], inputs[1]
    gram_seconds = median_seconds(lambda h, d, w, acc, lr: (gradient_norms(h, d), acc), h, d, None, None, None,
                                  calls=args.calls, jit=True)
    result = dict(device=jax.devices()[0].device_kind, runs=args.runs, fan_in=args.fan_in, fan_out=args.fan_out,
                  batch=args.batch, num_warps=args.num_warps, copy_gb_s=copy_rate / 1e9,
                  gram_norm_seconds=gram_seconds, variants={})
    reference = None  # the xla variant's result, which the first iteration computes
    for name, step in variants.items():
        try:
            w, acc = step(*[jnp.copy(x) for x in inputs])
            if name == "xla":
                reference = (w, acc)
            error = (max(relative_difference(w, reference[0]), relative_difference(acc, reference[1]))
                     if reference is not None else float("nan"))
            seconds = median_seconds(step, *[jnp.copy(x) for x in inputs], calls=args.calls)
            gb_s = model_bytes[name] / seconds / 1e9
            result["variants"][name] = dict(seconds=seconds, max_relative_difference=error, passes=passes[name],
                                            model_bytes=model_bytes[name], gb_s=gb_s)
        except Exception as exc:  # a kernel that does not lower on this device is reported, not fatal
            result["variants"][name] = dict(error=f"{type(exc).__name__}: {str(exc)[:400]}")
    print(f"one layer of {args.runs} runs, K = {args.fan_in}, N = {args.fan_out}, batch {args.batch}, "
          f"on {result['device']}; copy rate {result['copy_gb_s']:.0f} GB/s; the clip's norm from the Gram matrices "
          f"alone: {1e3 * gram_seconds:.3f} ms")
    print("| variant | ms per update | weight passes | GB/s by the byte model | max relative difference from xla |")
    print("|---|---|---|---|---|")
    for name, v in result["variants"].items():
        if "error" in v:
            print(f"| {name} | failed: {v['error'][:120]} | | | |")
        else:
            print(f"| {name} | {1e3 * v['seconds']:.3f} | {v['passes']} | {v['gb_s']:.0f} | {v['max_relative_difference']:.2e} |")
    if "seconds" in result["variants"]["xla"]:
        result["speedup"] = {name: result["variants"]["xla"]["seconds"] / v["seconds"]
                             for name, v in result["variants"].items() if "seconds" in v and name != "xla"}
        print("against the xla path: " + ", ".join(f"{name} {x:.2f}x" for name, x in result["speedup"].items()))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fused_update.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
