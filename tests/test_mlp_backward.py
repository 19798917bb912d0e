"""``mlp_backward="pallas"`` (opiq_jax/kernels/mlp_backward.py): the MLP's weight gradients written by a Pallas kernel
with their sums of squares, the output layer's input gradient as outer products, and the packed optimiser's
clip from those sums. On the CPU the kernel runs in Pallas's interpreter."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from opiq_jax.agent import trainer
from opiq_jax.agent.trainer import uses_lean_backward
from opiq_jax.agent.weights import master_params, weight_storage
from opiq_jax.benchmark.throughput import work_model
from opiq_jax.kernels import mlp_backward
from opiq_jax.kernels.mlp_backward import SQUARE_SUMS, kernel_fits, square_sum_total, weight_gradient
from opiq_jax.parts import get_part
from opiq_jax.primitives import packed_state
from opiq_jax.primitives.networks import MLP, in_compute_precision, init_params
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.host_loop import METRICS_FILE, run_experiment
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec

PACKED = static_for_env("chain", chain_length=16, total_steps=300, log_every=100, buffer_size=300, hidden=(32, 32),
                        batch_size=16, precision="bfloat16", weight_storage="packed")


def layer_operands(batch=16, fan_in=32, fan_out=64, seed=0):
    kx, kg = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (batch, fan_in)).astype(jnp.bfloat16)
    g = (0.1 * jax.random.normal(kg, (batch, fan_out))).astype(jnp.bfloat16)
    return x, g


def xla_weight_gradient(x, g, relu):
    dw = jnp.einsum("bk,bn->kn", jnp.maximum(x, 0) if relu else x, g)
    return dw, jnp.sum(jnp.square(dw.astype(jnp.float32)))


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("fan_in", [32, 384])  # one step of the loop, three
def test_kernel_writes_xlas_weight_gradient_and_its_square_sum(relu, fan_in):
    x, g = layer_operands(fan_in=fan_in)
    dw, square_sum = jax.jit(weight_gradient, static_argnums=2)(x, g, relu)
    want, want_sum = xla_weight_gradient(x, g, relu)
    assert dw.dtype == jnp.bfloat16 and dw.shape == (fan_in, 64)
    np.testing.assert_array_equal(np.asarray(dw, np.float32), np.asarray(want, np.float32))
    np.testing.assert_allclose(float(square_sum), float(want_sum), rtol=1e-6)
    if relu:  # the ReLU is the kernel's: the gradient differs from the one of the raw input
        assert not np.array_equal(np.asarray(dw), np.asarray(xla_weight_gradient(x, g, False)[0]))


def test_kernel_under_vmap_gives_every_run_its_own():
    xs, gs = zip(*(layer_operands(seed=s) for s in range(3)))
    dw, sums = jax.jit(jax.vmap(lambda x, g: weight_gradient(x, g, True)))(jnp.stack(xs), jnp.stack(gs))
    for r in range(3):
        want, want_sum = xla_weight_gradient(xs[r], gs[r], True)
        np.testing.assert_array_equal(np.asarray(dw[r], np.float32), np.asarray(want, np.float32))
        np.testing.assert_allclose(float(sums[r]), float(want_sum), rtol=1e-6)


def test_which_layers_the_kernel_takes():
    assert kernel_fits(64, 256, 256) and kernel_fits(16, 16, 16) and kernel_fits(64, 384, 128)
    assert not kernel_fits(64, 100, 256)  # the chain's first layer: 100 inputs
    assert not kernel_fits(64, 256, 512)  # too many outputs for one program's registers
    assert not kernel_fits(48, 256, 256) and not kernel_fits(8, 256, 256)  # batches: powers of two >= 16
    assert not kernel_fits(64, 256, 256, jnp.float32)  # Triton's float32 product would round to TF32
    with pytest.raises(ValueError, match="does not take a bfloat16 layer of 100 x 256"):
        weight_gradient(*layer_operands(batch=64, fan_in=100, fan_out=256), relu=False)


def network_pair(hidden=(32, 256)):
    plain = MLP(2, hidden, jnp.bfloat16)
    lean = MLP(2, hidden, jnp.bfloat16, lean_backward=True)
    return plain, lean


def test_lean_mlp_has_the_same_weights_forward_and_gradients():
    """The lean MLP is the MLP: the same initial weights for a key, the same Q-values bit for bit, and its
    gradients are the MLP's; each kernel's probe returns its gradient's square sum."""
    plain, lean = network_pair()
    obs = jax.random.normal(jax.random.key(1), (16, 20))  # 20 inputs: the first layer is XLA's
    weights = init_params(plain, jax.random.key(0), obs[0], jnp.float32(0.0))
    lean_weights = init_params(lean, jax.random.key(0), obs[0], jnp.float32(0.0))
    assert jax.tree.structure(weights) == jax.tree.structure(lean_weights)
    for a, b in zip(jax.tree.leaves(weights), jax.tree.leaves(lean_weights)):
        np.testing.assert_array_equal(a, b)
    compute = in_compute_precision(weights, jnp.bfloat16)
    np.testing.assert_array_equal(plain.apply(compute, obs), lean.apply(compute, obs))
    probes = jax.tree.map(jnp.zeros_like, lean.init(jax.random.key(0), obs[:1])[SQUARE_SUMS])
    assert set(probes) == {"Dense_0", "Dense_1"}

    def loss(network, variables):
        return jnp.sum(jnp.square(network.apply(variables, obs) - 1.0))

    want = jax.jit(jax.grad(lambda v: loss(plain, v)))(compute)
    got = jax.jit(jax.grad(lambda v: loss(lean, v)))({**compute, SQUARE_SUMS: probes})
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got["params"])):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    # the kernel's sum is of the bfloat16 gradient it wrote; XLA's, for the first layer, may be taken before the
    # rounding (XLA drops a float32 -> bfloat16 -> float32 round trip: excess precision)
    for layer, rtol in (("Dense_0", 2**-8), ("Dense_1", 1e-5)):
        kernel_gradient = np.asarray(got["params"][layer]["kernel"], np.float64)
        np.testing.assert_allclose(float(got[SQUARE_SUMS][layer]["kernel"]), np.sum(kernel_gradient ** 2), rtol=rtol)


def test_output_layer_input_gradient_as_outer_products():
    x = jax.random.normal(jax.random.key(2), (16, 32))
    for outputs in (2, 12):  # 12: more than FEW_OUTPUTS, the plain product
        kernel = jax.random.normal(jax.random.key(3), (32, outputs))
        jaxpr = str(jax.make_jaxpr(lambda a, b: mlp_backward.few_outputs_dot_general(a, b, mlp_backward.DIMENSIONS))(
            x, kernel))
        assert ("custom_vjp_call" in jaxpr) == (outputs <= mlp_backward.FEW_OUTPUTS)
        cotangent = jax.random.normal(jax.random.key(4), (16, outputs))
        _, vjp = jax.vjp(lambda a, b: mlp_backward.few_outputs_dot_general(a, b, mlp_backward.DIMENSIONS), x, kernel)
        _, want_vjp = jax.vjp(lambda a, b: a @ b, x, kernel)
        for got, want in zip(vjp(cotangent), want_vjp(cotangent)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="2-d Dense product"):
        mlp_backward.few_outputs_dot_general(x, kernel, mlp_backward.DIMENSIONS, precision=jax.lax.Precision.HIGHEST)


def test_square_sum_total_adds_the_known_sums_and_the_other_leaves():
    grads = {"params": {"a": {"kernel": jnp.full((2, 2), 3.0, jnp.bfloat16), "bias": jnp.ones((2,))},
                        "head": {"kernel": jnp.full((2, 1), 2.0)}}}
    total = square_sum_total(grads, {"a": {"kernel": jnp.float32(100.0)}})  # the known sum replaces 4 * 9
    assert float(total) == 100.0 + 2.0 + 8.0
    with pytest.raises(ValueError, match="square sums of no gradient"):
        square_sum_total(grads, {"b": {"kernel": jnp.float32(1.0)}})


@pytest.mark.parametrize("scale", [1e-3, 1e3])  # below the clip of 5, and far above it
def test_packed_step_with_square_sums_is_the_step_with_the_norm_read_from_the_gradients(scale):
    compute = {"params": {"Dense_0": {"kernel": jnp.full((16, 16), 0.5, jnp.bfloat16), "bias": jnp.zeros((16,),
                                                                                                        jnp.bfloat16)},
                          "head": {"kernel": jnp.full((16, 2), 0.1), "bias": jnp.zeros((2,))}}}
    lows = jax.tree.map(lambda c: jnp.zeros(c.shape if c.dtype == jnp.bfloat16 else (0,), jnp.uint8), compute)
    accumulator = jax.tree.map(lambda c: jnp.full(c.shape, 1e-4, jnp.bfloat16), compute)
    grads = jax.tree.map(lambda c: (scale * jax.random.normal(jax.random.key(7), c.shape)).astype(c.dtype), compute)
    sums = {"Dense_0": {"kernel": jnp.sum(jnp.square(grads["params"]["Dense_0"]["kernel"].astype(jnp.float32)))}}
    step = jax.jit(packed_state.rmsprop_step, static_argnums=0)
    want = step(PACKED, compute, lows, accumulator, grads, jnp.float32(1e-3), jnp.uint32(3))
    got = step(PACKED, compute, lows, accumulator, grads, jnp.float32(1e-3), jnp.uint32(3), sums)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        if scale < 1:  # the clip is not applied: the same operations, bit for bit
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
        else:  # clipped by the same norm summed in another order
            np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=2**-7)


def test_which_programs_take_the_lean_backward_pass():
    pallas = dataclasses.replace(PACKED, mlp_backward="pallas")
    opiq, packed = (get_part("optimism"),), weight_storage(PACKED)

    def lean(static, net_name="mlp", parts=opiq, storage=packed):
        return uses_lean_backward(static, net_name, parts, storage)

    assert lean(pallas)
    assert not lean(PACKED)  # auto: GPUs only (this is the CPU)
    assert not lean(dataclasses.replace(pallas, mlp_backward="xla"))
    assert not lean(pallas, "maze_conv")
    assert not lean(dataclasses.replace(pallas, parts=("bsp",)), parts=(get_part("bsp"),))  # heads, rescaled torso
    assert not lean(dataclasses.replace(pallas, hidden=()))  # no layer to probe
    assert not lean(pallas, storage=weight_storage(dataclasses.replace(pallas, weight_storage="float32")))  # no sums
    dora = compiled_trainer(dataclasses.replace(pallas, parts=("dora",)))[0].agent
    assert dora.lean_backward and not dora.make_network(1).lean_backward  # DORA's E-network keeps XLA's
    with pytest.raises(ValueError, match="mlp_backward pallas needs weight_storage packed"):
        dataclasses.replace(pallas, weight_storage="float32").validate()


def test_work_model_drops_the_norms_read_of_the_kernels_it_writes():
    chain = static_for_env("chain", precision="bfloat16", weight_storage="packed")
    xla, lean = work_model(chain), work_model(dataclasses.replace(chain, mlp_backward="pallas"))
    assert lean.params == xla.params  # the probes are not parameters
    # the chain's 256 x 256 kernel fits (its 100 x 256 first layer does not): 2 bytes each not read again
    assert xla.bytes["gradients"] - lean.bytes["gradients"] == 256 * 256 * 2
    assert {k: v for k, v in xla.bytes.items() if k != "gradients"} == \
        {k: v for k, v in lean.bytes.items() if k != "gradients"}


def one_update(static, run):
    agent = compiled_trainer(static)[0].agent
    kernels = "pallas_call" in str(jax.make_jaxpr(lambda r: trainer.update(agent, r))(run))
    assert agent.lean_backward == kernels == (static.execution.mlp_backward == "pallas")
    return jax.jit(lambda r: trainer.update(agent, r))(run)


@pytest.fixture(scope="module")
def run_after_100_steps(tmp_path_factory):
    experiment = Experiment(PACKED, (RunSpec("opiq", "paper", 0, method_hparams("chain", "opiq")),))
    state = run_experiment(experiment, tmp_path_factory.mktemp("xla"), progress=False, checkpoint_seconds=0,
                           verbose=False, stop_after_chunks=1)
    return jax.tree.map(lambda x: x[0], state.runs)


@pytest.mark.parametrize("grad_clip", [5.0, 1e-3])  # the paper's clip (not reached here), and one always reached
def test_the_trainers_update_with_the_kernels_is_the_update_with_xlas_backward_pass(run_after_100_steps, grad_clip):
    """From the same run after 100 steps, one update with the kernels takes the step XLA's backward pass takes.
    On the CPU both compute the same products; the clip's norm is summed in another order, which may move
    its last bit (here it does not)."""
    run = run_after_100_steps
    static = dataclasses.replace(PACKED, grad_clip=grad_clip)
    want = one_update(dataclasses.replace(static, mlp_backward="xla"), run)
    got = one_update(dataclasses.replace(static, mlp_backward="pallas"), run)
    for before, a, b in zip(*(jax.tree.leaves(master_params(PACKED, r)) for r in (run, want, got))):
        want_step, got_step = np.asarray(a) - before, np.asarray(b) - before
        assert np.max(np.abs(want_step)) > 0  # the update moved every leaf
        np.testing.assert_allclose(got_step, want_step, rtol=0, atol=1e-6 * np.max(np.abs(want_step)))
    np.testing.assert_allclose(float(got.stats.chunk.loss_sum), float(want.stats.chunk.loss_sum), rtol=1e-6)


def test_the_kernels_square_sums_make_the_gradients_norm(run_after_100_steps):
    """The trainer's square sums with the other leaves' give the global norm optax computes from the gradients."""
    agent = compiled_trainer(dataclasses.replace(PACKED, mlp_backward="pallas"))[0].agent
    assert set(agent.backward.probes) == {"Dense_0", "Dense_1"}  # both layers of 16 -> 32 -> 32 fit
    run = run_after_100_steps
    batch = trainer.sample_batch(agent, run, jax.random.key(1))
    targets, _ = trainer.targets_for(agent, run, batch)
    _, grads, sums = jax.jit(lambda r: trainer.loss_and_gradients(agent, r, batch, targets))(run)
    assert set(grads) == {"params"}  # the probes' cotangents are not gradients
    norm = optax.tree.norm(jax.tree.map(lambda g: g.astype(jnp.float32), grads))
    np.testing.assert_allclose(float(jnp.sqrt(square_sum_total(grads, sums))), float(norm), rtol=1e-6)


def test_runs_with_the_kernels_train_and_resume_bit_identically(tmp_path):
    static = dataclasses.replace(PACKED, mlp_backward="pallas")
    experiment = Experiment(static, tuple(RunSpec("opiq", "paper", s, method_hparams("chain", "opiq"))
                                          for s in range(2)))
    whole = run_experiment(experiment, tmp_path / "whole", progress=False, checkpoint_seconds=0, verbose=False)
    out = tmp_path / "stopped, \"once\" ✓"
    run_experiment(experiment, out, progress=False, checkpoint_seconds=0, stop_after_chunks=1, verbose=False)
    run_experiment(experiment, out, progress=False, checkpoint_seconds=0, verbose=False)
    assert (out / METRICS_FILE).read_bytes() == (tmp_path / "whole" / METRICS_FILE).read_bytes()
    weights = master_params(PACKED, whole.runs)
    assert all(np.all(np.isfinite(w)) for w in jax.tree.leaves(weights))
