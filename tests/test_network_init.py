"""``--network-init pytorch``: every layer of every network drawn as PyTorch's default for ``Linear`` and ``Conv2d``
(the authors' networks keep it), weights and biases uniform in ±1/sqrt(fan_in), fan_in counting a kernel's area.

The fan-ins below are written out by hand from the architectures (the paper's appendix and the Nature network), not
computed by the code under test."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.weights import master_params
from opiq_jax.common.config import stack_hparams
from opiq_jax.parts.rnd import RndPredictor, RndTarget
from opiq_jax.primitives import networks
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams, program_parts
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for

CHAIN_FAN_IN = {"Dense_0": 100, "Dense_1": 256, "head": 256}
MAZE_FAN_IN = {"PatchConv_0": 3 * 3 * 1, "PatchConv_1": 3 * 3 * 16, "Dense_0": 5 * 5 * 16, "Dense_1": 400,
               "head": 200}
NATURE_FAN_IN = {"PatchConv_0": 8 * 8 * 4, "PatchConv_1": 4 * 4 * 32, "PatchConv_2": 3 * 3 * 64,
                 "Dense_0": 7 * 7 * 64, "head": 512}
CHAIN_OBS = jnp.ones((1, 100))
MAZE_OBS = jnp.full((1, 24, 24, 1), 1 / 3)
FRAMES = jnp.zeros((1, 84, 84, 4), jnp.uint8)


def layers(params, prefix=()):
    """``{path: layer}`` for every dict holding a ``kernel`` in a parameter tree."""
    if "kernel" in params:
        return {prefix: params}
    return {k: v for name, sub in params.items() for k, v in layers(sub, prefix + (name,)).items()}


def check_uniform(values: np.ndarray, bound: float, where: str):
    """Inside ±bound; for tensors big enough to say, reaching near the bound with the mean and variance of
    U(-bound, bound) within four standard errors (a fixed key: the same numbers every run)."""
    values = np.asarray(values, np.float64).ravel()
    assert np.abs(values).max() <= bound * (1 + 1e-6), where
    if values.size < 1000:
        return
    n = values.size
    assert np.abs(values).max() > 0.99 * bound, where
    assert abs(values.mean()) < 4 * bound / math.sqrt(3 * n), where
    # the sample variance of U(-b, b) has a relative standard deviation of sqrt(0.8 / n)
    assert abs(values.var() / (bound ** 2 / 3) - 1) < 4 * math.sqrt(0.8 / n), where


def check_pytorch_layers(params, fan_ins: dict, stacked: int = 0):
    """Every layer of ``params`` named in ``fan_ins`` (by its last name) drawn as PyTorch's default."""
    found = layers(params)
    assert {path[-1] for path in found} == set(fan_ins)
    for path, layer in found.items():
        bound = 1 / math.sqrt(fan_ins[path[-1]])
        check_uniform(layer["kernel"], bound, f"{path} kernel")
        check_uniform(layer["bias"], bound, f"{path} bias")
        assert layer["bias"].shape[:stacked] == layer["kernel"].shape[:stacked]


@pytest.mark.parametrize("name, obs, outputs, fan_ins", [
    ("mlp", CHAIN_OBS, 2, CHAIN_FAN_IN), ("maze_conv", MAZE_OBS, 4, MAZE_FAN_IN),
    ("nature", FRAMES, 18, NATURE_FAN_IN)])
def test_each_layer_is_uniform_in_one_over_root_fan_in(name, obs, outputs, fan_ins):
    network = networks.make_network(name, outputs)
    params = networks.init_variables(network, jax.random.key(3), obs, "pytorch")["params"]
    check_pytorch_layers(params, fan_ins)


def test_bsp_heads_are_drawn_apart_with_their_own_fan_in():
    """BSP's K heads are stacked on a leading axis: the fan-in is one head's, and no two heads start alike."""
    network = networks.make_bootstrapped_network("maze_conv", 4, num_heads=10)
    params = networks.init_variables(network, jax.random.key(0), MAZE_OBS, "pytorch")["params"]
    check_pytorch_layers(params["torso"], {"PatchConv_0": 9, "PatchConv_1": 144})
    check_pytorch_layers(params["heads"], {"Dense_0": 400, "Dense_1": 400, "head": 200}, stacked=1)
    kernels = np.asarray(params["heads"]["head"]["kernel"])
    assert kernels.shape == (10, 200, 4) and not np.allclose(kernels[0], kernels[1])


def test_rnd_networks_are_drawn_as_pytorch():
    for network, fan_ins in [(RndTarget(16), {"PatchConv_0": 8 * 8 * 1, "PatchConv_1": 4 * 4 * 32,
                                              "PatchConv_2": 3 * 3 * 64, "Dense_0": 7 * 7 * 64}),
                             (RndPredictor(16), {"PatchConv_0": 8 * 8 * 1, "PatchConv_1": 4 * 4 * 32,
                                                 "PatchConv_2": 3 * 3 * 64, "Dense_0": 7 * 7 * 64, "Dense_1": 512,
                                                 "Dense_2": 512})]:
        params = networks.init_variables(network, jax.random.key(1), jnp.zeros((1, 84, 84, 1), jnp.uint8),
                                         "pytorch")["params"]
        check_pytorch_layers(params, fan_ins)


def test_flax_is_flax_own_init_and_unknown_names_are_refused():
    network = networks.make_network("maze_conv", 4)
    same = networks.init_variables(network, jax.random.key(5), MAZE_OBS, "flax")
    jax.tree.map(np.testing.assert_array_equal, same, network.init(jax.random.key(5), MAZE_OBS))
    with pytest.raises(ValueError, match="unknown initialisation 'torch'"):
        networks.init_variables(network, jax.random.key(5), MAZE_OBS, "torch")


def test_output_bias_is_kept_unless_dqn_bias_sets_it():
    """The authors fill the output bias only when ``final_layer_bias`` is given (DQN Bias): a final bias of 0
    keeps PyTorch's draw, any other value fills it."""
    network = networks.make_network("mlp", 2)
    kept = networks.init_params(network, jax.random.key(0), CHAIN_OBS[0], jnp.float32(0.0), initialisation="pytorch")
    filled = networks.init_params(network, jax.random.key(0), CHAIN_OBS[0], jnp.float32(1.0), initialisation="pytorch")
    bias = np.asarray(kept["params"]["head"]["bias"])
    assert np.all(bias != 0) and np.all(np.abs(bias) <= 1 / 16)
    np.testing.assert_array_equal(filled["params"]["head"]["bias"], [1.0, 1.0])
    np.testing.assert_array_equal(filled["params"]["head"]["kernel"], kept["params"]["head"]["kernel"])


SMALL_CHAIN_FAN_IN = {**CHAIN_FAN_IN, "Dense_0": 8}  # the chain of 8 states below: thermometer codes of 8


def initial_runs(method: str, **options):
    """``(static, runs)``: the configuration and initial state of one run of ``method`` on a chain of 8 states, built
    by the trainer."""
    static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200,
                            parts=program_parts([method]), **options)
    experiment = Experiment(static, (RunSpec(method, "paper", 0, method_hparams("chain", method)),))
    return static, compiled_trainer(static)[1](*run_keys_for(experiment), stack_hparams(experiment.hparams())).runs


def first_run(tree):
    return jax.tree.map(lambda x: x[0], tree)


@pytest.mark.parametrize("method, part_networks", [("dqn_rnd", ("params", "target_params")), ("bsp", None)])
def test_the_trainer_draws_every_network_of_a_program_so(method, part_networks):
    """Through the trainer: the Q-network, its target copy, RND's two networks and BSP's prior all start
    as PyTorch's default under ``network_init="pytorch"``."""
    static, runs = initial_runs(method, network_init="pytorch")
    q = first_run(master_params(static, runs))["params"]
    if method == "bsp":
        check_pytorch_layers(q["torso"], {"Dense_0": 8})
        check_pytorch_layers(q["heads"], {"Dense_0": 256, "head": 256}, stacked=1)
        prior = first_run(runs.parts["bsp"])["params"]
        check_pytorch_layers(prior["heads"], {"Dense_0": 256, "head": 256}, stacked=1)
        assert not np.allclose(prior["heads"]["head"]["kernel"], q["heads"]["head"]["kernel"])
        return
    check_pytorch_layers(q, SMALL_CHAIN_FAN_IN)
    jax.tree.map(np.testing.assert_array_equal, first_run(runs.target_params)["params"], q)
    for field in part_networks:
        rnd = getattr(runs.parts["rnd"], field)
        check_pytorch_layers(first_run(rnd)["params"], SMALL_CHAIN_FAN_IN)


def test_dora_e_network_keeps_its_zero_output_layer():
    _, runs = initial_runs("dqn_dora", network_init="pytorch")
    e_network = first_run(runs.parts["dora"].params)["params"]
    check_pytorch_layers({k: v for k, v in e_network.items() if k != "head"}, {"Dense_0": 8, "Dense_1": 256})
    assert not np.any(e_network["head"]["kernel"]) and not np.any(e_network["head"]["bias"])
