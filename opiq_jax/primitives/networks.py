"""Q-networks of the paper (flax.linen), and parameter initialisation with an optional final bias.

* ``MLP``: the chain network, hidden layers of 256 and 256 with ReLU.
* ``MazeConv``: two 3x3 stride-2 convolutions of 16 channels without padding (24 -> 11 -> 5),
  FC 400 with ReLU, FC 200 *without* ReLU (as the paper's appendix lists it), then the outputs.
* ``NatureDQN``: the Atari torso of Mnih et al. (2015) with a 512 unit layer.
* ``BootstrappedQ``: BSP's network, one of the above split into a shared torso and ``K`` heads
  (output ``[B, K, A]``).

Every network names its output layer ``head`` so that the optimistic-initialisation baseline
(DQN Bias) can set exactly that layer's bias.

``dtype`` is the precision of the hidden layers' computation and activations. With ``bfloat16``
the trainer passes bfloat16 copies of the hidden layers' weights (mixed precision,
``Execution.precision``); the output layer keeps float32 weights and computes in float32, so
Q-values and the TD loss keep float32 precision.
Parameters are always created in float32.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from opiq_jax.kernels.maze_torso import maze_torso
from opiq_jax.kernels.mlp_backward import ProbedDense, few_outputs_dot_general

HEAD = "head"


def output_layer(num_outputs: int, lean_backward: bool = False) -> nn.Dense:
    """The network's last layer, ``head``: float32 whatever the hidden layers' precision (``lean_backward``: its
    input gradient as outer products, :mod:`opiq_jax.kernels.mlp_backward`)."""
    if lean_backward:
        return nn.Dense(num_outputs, name=HEAD, dtype=jnp.float32, dot_general=few_outputs_dot_general)
    return nn.Dense(num_outputs, name=HEAD, dtype=jnp.float32)


def in_compute_precision(params: chex.ArrayTree, dtype: jnp.dtype) -> chex.ArrayTree:
    """The weights as a network computing in ``dtype`` reads them: the hidden layers' cast to ``dtype``,
    every output layer ``head`` (BSP: each head's) left float32, as it computes (:func:`output_layer`)."""
    def cast(path, p):
        is_output = any(getattr(k, "key", None) == HEAD for k in path)
        return p if is_output else p.astype(dtype)

    return jax.tree_util.tree_map_with_path(cast, params)


class MLP(nn.Module):
    """A ReLU multilayer perceptron over the flattened observation."""

    num_outputs: int
    hidden: Sequence[int] = (256, 256)
    dtype: jnp.dtype = jnp.float32
    lean_backward: bool = False  # the backward pass of opiq_jax.kernels.mlp_backward (the same parameters and forward)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = jnp.reshape(obs, (obs.shape[0], -1)).astype(self.dtype)
        if self.lean_backward:  # each layer applies the ReLU before it, so its kernel sees the pre-activation
            for i, width in enumerate(self.hidden):
                x = ProbedDense(width, dtype=self.dtype, relu_input=i > 0, name=f"Dense_{i}")(x)
            return output_layer(self.num_outputs, lean_backward=True)(nn.relu(x) if self.hidden else x)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, dtype=self.dtype)(x))
        return output_layer(self.num_outputs)(x)


def extract_patches(x: jax.Array, kernel_size: tuple[int, int], strides: tuple[int, int]) -> jax.Array:
    """``[B, out_h, out_w, kh * kw * C]``: the VALID, strided patches of ``x`` (``[B, H, W, C]``), in the
    order ``(i, j, c)`` of a ``[kh, kw, C, F]`` kernel reshaped to ``[kh * kw * C, F]``.

    Where the kernel is a whole number of strides (the Nature network's 8x8/4 and 4x4/2), the patches are
    gathered as ``(kh / sh) x (kw / sw)`` blocks of a space-to-depth view: the same values in the same order,
    with a few slices instead of ``kh * kw`` (which XLA compiles many times faster on a CPU).
    """
    kh, kw = kernel_size
    sh, sw = strides
    batch, height, width, channels = x.shape
    out_h, out_w = (height - kh) // sh + 1, (width - kw) // sw + 1
    if kh % sh == 0 and kw % sw == 0:
        qh, qw = kh // sh, kw // sw
        blocks = x[:, : (out_h + qh - 1) * sh, : (out_w + qw - 1) * sw].reshape(
            batch, out_h + qh - 1, sh, out_w + qw - 1, sw, channels)
        stacked = jnp.stack([blocks[:, bi : bi + out_h, :, bj : bj + out_w] for bi in range(qh) for bj in range(qw)])
        stacked = stacked.reshape(qh, qw, batch, out_h, sh, out_w, sw, channels)
        # (bi, di) and (bj, dj) make the kernel's row i = bi * sh + di and column j = bj * sw + dj
        return stacked.transpose(2, 3, 5, 0, 4, 1, 6, 7).reshape(batch, out_h, out_w, kh * kw * channels)
    patches = jnp.stack(
        [x[:, i : i + sh * (out_h - 1) + 1 : sh, j : j + sw * (out_w - 1) + 1 : sw, :]
         for i in range(kh) for j in range(kw)],
        axis=3,
    )
    return patches.reshape(batch, out_h, out_w, kh * kw * channels)


class PatchConv(nn.Module):
    """A VALID, strided 2-D convolution written as patch extraction plus one matrix product.

    Same parameters (``kernel [kh, kw, in, out]``, ``bias``) and outputs as ``nn.Conv``. Under
    ``vmap`` over runs (one set of weights per run) ``nn.Conv`` becomes a grouped convolution,
    which is slow on GPUs; this form becomes a batched matrix product instead.
    """

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int]
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel_size
        channels = x.shape[-1]
        kernel, bias = conv_params(self, channels, self.features, self.kernel_size)
        patches = extract_patches(x, self.kernel_size, self.strides).astype(self.dtype)
        return patches @ kernel.reshape(kh * kw * channels, self.features).astype(self.dtype) + bias.astype(self.dtype)


def conv_params(module: nn.Module, channels: int, features: int, kernel_size: tuple[int, int]):
    """A convolution's ``kernel [kh, kw, channels, features]`` and ``bias``, declared in ``module``'s scope."""
    kernel = module.param("kernel", nn.initializers.lecun_normal(), (*kernel_size, channels, features))
    return kernel, module.param("bias", nn.initializers.zeros_init(), (features,))


class ConvParams(nn.Module):
    """A ``PatchConv``'s parameters alone (same names, shapes and initialisers), for a fused computation."""

    features: int
    kernel_size: tuple[int, int]

    @nn.compact
    def __call__(self, channels: int) -> tuple[jax.Array, jax.Array]:
        return conv_params(self, channels, self.features, self.kernel_size)


class MazeConv(nn.Module):
    """The maze network of the paper's appendix (input ``[B, 24, 24, 1]``).

    ``pallas_torso``: both convolutions and their ReLUs computed by the Pallas kernels of
    :mod:`opiq_jax.kernels.maze_torso` (same parameters, same function, each product rounded as here).
    """

    num_outputs: int
    dtype: jnp.dtype = jnp.float32
    pallas_torso: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(self.dtype)
        if self.pallas_torso:
            k1, b1 = ConvParams(16, (3, 3), name="PatchConv_0")(x.shape[-1])
            k2, b2 = ConvParams(16, (3, 3), name="PatchConv_1")(16)
            x = maze_torso(x, *(w.astype(self.dtype) for w in (k1, b1, k2, b2)))
        else:
            x = nn.relu(PatchConv(16, (3, 3), (2, 2), self.dtype)(x))
            x = nn.relu(PatchConv(16, (3, 3), (2, 2), self.dtype)(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        x = nn.relu(nn.Dense(400, dtype=self.dtype)(x))
        x = nn.Dense(200, dtype=self.dtype)(x)
        return output_layer(self.num_outputs)(x)


class MinAtarConv(nn.Module):
    """The MinAtar network of Young and Tian (2019) (input ``[B, 10, 10, C]`` of 0/1 channels): one 3x3 convolution
    of 16 filters, stride 1, then 128 hidden units."""

    num_outputs: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = nn.relu(PatchConv(16, (3, 3), (1, 1), self.dtype)(obs.astype(self.dtype)))
        x = nn.relu(nn.Dense(128, dtype=self.dtype)(jnp.reshape(x, (x.shape[0], -1))))
        return output_layer(self.num_outputs)(x)


class NatureDQN(nn.Module):
    """The Nature DQN network for stacks of 84x84 uint8 frames (``[B, 84, 84, 4]``)."""

    num_outputs: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = (obs.astype(jnp.float32) / 255.0).astype(self.dtype)
        x = nn.relu(PatchConv(32, (8, 8), (4, 4), self.dtype)(x))
        x = nn.relu(PatchConv(64, (4, 4), (2, 2), self.dtype)(x))
        x = nn.relu(PatchConv(64, (3, 3), (1, 1), self.dtype)(x))
        x = jnp.reshape(x, (x.shape[0], -1))
        x = nn.relu(nn.Dense(512, dtype=self.dtype)(x))
        return output_layer(self.num_outputs)(x)


class Torso(nn.Module):
    """The shared part of a network in BSP: the convolutions (maze, Atari) or the first hidden layer (MLP)."""

    name_: str
    hidden: Sequence[int] = (256, 256)
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        if self.name_ == "nature":
            x = x / 255.0
        x = x.astype(self.dtype)
        if self.name_ == "mlp":
            return nn.relu(nn.Dense(self.hidden[0], dtype=self.dtype)(jnp.reshape(x, (x.shape[0], -1))))
        if self.name_ == "maze_conv":
            x = nn.relu(PatchConv(16, (3, 3), (2, 2), self.dtype)(x))
            x = nn.relu(PatchConv(16, (3, 3), (2, 2), self.dtype)(x))
        elif self.name_ == "minatar_conv":
            x = nn.relu(PatchConv(16, (3, 3), (1, 1), self.dtype)(x))
        else:
            x = nn.relu(PatchConv(32, (8, 8), (4, 4), self.dtype)(x))
            x = nn.relu(PatchConv(64, (4, 4), (2, 2), self.dtype)(x))
            x = nn.relu(PatchConv(64, (3, 3), (1, 1), self.dtype)(x))
        return jnp.reshape(x, (x.shape[0], -1))


class Head(nn.Module):
    """One BSP head: the layers of the network after its torso."""

    name_: str
    num_outputs: int
    hidden: Sequence[int] = (256, 256)
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.name_ == "mlp":
            for width in self.hidden[1:]:
                x = nn.relu(nn.Dense(width, dtype=self.dtype)(x))
        elif self.name_ == "maze_conv":
            x = nn.Dense(200, dtype=self.dtype)(nn.relu(nn.Dense(400, dtype=self.dtype)(x)))
        elif self.name_ == "minatar_conv":
            x = nn.relu(nn.Dense(128, dtype=self.dtype)(x))
        else:
            x = nn.relu(nn.Dense(512, dtype=self.dtype)(x))
        return output_layer(self.num_outputs)(x)


class BootstrappedQ(nn.Module):
    """``num_heads`` Q-heads on one shared torso (bootstrapped DQN); returns ``[B, num_heads, num_outputs]``.

    The torso is what the paper's BSP architecture shares (the maze's convolutions; the Atari
    convolutions; for the chain's MLP, whose split the paper does not give, the first hidden layer).
    """

    name_: str
    num_outputs: int
    num_heads: int
    hidden: Sequence[int] = (256, 256)
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        features = Torso(self.name_, self.hidden, self.dtype, name="torso")(obs)
        heads = nn.vmap(
            Head, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None, out_axes=1,
            axis_size=self.num_heads,
        )(self.name_, self.num_outputs, self.hidden, self.dtype, name="heads")
        return heads(features)


NETWORKS = ("mlp", "maze_conv", "minatar_conv", "nature")
"""The Q-networks by name: the chain's MLP, the maze's conv net, MinAtar's (Young and Tian's) and the Nature DQN's."""


def make_bootstrapped_network(name: str, num_outputs: int, num_heads: int, hidden: Sequence[int] = (256, 256),
                              dtype: jnp.dtype = jnp.float32) -> nn.Module:
    """BSP's K-headed form of the network ``name`` (one of :data:`NETWORKS`)."""
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; choose {', '.join(NETWORKS)}")
    return BootstrappedQ(name_=name, num_outputs=num_outputs, num_heads=num_heads, hidden=tuple(hidden), dtype=dtype)


def zero_final_layer(params: chex.ArrayTree) -> chex.ArrayTree:
    """Sets the output layer's weights and bias to zero (DORA's E-network starts at sigmoid(0) = 0.5 everywhere)."""
    head = params["params"][HEAD]
    new_head = jax.tree.map(jnp.zeros_like, head)
    return {**params, "params": {**params["params"], HEAD: new_head}}


SMALLEST_CONV_SIDE = 16
"""The smallest image side ``auto`` gives the maze's conv net: its two VALID 3x3 convolutions of stride 2 leave a
3x3 map of a 16x16 image, but a single cell of MinAtar's 10x10 or MiniGrid's 7x7 view, which the MLP reads whole."""


def network_for(choice: str, obs_shape: tuple[int, ...]) -> str:
    """The network ``choice`` names, or for ``auto`` the small conv net for images whose sides are both at least
    :data:`SMALLEST_CONV_SIDE` and an MLP over the flattened observation for anything else (vectors, small grids)."""
    if choice != "auto":
        return choice
    return "maze_conv" if len(obs_shape) == 3 and min(obs_shape[:2]) >= SMALLEST_CONV_SIDE else "mlp"


def make_network(name: str, num_outputs: int, hidden: Sequence[int] = (256, 256),
                 dtype: jnp.dtype = jnp.float32, pallas_torso: bool = False, lean_backward: bool = False) -> nn.Module:
    """Builds a network by name (one of :data:`NETWORKS`), its hidden layers computing in ``dtype``
    (``pallas_torso``: the maze network's convolutions as Pallas kernels, :class:`MazeConv`; ``lean_backward``:
    the MLP's backward pass of :mod:`opiq_jax.kernels.mlp_backward`)."""
    if lean_backward and name != "mlp":
        raise ValueError(f"the lean backward pass is the MLP's, not {name!r}'s")
    if name == "mlp":
        return MLP(num_outputs=num_outputs, hidden=tuple(hidden), dtype=dtype, lean_backward=lean_backward)
    if name == "maze_conv":
        return MazeConv(num_outputs=num_outputs, dtype=dtype, pallas_torso=pallas_torso)
    if name == "minatar_conv":
        return MinAtarConv(num_outputs=num_outputs, dtype=dtype)
    if name == "nature":
        return NatureDQN(num_outputs=num_outputs, dtype=dtype)
    raise ValueError(f"unknown network {name!r}; choose {', '.join(NETWORKS)}")


def map_output_layer(params: chex.ArrayTree, change) -> chex.ArrayTree:
    """``params`` with the output layer ``head`` (for BSP, the heads' stacked one) replaced by ``change(head)``."""
    inner = params["params"]
    if HEAD not in inner:  # BootstrappedQ: the heads' output layers
        heads = inner["heads"]
        return {**params, "params": {**inner, "heads": {**heads, HEAD: change(heads[HEAD])}}}
    return {**params, "params": {**inner, HEAD: change(inner[HEAD])}}


def set_final_bias(params: chex.ArrayTree, bias: jax.Array) -> chex.ArrayTree:
    """Sets every entry of the output layer's bias to ``bias`` (the DQN Bias baseline); for BSP, every head's."""
    return map_output_layer(params, lambda head: {**head, "bias": jnp.full_like(head["bias"], bias)})


def scale_output_weights(params: chex.ArrayTree, factor: float) -> chex.ArrayTree:
    """The output layer's weights (for BSP, every head's) times ``factor``; the bias as it is."""
    return map_output_layer(params, lambda head: {**head, "kernel": head["kernel"] * factor})


INITIALISATIONS = ("flax", "pytorch")
"""How a network's parameters are first drawn: ``flax`` (LeCun normal weights, zero biases: flax's defaults) or
``pytorch`` (PyTorch's defaults for ``Linear`` and ``Conv2d``, which the authors' networks keep)."""


def fan_in(kernel: jax.Array, bias: jax.Array | None) -> int:
    """Inputs of one output unit of a layer: the kernel's every axis but the last (a convolution's area times its
    input channels), less the leading axes of stacked copies (BSP's heads), which the bias has too."""
    stacked = 0 if bias is None else bias.ndim - 1
    return math.prod(kernel.shape[stacked:-1])


def pytorch_layer(layer: Mapping, key: chex.PRNGKey) -> dict:
    """One layer's ``kernel`` and ``bias`` drawn as PyTorch draws them by default: both uniform in
    ±1/sqrt(fan_in) (``kaiming_uniform_(a=sqrt(5))`` for the weights comes to that bound)."""
    bias = layer.get("bias")
    bound = 1.0 / math.sqrt(fan_in(layer["kernel"], bias))
    k_kernel, k_bias = jax.random.split(key)
    drawn = {"kernel": jax.random.uniform(k_kernel, layer["kernel"].shape, jnp.float32, -bound, bound)}
    if bias is not None:
        drawn["bias"] = jax.random.uniform(k_bias, bias.shape, jnp.float32, -bound, bound)
    return {**layer, **drawn}


def pytorch_default_init(params: chex.ArrayTree, key: chex.PRNGKey) -> chex.ArrayTree:
    """``params`` (a flax parameter tree) with every layer redrawn as PyTorch's default. Each layer's key comes
    from its name, so a layer's draw does not depend on which other layers the network has."""
    if "kernel" in params:
        return pytorch_layer(params, key)
    return {name: pytorch_default_init(sub, jax.random.fold_in(key, zlib.crc32(name.encode()) & 0x7FFFFFFF))
            if isinstance(sub, Mapping) else sub for name, sub in params.items()}


def init_variables(network: nn.Module, key: chex.PRNGKey, obs: jax.Array,
                   initialisation: str = "flax") -> chex.ArrayTree:
    """``network``'s variables for a batch of observations ``obs``, its parameters drawn as ``initialisation`` says
    (:data:`INITIALISATIONS`). ``flax`` is ``network.init`` itself."""
    variables = network.init(key, obs)
    if initialisation == "flax":
        return variables
    if initialisation != "pytorch":
        raise ValueError(f"unknown initialisation {initialisation!r}; choose {' or '.join(INITIALISATIONS)}")
    # flax's draw is discarded (and compiled away); a key of its own for the redraw all the same
    return {**variables, "params": pytorch_default_init(variables["params"], jax.random.fold_in(key, 0x7043))}


def init_params(network: nn.Module, key: chex.PRNGKey, example_obs: jax.Array, final_bias: jax.Array,
                head_scale: float = 1.0, initialisation: str = "flax") -> chex.ArrayTree:
    """Initialises ``network`` on one example observation as ``initialisation`` says, scales its output weights by
    ``head_scale`` and sets its output bias (the parameters only: the lean backward pass's probes are not state).

    Under ``pytorch`` a ``final_bias`` of 0 (every method but DQN Bias) keeps the drawn output bias, as the
    authors' code leaves it unless its ``final_layer_bias`` is set; any other value fills it, as theirs does."""
    params = {"params": init_variables(network, key, example_obs[None], initialisation)["params"]}
    if head_scale != 1.0:  # a static choice: the default program stays as it was
        params = scale_output_weights(params, head_scale)
    if initialisation == "pytorch":
        return map_output_layer(params, lambda head: {
            **head, "bias": jnp.where(final_bias != 0, jnp.full_like(head["bias"], final_bias), head["bias"])})
    return set_final_bias(params, final_bias)
