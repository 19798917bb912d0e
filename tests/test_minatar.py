"""The MinAtar games through ``--env minatar:NAME`` (gymnax's, ``envs/minatar.py``): step for step gymnax's own, with
Young and Tian's network and settings; every method trains a few hundred steps; a game gymnax lacks is one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.cli import main
from opiq_jax.registry.environments import static_for_env
from tests.suite_runs import EVERY_METHOD, random_actions, train_methods



def test_minatar_is_gymnaxs_game_step_for_step():
    import gymnax

    from opiq_jax.envs.minatar import make_minatar

    adapter = make_minatar("Breakout")
    env, params = gymnax.make("Breakout-MinAtar")
    obs_a, state_a = adapter.reset(jax.random.key(3))
    obs_g, state_g = env.reset(jax.random.key(3), params)
    step_a, step_g = jax.jit(adapter.step), jax.jit(env.step)
    for t, action in enumerate(random_actions(jax.random.key(4), 300, adapter.num_actions)):
        key = jax.random.key(100 + t)
        obs_a, state_a, reward_a, terminated_a, truncated_a, _ = step_a(key, state_a, action)
        obs_g, state_g, reward_g, terminated_g, truncated_g, _ = step_g(key, state_g, action, params)
        np.testing.assert_array_equal(np.asarray(obs_a), np.asarray(obs_g, np.float32))
        assert (float(reward_a), bool(terminated_a), bool(truncated_a)) == (
            float(reward_g), bool(terminated_g), bool(truncated_g))


def test_minatar_takes_young_and_tians_network_and_settings():
    static = static_for_env("minatar:SpaceInvaders")
    assert (static.network, static.buffer_size, static.batch_size, static.target_update) == (
        "minatar_conv", 100_000, 32, 1_000)
    from opiq_jax.primitives.networks import make_network

    variables = make_network("minatar_conv", 4).init(jax.random.key(0), jnp.zeros((1, 10, 10, 6)))
    shapes = {name: tuple(layer["kernel"].shape) for name, layer in variables["params"].items()}
    assert shapes["PatchConv_0"] == (3, 3, 6, 16) and shapes["Dense_0"] == (8 * 8 * 16, 128)


def test_every_method_trains_a_few_hundred_steps_on_minatar(tmp_path):
    assert train_methods("minatar:Breakout", EVERY_METHOD, tmp_path / "minatar, ✓") == set(EVERY_METHOD)


def test_a_game_gymnax_lacks_gets_the_closest_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "minatar:Breakot", "--no-progress"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "did you mean minatar:Breakout" in message
