"""Craftax's symbolic games through ``--env craftax:NAME`` (the ``craftax`` extra, ``envs/craftax.py``): step for step
craftax's own, its time limit a truncation; the methods of one program train a few hundred steps (DORA's, RND's and
BSP's programs, a compile of Craftax each, are trained on MinAtar); a name it lacks, the extra missing
and its option on another environment are one line each."""

import jax
import numpy as np
import pytest

from experiments.studies import suites
from opiq_jax.cli import main
from tests.missing_extras import hide_module
from tests.suite_runs import ONE_PROGRAM, SUITE_RUN, random_actions, train_methods



def craftax_or_skip():
    return pytest.importorskip("craftax.craftax_env")


def test_craftax_classic_is_craftaxs_game_step_for_step_and_its_time_limit_a_truncation():
    craftax_env = craftax_or_skip()
    from opiq_jax.envs.craftax import make_craftax

    limit = 40
    adapter = make_craftax("Classic", episode_steps=limit)
    env = craftax_env.make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    params = env.default_params.replace(max_timesteps=limit)
    assert (adapter.obs_shape, adapter.num_actions) == ((1345,), 17)
    assert adapter.default_params.max_steps_in_episode == limit  # the greedy test episode's horizon
    obs_a, state_a = adapter.reset(jax.random.key(1))
    obs_c, state_c = env.reset(jax.random.key(1), params)
    np.testing.assert_allclose(np.asarray(obs_a), np.asarray(obs_c), rtol=1e-6, atol=0)
    step_a, step_c = jax.jit(adapter.step), jax.jit(env.step)
    for t, action in enumerate(random_actions(jax.random.key(2), limit, adapter.num_actions)):
        key = jax.random.key(10 + t)
        obs_a, state_a, reward_a, terminated, truncated, info = step_a(key, state_a, action)
        obs_c, state_c, reward_c, done, _ = step_c(jax.random.split(key)[0], state_c, action, params)
        # before any reset; the light level may round one ulp apart, compiled in another program
        np.testing.assert_allclose(np.asarray(info["compact"]), np.asarray(obs_c), rtol=1e-6, atol=0)
        assert float(reward_a) == pytest.approx(float(reward_c))
        alive = bool(state_c.player_health > 0)
        assert bool(terminated) == (bool(done) and not (alive and t == limit - 1))
        assert bool(truncated) == (t == limit - 1 and alive)
        if bool(done):
            break
    assert int(state_a.env_state.timestep) == 0  # the episode that ended was reset


def test_craftax_without_the_extra_names_it(monkeypatch, capsys):
    hide_module(monkeypatch, "craftax")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "craftax:Classic", "--no-progress"])
    assert exit_info.value.code == 2
    assert "pip install -e '.[craftax]'" in capsys.readouterr().err


def test_a_craftax_option_on_another_environment_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--env", "maze", "--craftax-episode-steps", "50", "--no-progress"])
    assert "--craftax-episode-steps applies to craftax:NAME only" in capsys.readouterr().err


def test_the_methods_of_one_program_train_a_few_hundred_steps_on_craftax(tmp_path):
    craftax_or_skip()
    out = tmp_path / "craftax, ✓"
    assert train_methods("craftax:Classic", ONE_PROGRAM, out, "--craftax-episode-steps", "50") == set(ONE_PROGRAM)
    # the suites study on the same experiment: it resumes the finished run and reports, in % of the maximum beside
    summary = suites.main(["--env", "craftax:Classic", "--methods", *ONE_PROGRAM, *SUITE_RUN, "--out", str(out),
                           "--craftax-episode-steps", "50"])
    assert {t["method"] for t in summary["score"]} == set(ONE_PROGRAM)
    # a return is achievements plus a tenth of the change in health, so it can fall below 0: finite is what holds
    assert all(np.isfinite(t["median_percent"]) and t["seeds"] == 1 for t in summary["score"])
    assert "% of the maximum" in (out / "summary.md").read_text()


def test_a_game_craftax_lacks_gets_the_closest_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "craftax:Clasic", "--no-progress"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "did you mean craftax:Classic" in message
