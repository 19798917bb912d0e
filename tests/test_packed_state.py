"""``weight_storage="packed"``: weights as a bfloat16 copy plus 8 bits and a bfloat16 RMSProp accumulator, both
rounded stochastically (opiq_jax/primitives/packed_state.py), and the trainer and results folder with it."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import learning_step, make_optimiser
from opiq_jax.agent.weights import ComputeCopyStored, PackedStored, master_params, weight_storage
from opiq_jax.api import read_final_state
from opiq_jax.benchmark.throughput import work_model
from opiq_jax.common.config import stack_hparams
from opiq_jax.primitives import packed_state
from opiq_jax.primitives.networks import in_compute_precision
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.host_loop import METRICS_FILE, run_experiment
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for
from opiq_jax.store.files import CHECKPOINT_FILE

STATIC = static_for_env("chain", chain_length=8, total_steps=300, log_every=50, buffer_size=300, hidden=(16,),
                        precision="bfloat16", weight_storage="packed")
EXPERIMENT = Experiment(STATIC, tuple(RunSpec("opiq", "paper", s, method_hparams("chain", "opiq")) for s in range(3)))


def as_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def some_weights(n: int = 4096) -> jax.Array:
    """float32 numbers of the sizes weights have, of both signs, plus zeros and a bfloat16 tie."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 1, n)).astype(np.float32)
    w[:3] = [0.0, -0.0, np.float32(1 + 2**-8)]
    return jnp.asarray(w)


def test_pack_keeps_24_bits_and_unpack_is_exact():
    w = some_weights()
    noise = packed_state.element_noise(w.shape, jnp.uint32(5))
    high, low = jax.jit(packed_state.pack_weight)(w, noise)
    assert high.dtype == jnp.bfloat16 and low.dtype == jnp.uint8
    back = jax.jit(packed_state.unpack_weight)(high, low)
    # the value kept is w with its lowest 8 bits rounded away: one of the two 24-bit neighbours of w
    below = as_bits(w) & np.uint32(0xFFFFFF00)
    assert np.all((as_bits(back) == below) | (as_bits(back) == below + 0x100))
    # repacking a 24-bit value changes nothing, whatever the noise, and the copy is its nearest bfloat16
    again = packed_state.pack_weight(back, packed_state.element_noise(w.shape, jnp.uint32(99)))
    np.testing.assert_array_equal(as_bits(packed_state.unpack_weight(*again)), as_bits(back))
    nearest = np.asarray(back.astype(jnp.bfloat16), np.float32)
    not_tie = (as_bits(back) & 0xFFFF) != 0x8000
    np.testing.assert_array_equal(np.asarray(high, np.float32)[not_tie], nearest[not_tie])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_stochastic_rounding_is_unbiased(sign):
    """Averaged over elements, the stored values equal the exact ones: a step far below bfloat16's spacing
    survives (to_bfloat16: 0.3 of a unit; the weights: 0.7 of a 24-bit unit), for either sign."""
    x = jnp.full((20_000,), sign * (1.0 + 0.3 * 2**-7), jnp.float32)
    rounded = np.asarray(packed_state.to_bfloat16(x, packed_state.element_noise(x.shape, jnp.uint32(1))), np.float64)
    assert set(np.abs(np.unique(rounded))) == {1.0, 1.0 + 2**-7}
    assert abs(rounded.mean() - float(x[0])) < 0.03 * 2**-7  # the mean of 20,000 coin flips: within 3 %
    w = jnp.full((20_000,), sign * (0.05 + 0.7 * 2**-20), jnp.float32)  # between two 24-bit values
    kept = np.asarray(packed_state.unpack_weight(*packed_state.pack_weight(w, packed_state.element_noise(
        w.shape, jnp.uint32(2)))), np.float64)
    assert len(np.unique(kept)) == 2 and abs(kept.mean() - float(w[0])) < 0.03 * float(np.ptp(kept))


def test_nan_and_infinity_survive_packing_and_rounding():
    """A diverged run stays visibly non-finite: no carry may turn NaN into zero or infinity into a number."""
    nan_bits = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x7F800001], np.uint32).view(np.float32)
    x = jnp.asarray(np.concatenate([nan_bits, np.array([np.inf, -np.inf, 3.4e38, -0.0], np.float32)]))
    for salt in range(8):
        noise = packed_state.element_noise(x.shape, jnp.uint32(salt))
        back = np.asarray(packed_state.unpack_weight(*packed_state.pack_weight(x, noise)))
        copy = np.asarray(packed_state.to_bfloat16(x, noise), np.float32)
        for got in (back, copy):
            assert np.all(np.isnan(got[:4])) and list(got[4:6]) == [np.inf, -np.inf]
            assert np.isfinite(got[6]) or got[6] == np.inf  # the largest finite may round up, never to NaN
            assert got[7] == 0 and np.signbit(got[7])


def test_noise_differs_between_salts_and_elements():
    a = np.asarray(packed_state.element_noise((64, 64), jnp.uint32(1)))
    b = np.asarray(packed_state.element_noise((64, 64), jnp.uint32(2)))
    assert len(np.unique(a)) > 4000 and np.mean(a == b) < 0.01
    assert abs(np.mean(a & 0xFFFF) / 0xFFFF - 0.5) < 0.02  # the 16 bits the accumulator's rounding uses


def test_rmsprop_step_is_the_optimisers_step_up_to_storage_rounding():
    """From the same stored state, one packed step is optax's clipped RMSProp step, rounded for storage."""
    params = {"Dense_0": {"kernel": jax.random.normal(jax.random.key(0), (5, 7)) * 0.3},
              "head": {"kernel": jax.random.normal(jax.random.key(1), (7, 2)) * 0.3}}
    compute, lows = packed_state.pack_tree(params, jnp.uint32(3))
    assert compute["Dense_0"]["kernel"].dtype == jnp.bfloat16 and compute["head"]["kernel"].dtype == jnp.float32
    assert lows["head"]["kernel"].size == 0
    accumulator = packed_state.init_accumulator(params)
    optimiser = make_optimiser(STATIC)
    for step in range(3):
        grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(10 + step), p.shape) * 3.0, params)  # clipped
        weights = packed_state.unpack_tree(compute, lows)
        clip_state, rms_state = optimiser.init(weights)
        state = (clip_state, rms_state._replace(nu=jax.tree.map(lambda n: n.astype(jnp.float32), accumulator)))
        updates, (_, rms_state) = optimiser.update(grads, state, weights)
        expected = jax.tree.map(lambda p, u: p - 1e-2 * u, weights, updates)
        compute, lows, accumulator = packed_state.rmsprop_step(STATIC, compute, lows, accumulator, grads,
                                                               jnp.float32(1e-2), jnp.uint32(step))
        got = packed_state.unpack_tree(compute, lows)
        # 24 bits kept: within one spacing, 2^-15 of the value; the float32 output layer as computed (to the last
        # bit or so: the compiler may order the float32 operations differently)
        np.testing.assert_allclose(got["Dense_0"]["kernel"], expected["Dense_0"]["kernel"], rtol=2**-15, atol=0)
        np.testing.assert_allclose(got["head"]["kernel"], expected["head"]["kernel"], rtol=2e-7, atol=0)
        for name in ("Dense_0", "head"):  # the accumulator within one bfloat16 spacing, 2^-7 of the value
            assert accumulator[name]["kernel"].dtype == jnp.bfloat16
            np.testing.assert_allclose(np.asarray(accumulator[name]["kernel"], np.float32),
                                       rms_state.nu[name]["kernel"], rtol=2**-7, atol=0)


def test_float32_storage_starts_from_the_weights_rounded_as_before():
    """The default storage's initial copies (forward passes and target network) are the float32 weights cast to
    bfloat16, as in the revisions before packed storage."""
    static = dataclasses.replace(STATIC, weight_storage="float32")
    experiment = Experiment(static, EXPERIMENT.runs)
    runs = compiled_trainer(static)[1](*run_keys_for(experiment), stack_hparams(experiment.hparams())).runs
    storage = weight_storage(static)
    assert isinstance(runs.weights, ComputeCopyStored)  # the float32 weights and their copy, no low bytes
    cast = in_compute_precision(storage.master(runs), jnp.bfloat16)
    for copy in (storage.forward(runs), runs.target_params):
        jax.tree.map(np.testing.assert_array_equal, copy, cast)


def test_packed_storage_needs_bfloat16():
    with pytest.raises(ValueError, match="^weight_storage packed needs precision bfloat16"):
        static_for_env("chain", weight_storage="packed").validate()


def test_work_model_counts_the_packed_bytes():
    float32 = work_model(dataclasses.replace(STATIC, weight_storage="float32"))
    packed = work_model(STATIC)
    assert packed.bytes["optimiser"] == pytest.approx(float32.bytes["optimiser"] / 2)  # a bfloat16 accumulator
    # each hidden weight: read and written as 2 + 1 bytes, not 4 (+ its copy's 2-byte write); the output layer's
    # float32 weights are read and written as before, without a copy
    hidden = 8 * 16 + 16
    head = 16 * 2 + 2
    saved = hidden * (2 * 4 + 2 - 2 * 3) + head * (2 * 4 + 2 - 2 * 4)
    assert float32.bytes["update params"] - packed.bytes["update params"] == pytest.approx(saved)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    return out, run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, verbose=False)


def test_packed_runs_train_and_store_packed_state(straight):
    _, state = straight
    runs, storage = state.runs, weight_storage(STATIC)
    assert isinstance(runs.weights, PackedStored)  # no float32 weights kept
    _, low = storage.stored_weights(runs)
    assert {x.dtype for x in jax.tree.leaves(low)} == {np.dtype(np.uint8)}
    assert {x.dtype for x in jax.tree.leaves(storage.optimiser_state(runs))} == {jnp.dtype(jnp.bfloat16)}
    weights = master_params(STATIC, runs)
    assert {x.dtype for x in jax.tree.leaves(weights)} == {np.dtype(np.float32)}
    kernel = np.asarray(weights["params"]["Dense_0"]["kernel"])
    assert np.all(np.isfinite(kernel))
    _, init, _ = compiled_trainer(STATIC)
    start = master_params(STATIC, init(*run_keys_for(EXPERIMENT), stack_hparams(EXPERIMENT.hparams())).runs)
    assert not np.array_equal(np.asarray(start["params"]["Dense_0"]["kernel"]), kernel)  # it learned


def test_learning_step_on_packed_storage_follows_float32_storage():
    """The trainer's step on packed storage is the float32 storage's step from the same weights and accumulator,
    rounded for storage; it moves the weights."""
    packed_agent = compiled_trainer(STATIC)[0].agent
    float32_agent = compiled_trainer(dataclasses.replace(STATIC, weight_storage="float32"))[0].agent
    _, init, _ = compiled_trainer(STATIC)
    run = jax.tree.map(lambda x: x[0], init(*run_keys_for(EXPERIMENT), stack_hparams(EXPERIMENT.hparams())).runs)
    compute = packed_agent.weights.forward(run)
    accumulator = jax.tree.map(lambda c: jnp.full(c.shape, 1e-4, jnp.bfloat16), compute)
    run = run.replace(weights=run.weights.replace(accumulator=accumulator))
    grads = jax.tree.map(lambda c: (0.01 * jax.random.normal(jax.random.key(4), c.shape)).astype(c.dtype), compute)
    packed = jax.jit(lambda r: learning_step(packed_agent, r, grads, jax.random.key(5)))(run)
    master = master_params(STATIC, run)
    clip_state, rms_state = float32_agent.optimiser.init(master)
    opt_state = (clip_state, rms_state._replace(nu=jax.tree.map(lambda n: n.astype(jnp.float32), accumulator)))
    float32_run = run.replace(weights=ComputeCopyStored(params=master, opt_state=opt_state, compute=compute))
    expected = jax.jit(lambda r: learning_step(float32_agent, r, grads, jax.random.key(5)))(float32_run)
    for got, want, before in zip(jax.tree.leaves(master_params(STATIC, packed)),
                                 jax.tree.leaves(float32_agent.weights.master(expected)), jax.tree.leaves(master)):
        np.testing.assert_allclose(got, want, rtol=2**-15, atol=0)
        assert not np.array_equal(np.asarray(want), np.asarray(before))  # the step moved every leaf


def test_packed_resume_is_bit_identical_and_the_api_unpacks(straight, tmp_path):
    reference, _ = straight
    out = tmp_path / "stopped, \"twice\" ✓"
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, stop_after_chunks=2, verbose=False)
    assert (out / CHECKPOINT_FILE).exists()
    run_experiment(EXPERIMENT, out, progress=False, checkpoint_seconds=0, verbose=False)
    assert (out / METRICS_FILE).read_bytes() == (reference / METRICS_FILE).read_bytes()
    kernel = read_final_state(out, "plain").params["params"]["Dense_0"]["kernel"]  # unpacked by the API
    reference_state = read_final_state(reference, "plain").state
    np.testing.assert_array_equal(kernel, master_params(STATIC, reference_state)["params"]["Dense_0"]["kernel"])
    assert kernel.dtype == np.float32
