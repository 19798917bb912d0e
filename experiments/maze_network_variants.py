"""The maze network's forward and backward pass for R runs, written nine ways, timed side by side.

The maze's step is limited by its network passes, not by parameter traffic (``docs/results/profile/``):
building the second convolution's patch matrix and the first convolution's bias gradient are its
heaviest single ops. This script asks whether another formulation of the convolutions helps, on
the network alone (batch 64 per run, the squared error of the first output as the loss, ``vmap``
over runs as in the trainer), in float32 and bfloat16:

* ``patches``: the trainer's ``MazeConv`` (``PatchConv``: patch matrix, one GEMM, bias added);
* ``bias_folded``: a column of ones appended to each patch matrix and the bias as the kernel's extra
  row, so the bias gradient comes out of the weight-gradient GEMM instead of a reduction;
* ``shifted_conv1``: the one-channel first convolution as nine multiply-adds of strided views;
* ``lax_conv``: ``lax.conv_general_dilated`` (under ``vmap`` over runs: a grouped convolution);
* ``space_to_depth``: each input zero-padded at the bottom and right to even sizes and cut into 2x2
  pixel blocks (``4 C`` channels), the 3x3 kernel zero-padded to 4x4 and read as a 2x2 kernel over
  blocks, so each stride-2 3x3 convolution is a stride-1 2x2 one: a patch matrix of four contiguous
  block vectors and one GEMM, bias added;
* ``space_to_depth_shift``: the same blocks and block kernel, but one GEMM of the blocks with all four
  kernel positions side by side (``[4 C, 4 F]``), then the sum of the four shifted output slices;
* ``direct_patches``: the second convolution's patch matrix computed straight from the input: the
  first convolution is evaluated at every (output position, tap) of the second, on the 3x3 input
  patches of those positions (``[B, 5, 5, 9 taps, 9 pixels]``: the patches of the first convolution's
  patch matrix), so its GEMM writes the second's patch matrix in place (``[B, 5, 5, 9 x 16]``). The
  first layer does 225 instead of 121 positions of 9-by-16 work, but the 16-channel map is never
  written out and re-gathered, and its gradient needs no scatter back onto the 11x11 map;
* ``direct_patches_bias_folded``: the same, with the first convolution's bias folded into its GEMM as
  in ``bias_folded``;
* ``pallas_torso``: the trainer's ``MazeConv`` with ``pallas_torso=True``, both convolutions as the
  Pallas kernels of ``opiq_jax.kernels.maze_torso`` (the same evaluation order as ``direct_patches``, with
  nothing between the observation and the second convolution's output stored in memory).

Every variant reads the same ``MazeConv`` parameters and computes the same function (checked against
``MazeConv`` before timing). Run: ``python -m experiments.maze_network_variants --runs 512``.

Reaches inside: opiq_jax.pieces.networks, to time the maze network's own layers one by one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import tyro

from opiq_jax.pieces.networks import MazeConv, extract_patches


@dataclass
class Args:
    runs: int = 512
    """Runs, each with its own network."""
    batch: int = 64
    """Minibatch rows per run (the paper: 64)."""
    calls: int = 20
    """Calls per timed interval; the best of 5 intervals counts."""
    variants: tuple[str, ...] = ()
    """Variants to time besides ``patches`` (default: all)."""
    out: Path = Path("results/maze_network_variants")
    """Folder for ``maze_network_variants.json``."""

    def validate(self) -> None:
        if min(self.runs, self.batch, self.calls) < 1:
            raise SystemExit("maze_network_variants: error: --runs, --batch and --calls must be >= 1")
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise SystemExit(f"maze_network_variants: error: unknown --variants {unknown}; choose from {list(VARIANTS)}")


def _dense(x, layer, dtype):
    return x @ layer["kernel"].astype(dtype) + layer["bias"].astype(dtype)


def _patch_conv(x, layer, dtype, fold_bias: bool):
    kh, kw = layer["kernel"].shape[:2]
    return _patch_gemm(extract_patches(x, (kh, kw), (2, 2)).astype(dtype), layer, dtype, fold_bias)


def _shifted_conv1(x, layer, dtype):
    kernel = layer["kernel"].astype(dtype)  # [3, 3, 1, F]
    out_h, out_w = (x.shape[1] - 3) // 2 + 1, (x.shape[2] - 3) // 2 + 1
    out = layer["bias"].astype(dtype)
    for i in range(3):
        for j in range(3):
            out = out + x[:, i : i + 2 * (out_h - 1) + 1 : 2, j : j + 2 * (out_w - 1) + 1 : 2, :] * kernel[i, j, 0]
    return out


def _lax_conv(x, layer, dtype):
    y = jax.lax.conv_general_dilated(x, layer["kernel"].astype(dtype), (2, 2), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + layer["bias"].astype(dtype)


def _blocks(x, dtype):
    """``[B, ceil(H / 2), ceil(W / 2), 4 C]``: ``x`` (``[B, H, W, C]``) zero-padded at the bottom and right to
    even height and width, cut into 2x2 pixel blocks, order ``(di, dj, c)`` within a block."""
    batch, height, width, channels = x.shape
    x = jnp.pad(x, ((0, 0), (0, height % 2), (0, width % 2), (0, 0)))
    x = x.reshape(batch, (height + 1) // 2, 2, (width + 1) // 2, 2, channels).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(batch, (height + 1) // 2, (width + 1) // 2, 4 * channels).astype(dtype)


def _block_kernel(kernel, dtype):
    """``[2, 2, 4 C, F]``: the stride-2 3x3 ``kernel`` (``[3, 3, C, F]``) as a stride-1 2x2 kernel over the
    blocks of :func:`_blocks`: tap ``(2 a + di, 2 b + dj)`` of the kernel zero-padded to 4x4 at block offset
    ``(a, b)``. Row and column 3 are zeros, and they alone meet the pixel past each patch, the only place
    the padding of :func:`_blocks` can fall; the gradient reaches only the 3x3 taps."""
    _, _, channels, features = kernel.shape
    kernel = jnp.pad(kernel, ((0, 1), (0, 1), (0, 0), (0, 0))).reshape(2, 2, 2, 2, channels, features)
    return kernel.transpose(0, 2, 1, 3, 4, 5).reshape(2, 2, 4 * channels, features).astype(dtype)


def _space_to_depth_conv(x, layer, dtype):
    blocks = _blocks(x, dtype)
    kernel = _block_kernel(layer["kernel"], dtype)
    patches = extract_patches(blocks, (2, 2), (1, 1))
    return patches @ kernel.reshape(-1, kernel.shape[-1]) + layer["bias"].astype(dtype)


def _space_to_depth_shift_conv(x, layer, dtype):
    blocks = _blocks(x, dtype)
    batch, block_h, block_w, width = blocks.shape
    kernel = _block_kernel(layer["kernel"], dtype)
    features = kernel.shape[-1]
    y = blocks.reshape(batch, block_h * block_w, width) @ kernel.transpose(2, 0, 1, 3).reshape(width, 4 * features)
    y = y.reshape(batch, block_h, block_w, 4 * features)
    out_h, out_w = block_h - 1, block_w - 1
    out = layer["bias"].astype(dtype)
    for a in range(2):
        for b in range(2):
            out = out + y[:, a : a + out_h, b : b + out_w, (2 * a + b) * features : (2 * a + b + 1) * features]
    return out


def _direct_patches_torso(x, p, dtype, fold_bias: bool):
    """Both convolutions (with their ReLUs), the second's patch matrix built by the first's GEMM."""
    layer1, layer2 = p["PatchConv_0"], p["PatchConv_1"]
    kh, kw, _, features = layer1["kernel"].shape
    pixel_patches = extract_patches(x, (kh, kw), (2, 2))  # [B, 11, 11, 9]
    tap_patches = extract_patches(pixel_patches, layer2["kernel"].shape[:2], (2, 2))  # [B, 5, 5, 9 * 9], (tap, pixel)
    batch, out_h, out_w, _ = tap_patches.shape
    taps = layer2["kernel"].shape[0] * layer2["kernel"].shape[1]
    per_tap = tap_patches.reshape(batch, out_h, out_w, taps, kh * kw).astype(dtype)
    hidden = jax.nn.relu(_patch_gemm(per_tap, layer1, dtype, fold_bias))  # [B, 5, 5, 9, 16]
    return jax.nn.relu(_patch_gemm(hidden.reshape(batch, out_h, out_w, taps * features), layer2, dtype, False))


def _patch_gemm(patches, layer, dtype, fold_bias: bool):
    """``patches @ kernel + bias`` for a patch matrix in the kernel's ``(i, j, c)`` order."""
    features = layer["kernel"].shape[-1]
    if not fold_bias:
        return patches @ layer["kernel"].reshape(-1, features).astype(dtype) + layer["bias"].astype(dtype)
    ones = jnp.ones(patches.shape[:-1] + (1,), dtype)
    weights = jnp.concatenate([layer["kernel"].reshape(-1, features), layer["bias"][None]], axis=0).astype(dtype)
    return jnp.concatenate([patches, ones], axis=-1) @ weights


def variant(name: str, dtype) -> Callable:
    """``apply(params, obs) -> Q`` of the maze network for one run, convolutions written as ``name``."""
    if name in ("patches", "pallas_torso"):  # the trainer's network, in either of its forms
        return MazeConv(num_outputs=4, dtype=dtype, pallas_torso=name == "pallas_torso").apply
    if name.startswith("direct_patches"):
        return _apply_with_torso(lambda x, p: _direct_patches_torso(x, p, dtype, name.endswith("bias_folded")), dtype)
    space_to_depth = {"space_to_depth": lambda x, l: _space_to_depth_conv(x, l, dtype),
                      "space_to_depth_shift": lambda x, l: _space_to_depth_shift_conv(x, l, dtype)}
    conv1 = {"bias_folded": lambda x, l: _patch_conv(x, l, dtype, True), "shifted_conv1": lambda x, l: _shifted_conv1(x, l, dtype),
             "lax_conv": lambda x, l: _lax_conv(x, l, dtype), **space_to_depth}[name]
    conv2 = {"bias_folded": lambda x, l: _patch_conv(x, l, dtype, True),
             "shifted_conv1": lambda x, l: _patch_conv(x, l, dtype, False), "lax_conv": lambda x, l: _lax_conv(x, l, dtype),
             **space_to_depth}[name]

    return _apply_with_torso(lambda x, p: jax.nn.relu(conv2(jax.nn.relu(conv1(x, p["PatchConv_0"])), p["PatchConv_1"])), dtype)


def _apply_with_torso(torso: Callable, dtype) -> Callable:
    """The maze network with its two convolutions (ReLUs included) computed by ``torso(x, params)``."""

    def apply(params, obs):
        p = params["params"]
        x = torso(obs.astype(dtype), p)
        x = x.reshape(x.shape[0], -1)
        x = _dense(jax.nn.relu(_dense(x, p["Dense_0"], dtype)), p["Dense_1"], dtype)
        return _dense(x.astype(jnp.float32), p["head"], jnp.float32)

    return apply


VARIANTS = ("patches", "bias_folded", "shifted_conv1", "lax_conv", "space_to_depth", "space_to_depth_shift",
            "direct_patches", "direct_patches_bias_folded", "pallas_torso")


def inputs(key: jax.Array, runs: int, batch: int):
    """Per-run ``MazeConv`` parameters, binary observations and regression targets."""
    k_init, k_obs, k_tgt = jax.random.split(key, 3)
    example = jnp.zeros((1, 24, 24, 1))
    params = jax.vmap(lambda k: MazeConv(num_outputs=4).init(k, example))(jax.random.split(k_init, runs))
    obs = (jax.random.uniform(k_obs, (runs, batch, 24, 24, 1)) < 0.3).astype(jnp.float32)
    return params, obs, jax.random.normal(k_tgt, (runs, batch))


def loss_and_grad(apply: Callable) -> Callable:
    def loss(params, obs, target):
        return jnp.mean((apply(params, obs)[:, 0] - target) ** 2)

    return jax.jit(jax.vmap(jax.value_and_grad(loss)))


def best_seconds(fn, args, calls: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    args.validate()
    params, obs, target = inputs(jax.random.key(0), args.runs, args.batch)
    result = dict(device=jax.devices()[0].device_kind, runs=args.runs, batch=args.batch, rows=[])
    for dtype in (jnp.float32, jnp.bfloat16):
        for name in dict.fromkeys(("patches", *(args.variants or VARIANTS))):  # patches first: the reference
            apply = variant(name, dtype)
            forward = jax.jit(jax.vmap(apply))
            q = forward(params, obs)
            if name == "patches":
                reference = q
            difference = float(jnp.max(jnp.abs(q - reference)) / jnp.max(jnp.abs(reference)))
            row = dict(variant=name, dtype=jnp.dtype(dtype).name, max_relative_difference=difference,
                       forward_ms=1e3 * best_seconds(forward, (params, obs), args.calls),
                       forward_backward_ms=1e3 * best_seconds(loss_and_grad(apply), (params, obs, target), args.calls))
            result["rows"].append(row)
    print(f"the maze network, {args.runs} runs x batch {args.batch}, on {result['device']}")
    print("| precision | variant | forward ms | forward + backward ms | max relative difference from patches |")
    print("|---|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['dtype']} | {r['variant']} | {r['forward_ms']:.3f} | {r['forward_backward_ms']:.3f} | "
              f"{r['max_relative_difference']:.1e} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "maze_network_variants.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
