"""The small pure pieces of the agent against numbers worked by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
import pytest

from opiq_jax.agent.trainer import linear_epsilon, make_optimiser
from opiq_jax.common.config import StaticConfig
from opiq_jax.parts.optimism import optimism_bonus
from opiq_jax.parts.pseudocounts import intrinsic_reward
from opiq_jax.primitives import networks, replay
from opiq_jax.primitives.targets import bootstrap_value, mixed_monte_carlo, n_step_return, td_loss, window_mask

# ---------------------------------------------------------------------------------- optimism


def test_optimism_bonus_by_hand():
    counts = jnp.array([0, 1, 3, 8])
    np.testing.assert_allclose(optimism_bonus(counts, 10.0, 2.0), [10.0, 2.5, 10 / 16, 10 / 81], rtol=1e-6)
    np.testing.assert_allclose(optimism_bonus(counts, 1.0, 0.5), [1.0, 1 / np.sqrt(2), 0.5, 1 / 3], rtol=1e-6)


def test_intrinsic_reward_by_hand():
    np.testing.assert_allclose(intrinsic_reward(jnp.array([1, 4, 100]), 0.1), [0.1, 0.05, 0.01], rtol=1e-6)
    # a zero count (only for masked samples) is read as one: no division by zero
    np.testing.assert_allclose(intrinsic_reward(jnp.array([0]), 0.1), [0.1], rtol=1e-6)


def test_linear_epsilon():
    assert float(linear_epsilon(0, 1.0, 0.01, 100)) == pytest.approx(1.0)
    assert float(linear_epsilon(50, 1.0, 0.01, 100)) == pytest.approx(0.505)
    assert float(linear_epsilon(100, 1.0, 0.01, 100)) == pytest.approx(0.01)
    assert float(linear_epsilon(10_000, 1.0, 0.01, 100)) == pytest.approx(0.01)
    assert float(linear_epsilon(0, 0.5, 0.01, 0)) == pytest.approx(0.01)  # no decay: fixed end value


# ---------------------------------------------------------------------------------- targets


def test_window_mask_stops_after_episode_end_and_missing_steps():
    done = jnp.array([[False, False, False], [False, True, False], [True, False, False], [False, False, False]])
    exists = jnp.array([[True, True, True], [True, True, True], [True, True, True], [True, True, False]])
    np.testing.assert_array_equal(
        window_mask(done, exists),
        [[True, True, True], [True, True, False], [True, False, False], [True, True, False]],
    )


def test_n_step_return_full_window():
    # 3 steps, no episode end: r0 + g r1 + g^2 r2, bootstrap g^3 from step 2's next state
    g = 0.9
    partial, discount, last = n_step_return(jnp.array([1.0, 2.0, 3.0]), jnp.zeros(3, bool), jnp.ones(3, bool), g)
    assert float(partial) == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)
    assert float(discount) == pytest.approx(0.729)
    assert int(last) == 2


def test_n_step_return_stops_at_terminal_without_bootstrap():
    rewards = jnp.array([1.0, 10.0, 5.0])
    terminated = jnp.array([False, True, False])
    included = window_mask(terminated, jnp.ones(3, bool))
    partial, discount, last = n_step_return(rewards, terminated, included, 0.5)
    assert float(partial) == pytest.approx(1 + 0.5 * 10)
    assert float(discount) == 0.0
    assert int(last) == 1


def test_n_step_return_bootstraps_through_truncation():
    rewards = jnp.array([1.0, 2.0, 7.0])
    done = jnp.array([True, False, False])  # truncated (time limit) on the first step
    partial, discount, last = n_step_return(rewards, jnp.zeros(3, bool), window_mask(done, jnp.ones(3, bool)), 0.5)
    assert float(partial) == pytest.approx(1.0)
    assert float(discount) == pytest.approx(0.5)  # bootstrap from the pre-reset next state of step 0
    assert int(last) == 0


def test_q_plus_target_by_hand():
    """y = r + beta/sqrt(N(s,a)) + gamma * max_a' [Q-(s', a') + C_b / (N(s', a') + 1)^M]"""
    r, beta, n_sa, gamma = 0.0, 0.1, 4, 0.99
    q_next = jnp.array([[1.0, 0.5]])
    n_next = jnp.array([[3, 0]])
    bonus = optimism_bonus(n_next, 1.0, 2.0)  # [1/16, 1]
    value = bootstrap_value(q_next, bonus)
    assert float(value[0]) == pytest.approx(1.5)  # the unvisited action wins through its bonus
    partial, discount, _ = n_step_return(jnp.array([r + float(intrinsic_reward(jnp.array(n_sa), beta))]),
                                         jnp.zeros(1, bool), jnp.ones(1, bool), gamma)
    assert float(partial + discount * value[0]) == pytest.approx(0.05 + 0.99 * 1.5)


def test_mixed_monte_carlo_by_hand():
    assert float(mixed_monte_carlo(jnp.float32(2.0), jnp.float32(10.0), 0.01)) == pytest.approx(0.99 * 2 + 0.1)
    assert float(mixed_monte_carlo(jnp.float32(2.0), jnp.float32(0.0), 0.01)) == pytest.approx(1.98)


def test_td_loss_is_mean_squared_error():
    assert float(td_loss(jnp.array([1.0, 2.0]), jnp.array([0.0, 4.0]))) == pytest.approx((1 + 4) / 2)
    grad = jax.grad(lambda q: td_loss(q, q * 3))(jnp.array([1.0]))  # target is not differentiated
    assert float(grad[0]) == pytest.approx(2 * (1 - 3))


# ---------------------------------------------------------------------------------- replay


def test_replay_ring_overwrites_oldest_and_windows_follow_insertion_order():
    buf = replay.init({"x": jnp.int32(0)}, capacity=4)
    for i in range(6):  # 0..5: slots hold 4, 5, 2, 3
        buf = replay.add(buf, {"x": jnp.int32(i)})
    assert int(buf.size) == 4 and int(buf.position) == 2
    items, exists = replay.sample_windows(buf, jax.random.key(0), 256, 3)
    x, exists = np.asarray(items["x"]), np.asarray(exists)
    assert set(x[:, 0]) == {2, 3, 4, 5}  # uniform over the stored items
    for row, ok in zip(x, exists):
        n_ok = int(ok.sum())
        np.testing.assert_array_equal(row[:n_ok], np.arange(row[0], row[0] + n_ok))
        assert n_ok == min(3, 6 - row[0])  # cut at the newest item


def test_replay_partial_buffer_samples_only_stored():
    buf = replay.init({"x": jnp.float32(0)}, capacity=10)
    for i in range(3):
        buf = replay.add(buf, {"x": jnp.float32(i + 1)})
    items, _ = replay.sample_windows(buf, jax.random.key(1), 100, 1)
    assert set(np.asarray(items["x"])[:, 0].tolist()) == {1.0, 2.0, 3.0}


# ---------------------------------------------------------------------------------- networks


@pytest.mark.parametrize(
    "name,obs_shape", [("mlp", (100,)), ("maze_conv", (24, 24, 1)), ("nature", (84, 84, 4))]
)
def test_network_shapes_and_final_bias(name, obs_shape):
    net = networks.make_network(name, 4)
    # jitted: op by op, the Nature torso's 64-slice patch matrix alone compiles for seconds on a CPU
    params = jax.jit(lambda key: networks.init_params(net, key, jnp.zeros(obs_shape), 3.0))(jax.random.key(0))
    np.testing.assert_array_equal(params["params"]["head"]["bias"], 3.0)
    out = jax.jit(net.apply)(params, jnp.zeros((2, *obs_shape)))
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out, 3.0)  # zero input: only the biases speak (hidden biases start at 0)


@pytest.mark.parametrize("kernel,stride,shape", [((3, 3), (2, 2), (2, 24, 24, 1)), ((4, 4), (2, 2), (1, 20, 20, 3))])
def test_patch_conv_equals_flax_conv(kernel, stride, shape):
    x = jax.random.normal(jax.random.key(1), shape)
    conv = networks.PatchConv(5, kernel, stride)
    params = conv.init(jax.random.key(2), x)
    reference = nn.Conv(5, kernel, strides=stride, padding="VALID").apply(params, x)
    np.testing.assert_allclose(conv.apply(params, x), reference, rtol=1e-5, atol=1e-5)


def test_maze_conv_layer_sizes():
    net = networks.make_network("maze_conv", 4)
    params = networks.init_params(net, jax.random.key(0), jnp.zeros((24, 24, 1)), 0.0)
    shapes = jax.tree.map(lambda x: x.shape, params["params"])
    assert shapes["PatchConv_0"]["kernel"] == (3, 3, 1, 16)
    assert shapes["Dense_0"]["kernel"] == (5 * 5 * 16, 400)  # 24 -> 11 -> 5 without padding
    assert shapes["Dense_1"]["kernel"] == (400, 200)
    assert shapes["head"]["kernel"] == (200, 4)


def test_bias_sets_only_the_final_layer():
    net = networks.make_network("mlp", 2)
    plain = networks.init_params(net, jax.random.key(0), jnp.zeros(10), 0.0)
    biased = networks.init_params(net, jax.random.key(0), jnp.zeros(10), 1.0)
    diff = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), plain, biased)
    changed = [jax.tree_util.keystr(path) for path, d in jax.tree_util.tree_leaves_with_path(diff) if d]
    assert changed == ["['params']['head']['bias']"]


@pytest.mark.parametrize("bootstrapped", [False, True])
def test_head_scale_multiplies_only_the_output_weights(bootstrapped):
    net = (networks.make_bootstrapped_network("mlp", 3, 2) if bootstrapped else networks.make_network("mlp", 3))
    plain = networks.init_params(net, jax.random.key(0), jnp.zeros(10), 0.5)
    scaled = networks.init_params(net, jax.random.key(0), jnp.zeros(10), 0.5, head_scale=0.1)
    head = (lambda p: p["params"]["heads"]["head"]) if bootstrapped else (lambda p: p["params"]["head"])
    np.testing.assert_allclose(head(scaled)["kernel"], 0.1 * head(plain)["kernel"], rtol=1e-6)
    np.testing.assert_array_equal(head(scaled)["bias"], jnp.full_like(head(plain)["bias"], 0.5))
    kept = networks.scale_output_weights(networks.set_final_bias(plain, 2.0), 0.1)  # a bias that is not 0: kept
    np.testing.assert_array_equal(head(kept)["bias"], jnp.full_like(head(plain)["bias"], 2.0))
    diff = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), plain, scaled)
    changed = [jax.tree_util.keystr(path) for path, d in jax.tree_util.tree_leaves_with_path(diff) if d]
    assert changed == [("['params']['heads']['head']['kernel']" if bootstrapped else "['params']['head']['kernel']")]


# ---------------------------------------------------------------------------------- optimiser


def test_optimiser_is_pytorch_rmsprop_with_clipping():
    """PyTorch RMSprop: v = a v + (1 - a) g^2; p -= lr g / (sqrt(v) + eps); after a global-norm clip at 5."""
    opt = make_optimiser(StaticConfig())
    params = {"w": jnp.array([0.0, 0.0])}
    state = opt.init(params)
    g = jnp.array([30.0, 40.0])  # norm 50 -> clipped to norm 5: [3, 4]
    updates, state = opt.update({"w": g}, state, params)
    clipped = np.array([3.0, 4.0])
    v = 0.01 * clipped**2
    np.testing.assert_allclose(updates["w"], clipped / (np.sqrt(v) + 1e-8), rtol=1e-5)
    updates, state = opt.update({"w": jnp.array([1.0, 0.0])}, state, params)  # small: no clipping
    v = 0.99 * v + 0.01 * np.array([1.0, 0.0]) ** 2
    np.testing.assert_allclose(updates["w"], np.array([1.0, 0.0]) / (np.sqrt(v) + 1e-8), rtol=1e-5)
    assert isinstance(opt, optax.GradientTransformation)
