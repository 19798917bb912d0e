"""opiq_jax/kernels/maze_torso.py: the Pallas kernels of the maze network's convolutions (here in Pallas's
interpreter) compute what XLA's form computes, in values and weight gradients, and the trainer uses them."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import uses_pallas_torso
from opiq_jax.kernels.maze_torso import maze_torso
from opiq_jax.primitives.networks import MazeConv, PatchConv
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.runs.experiment import Experiment, RunSpec
from tests.training import train_chunks


def xla_torso(obs, k1, b1, k2, b2):
    """The trainer's XLA form: two ``PatchConv`` layers with their ReLUs."""
    conv = PatchConv(16, (3, 3), (2, 2), k1.dtype)
    x = nn.relu(conv.apply({"params": {"kernel": k1, "bias": b1}}, obs.astype(k1.dtype)))
    return nn.relu(conv.apply({"params": {"kernel": k2, "bias": b2}}, x))


def weights(key, runs: int, dtype=jnp.float32):
    """Per-run kernels (as MazeConv initialises them) and non-zero biases."""
    def one(k):
        p = MazeConv(4).init(k, jnp.zeros((1, 24, 24, 1)))["params"]
        kb1, kb2 = jax.random.split(k)
        return (p["PatchConv_0"]["kernel"], 0.1 * jax.random.normal(kb1, (16,)),
                p["PatchConv_1"]["kernel"], 0.1 * jax.random.normal(kb2, (16,)))
    return tuple(w.astype(dtype) for w in jax.jit(jax.vmap(one))(jax.random.split(key, runs)))  # compiled whole


def maze_like_obs(key, shape):
    """Observations with the maze's values (0, 1/3, 2/3, 1)."""
    return jax.random.randint(key, shape + (24, 24, 1), 0, 4).astype(jnp.float32) / 3


def gradients(torso, obs, params, cotangent):
    def loss(o, k1, b1, k2, b2, c):
        return jnp.sum(torso(o, k1, b1, k2, b2).astype(jnp.float32) * c)

    return jax.jit(jax.vmap(jax.grad(loss, argnums=(1, 2, 3, 4))))(obs, *params, cotangent)


@pytest.mark.parametrize("batch", [32, 6])  # 2 programs of 16 samples per run, 4 per loop step; 2 programs of 3
def test_kernels_compute_xlas_torso_and_its_weight_gradients_under_vmap(batch):
    params = weights(jax.random.key(0), runs=2)
    obs = maze_like_obs(jax.random.key(1), (2, batch))
    y = jax.jit(jax.vmap(maze_torso))(obs, *params)
    assert y.shape == (2, batch, 5, 5, 16)
    np.testing.assert_allclose(y, jax.jit(jax.vmap(xla_torso))(obs, *params), rtol=1e-5, atol=1e-6)
    cotangent = jax.random.normal(jax.random.key(2), y.shape)
    for got, want in zip(gradients(maze_torso, obs, params, cotangent), gradients(xla_torso, obs, params, cotangent)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(want))))


def test_bfloat16_kernels_round_as_xla_does():
    params = weights(jax.random.key(3), runs=1, dtype=jnp.bfloat16)
    obs = maze_like_obs(jax.random.key(4), (1, 16))
    y = jax.jit(jax.vmap(maze_torso))(obs, *params)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y, np.float32),
                               np.asarray(jax.jit(jax.vmap(xla_torso))(obs, *params), np.float32), atol=1e-2)
    # the gradients are at least as close to the float32 computation on the same (rounded) inputs as XLA's
    cotangent = jax.random.normal(jax.random.key(5), y.shape)
    exact = gradients(xla_torso, obs, tuple(p.astype(jnp.float32) for p in params), cotangent)
    for name, got, xla, want in zip(("k1", "b1", "k2", "b2"), gradients(maze_torso, obs, params, cotangent),
                                    gradients(xla_torso, obs, params, cotangent), exact):
        assert got.dtype == jnp.bfloat16
        want = np.asarray(want)  # in numpy: op by op in JAX, each operation would compile on its own

        def error(g):
            return float(np.max(np.abs(np.asarray(g, np.float32) - want)) / np.max(np.abs(want)))

        assert error(got) <= max(1.1 * error(xla), 0.02), name


def test_maze_network_with_the_kernels_has_the_same_parameters_and_outputs():
    obs = maze_like_obs(jax.random.key(6), (5,))
    fused, plain = MazeConv(4, pallas_torso=True), MazeConv(4)
    params = jax.jit(plain.init)(jax.random.key(7), obs)  # each compiled whole, not op by op
    fused_params = jax.jit(fused.init)(jax.random.key(7), obs)
    assert jax.tree.structure(fused_params) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(fused_params), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(jax.jit(fused.apply)(params, obs), jax.jit(plain.apply)(params, obs), rtol=1e-5,
                               atol=1e-6)


def test_bad_shapes_are_refused():
    k1, b1, k2, b2 = (w[0] for w in weights(jax.random.key(8), runs=1))
    with pytest.raises(AssertionError):
        maze_torso(jnp.zeros((2, 20, 20, 1)), k1, b1, k2, b2)
    with pytest.raises(AssertionError):
        maze_torso(jnp.zeros((2, 24, 24, 1)), k1, b1, k2[..., :8], b2)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="asserts what auto chooses on a CPU")
def test_auto_keeps_xla_on_a_cpu_even_in_bfloat16():
    assert not uses_pallas_torso(static_for_env("maze", precision="bfloat16"), "maze_conv")  # auto: GPUs only


def test_which_runs_use_the_kernels():
    def maze(**kw):
        return static_for_env("maze", **kw)

    assert uses_pallas_torso(maze(maze_torso="pallas"), "maze_conv")
    assert not uses_pallas_torso(maze(maze_torso="xla", precision="bfloat16"), "maze_conv")
    assert not uses_pallas_torso(static_for_env("chain", maze_torso="pallas"), "mlp")
    with pytest.raises(ValueError, match="^maze_torso must be one of auto, xla, pallas"):
        maze(maze_torso="triton")


def test_trainer_with_the_kernels_follows_the_xla_trainer():
    def train(torso):
        # 60 steps: acting on 1, and training on 16 at every step once the replay holds more than a batch
        static = static_for_env("maze", total_steps=60, log_every=60, buffer_size=500, batch_size=16,
                                precision="bfloat16", count_features="exact", maze_torso=torso)
        runs = tuple(RunSpec("opiq", "paper", s, method_hparams("maze", "opiq")) for s in range(2))
        return train_chunks(Experiment(static, runs))[2][-1]

    fused, plain = train("pallas"), train("xla")
    np.testing.assert_array_equal(fused["states_visited"], plain["states_visited"])
    np.testing.assert_allclose(fused["loss"], plain["loss"], rtol=0.05)
    assert np.all(np.isfinite(fused["loss"])) and np.all(fused["loss"] > 0)
