"""Mixed precision (``StaticConfig.precision = "bfloat16"``): what is stored in which precision, that the
networks agree with float32, and that OPIQ still learns the short chain. One compiled program serves the module."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import make_train
from opiq_jax.agent.weights import weight_storage
from opiq_jax.benchmark.throughput import work_model
from opiq_jax.common.config import stack_hparams
from opiq_jax.primitives.networks import init_params, make_bootstrapped_network, make_network
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import program_parts
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec
from tests.training import train_chunks

CHAIN = 20  # as tests/test_trainer.py: a random walk almost never reaches the right end
SEEDS = 12
STATIC = static_for_env("chain", chain_length=CHAIN, total_steps=2000, log_every=1000, buffer_size=2000,
                        hidden=(64, 64), precision="bfloat16", parts=program_parts(["opiq"]))
STORAGE = weight_storage(STATIC)  # the float32 master weights and their bfloat16 copy


@pytest.fixture(scope="module")
def trained():
    return train_chunks(Experiment(STATIC, tuple(RunSpec("opiq", "paper", s, method_hparams("chain", "opiq"))
                                                 for s in range(SEEDS))))


def test_opiq_in_mixed_precision_reaches_the_end_of_the_short_chain(trained):
    _, _, history = trained
    reached = history[-1]["states_visited"] == CHAIN
    assert reached.sum() >= 10, f"OPIQ in bfloat16 reached the right end in only {reached.sum()} of {SEEDS} seeds"
    assert np.nanmedian(history[-1]["max_return"]) == pytest.approx(11.0)
    assert np.all(np.isfinite(history[-1]["loss"]))


def test_master_weights_and_optimiser_stay_float32_and_the_copies_follow_them(trained):
    initial, state, _ = trained
    runs = state.runs

    def dtypes(tree):
        return {x.dtype for x in jax.tree.leaves(tree)}

    master, copy = STORAGE.master(runs), STORAGE.forward(runs)
    assert dtypes(master) == {np.dtype(np.float32)}
    assert dtypes(STORAGE.optimiser_state(runs)) <= {np.dtype(np.float32), np.dtype(np.int32)}
    for copies in (copy, runs.target_params):  # hidden layers in bfloat16, the output layer float32
        assert dtypes(copies["params"]["head"]) == {np.dtype(np.float32)}
        assert dtypes({k: v for k, v in copies["params"].items() if k != "head"}) == {np.dtype(jnp.bfloat16)}
    # the copy the forward passes read is the float32 weights after the last update, rounded
    for master_leaf, copy_leaf in zip(jax.tree.leaves(master), jax.tree.leaves(copy)):
        np.testing.assert_array_equal(np.asarray(master_leaf.astype(copy_leaf.dtype)), np.asarray(copy_leaf))
    # and training moved the weights by more than bfloat16's rounding
    start = STORAGE.master(initial.runs)
    moved = [np.max(np.abs(a - b)) for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(master))]
    assert min(moved) > 1e-2


@pytest.mark.parametrize("name, obs_shape", [("mlp", (100,)), ("maze_conv", (24, 24, 1))])
def test_bfloat16_networks_agree_with_float32_and_output_float32(name, obs_shape):
    obs = jax.random.uniform(jax.random.key(0), (8,) + obs_shape)
    full = make_network(name, 4)
    half = make_network(name, 4, dtype=jnp.bfloat16)
    params = jax.jit(lambda key: init_params(full, key, obs[0], jnp.float32(0.3)))(jax.random.key(1))  # compiled
    assert jax.tree.structure(params) == jax.tree.structure(  # (whole, not op by op)
        jax.eval_shape(lambda key: init_params(half, key, obs[0], jnp.float32(0.3)), jax.random.key(1)))
    q = jax.jit(full.apply)(params, obs)
    q_half = jax.jit(half.apply)(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params), obs)
    assert q_half.dtype == jnp.float32  # the output layer computes in float32
    np.testing.assert_allclose(q_half, q, atol=0.05 * float(jnp.max(jnp.abs(q))))
    assert not np.array_equal(np.asarray(q_half), np.asarray(q))  # the hidden layers did run in bfloat16


def test_bootstrapped_network_in_bfloat16():
    obs = jnp.ones((3, 100))
    net = make_bootstrapped_network("mlp", 2, 3, (32, 32), dtype=jnp.bfloat16)
    params = jax.jit(net.init)(jax.random.key(0), obs)  # each compiled whole, not op by op
    out = jax.jit(net.apply)(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params), obs)
    assert out.shape == (3, 3, 2) and out.dtype == jnp.float32


def test_precision_is_validated():
    with pytest.raises(ValueError, match="^precision must be one of float32, bfloat16"):
        static_for_env("chain", precision="float16")
    # one trainer for every environment: Montezuma's Nature network takes mixed precision like the others
    static = static_for_env("montezuma", precision="bfloat16", buffer_size=64, batch_size=8, log_every=8,
                            total_steps=8, target_update=8, train_every=4)
    experiment = Experiment(static, (RunSpec("opiq", "p", 0, method_hparams("montezuma", "opiq")),))
    from opiq_jax.runs.memory import state_bytes_per_run

    assert state_bytes_per_run(experiment.static) > 64 * 84 * 84


def test_work_model_counts_the_halved_passes():
    full = work_model(static_for_env("chain"))
    half = work_model(static_for_env("chain", precision="bfloat16"))
    assert half.bytes["acting params"] == full.bytes["acting params"] / 2
    assert half.bytes["gradients"] == full.bytes["gradients"] / 2
    assert half.bytes["optimiser"] == full.bytes["optimiser"]  # RMSProp's statistics stay float32
    # forward and backward read the copy (2 x 1/2), the update reads and writes the master (2) and writes the copy (1/2)
    assert half.bytes["update params"] == pytest.approx(full.bytes["update params"] * 3.5 / 4)


@pytest.mark.parametrize("method", ["bsp", "dqn_dora", "dqn_rnd"])
def test_only_the_q_network_goes_to_bfloat16(method):
    """BSP's prior, DORA's E-network and RND's networks keep float32 weights and no bfloat16 copy (they compute
    in bfloat16 from them: the next test); BSP's heads keep float32 output layers."""
    static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200, hidden=(16, 16),
                            precision="bfloat16", bsp_heads=3)
    experiment = Experiment(static, (RunSpec(method, "p", 0, method_hparams("chain", method)),))
    keys = jax.random.split(jax.random.key(0), 1)
    state = jax.eval_shape(make_train(experiment.static).init, keys, keys, stack_hparams(experiment.hparams()))
    runs, storage = state.runs, weight_storage(static)
    copy = storage.forward(runs)

    def dtypes(tree):
        return {x.dtype for x in jax.tree.leaves(tree)}

    f32, bf16 = np.dtype(np.float32), np.dtype(jnp.bfloat16)
    assert dtypes(storage.master(runs)) == {f32}
    assert bf16 in dtypes(copy) and bf16 in dtypes(runs.target_params)
    if method == "bsp":
        assert dtypes(runs.parts["bsp"]) == {f32}
        assert dtypes(copy["params"]["heads"]["head"]) == {f32}
        assert dtypes(copy["params"]["torso"]) == {bf16}
    if method == "dqn_dora":
        assert dtypes(runs.parts["dora"].params) == {f32}
    if method == "dqn_rnd":
        assert dtypes(runs.parts["rnd"].params) == {f32} and dtypes(runs.parts["rnd"].target_params) == {f32}


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_parts_networks_compute_in_the_programs_precision(precision):
    """DORA's E-network and RND's networks compute their hidden layers as the Q-network does (bfloat16 under mixed
    precision, from their float32 weights); their outputs, like Q's, are float32."""
    static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200, hidden=(16, 16),
                            precision=precision)
    agent = make_train(static).agent
    network, obs = agent.make_network(3), jnp.ones((2, 8))
    params = network.init(jax.random.key(0), obs)
    assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(np.float32)}
    assert network.apply(params, obs).dtype == np.float32
    hidden_in_bf16 = "bf16[2,16]" in str(jax.make_jaxpr(network.apply)(params, obs))
    assert hidden_in_bf16 == (precision == "bfloat16")


def test_the_forward_passes_read_the_copy_not_the_master(trained):
    """Zeroing the bfloat16 copy (the float32 weights untouched) must change what a chunk computes."""
    _, state, _ = trained
    _, _, train_chunk = compiled_trainer(STATIC)
    # two of the trained runs (runs are independent): a chunk of two costs far less than one of all twelve
    state = state.replace(runs=jax.tree.map(lambda x: x[:2], state.runs))
    zeros = jax.tree.map(jnp.zeros_like, STORAGE.forward(state.runs))
    zeroed = state.replace(runs=state.runs.replace(weights=state.runs.weights.replace(compute=zeros)))
    _, metrics = train_chunk(jax.tree.map(jnp.copy, state))  # train_chunk donates its argument
    _, metrics_zeroed = train_chunk(jax.tree.map(jnp.copy, zeroed))
    assert not np.allclose(np.asarray(metrics["q_start"]), np.asarray(metrics_zeroed["q_start"]))
    assert not np.allclose(np.asarray(metrics["loss"]), np.asarray(metrics_zeroed["loss"]))
