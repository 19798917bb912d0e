"""Any gymnax environment through the trainer (``envs/gymnax_adapter.py``): the adapter against raw
gymnax, keyword routing and one-line errors, a MountainCar run through ``opiq-jax train``, and OPIQ
finding DeepSea's treasure where epsilon-greedy DQN does not. Two trainer compilations in all."""

import csv
import math
import os
import subprocess
import sys

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax import registration

from experiments.studies import deepsea
from opiq_jax.cli import main
from opiq_jax.envs.gymnax_adapter import make_gymnax
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.runs.experiment import Experiment, RunSpec
from tests.training import train_chunks


def rollout(env, params, key, steps):
    """obs, reward, terminated, truncated of ``steps`` random-action steps (auto-reset included), jitted."""

    @jax.jit
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = env.reset(k_reset, params)

        def body(carry, k):
            state = carry
            k_action, k_step = jax.random.split(k)
            action = jax.random.randint(k_action, (), 0, env.action_space(params).n)
            obs, state, reward, terminated, truncated, _ = env.step(k_step, state, action, params)
            return state, (obs.astype(jnp.float32), reward.astype(jnp.float32), terminated, truncated)

        _, trace = jax.lax.scan(body, state, jax.random.split(k_steps, steps))
        return obs.astype(jnp.float32), trace

    return jax.device_get(run(key))


@pytest.mark.parametrize("name,kwargs", [("DeepSea-bsuite", dict(size=6)), ("MountainCar-v0", {}),
                                         ("Breakout-MinAtar", {})])
def test_adapter_agrees_with_raw_gymnax(name, kwargs):
    adapter = make_gymnax(name, **kwargs)
    raw, raw_params = gymnax.make(name, **kwargs)
    steps = 40 if name != "DeepSea-bsuite" else 30  # DeepSea: 5 episodes of 6 steps, auto-resets included
    ours = rollout(adapter, adapter.default_params, jax.random.key(7), steps)
    theirs = rollout(raw, raw_params, jax.random.key(7), steps)
    np.testing.assert_array_equal(ours[0], theirs[0])
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_array_equal(a, b)
    if name == "DeepSea-bsuite":
        assert ours[1][2].sum() == 5 and ours[1][2][5::6].all()  # every episode ends after exactly N steps


DEEP5 = make_gymnax("DeepSea-bsuite", size=5)
STEP5 = jax.jit(DEEP5.step)
RESET5 = jax.jit(DEEP5.reset)


def test_step_reports_the_pre_reset_observation_and_exact_deep_sea_cells():
    env = DEEP5
    params = env.default_params.replace(randomize_actions=False)  # action 1 moves right everywhere
    obs, state = RESET5(jax.random.key(0), params)
    assert obs.dtype == jnp.float32 and obs.shape == (5, 5)
    assert int(env.cell_id(env.compact_state(state))) == 0
    np.testing.assert_array_equal(env.start_compact(params), env.compact_state(state))
    total = 0.0
    for t in range(5):
        obs, state, reward, terminated, truncated, info = STEP5(jax.random.key(t), state, 1, params)
        total += float(reward)
        assert int(info["cell_id"]) == (5 * 5 if t == 4 else (t + 1) * 5 + t + 1)  # the diagonal, then "below the grid"
    assert bool(terminated) and total == pytest.approx(1.0 - 0.01)  # the treasure minus N moves of cost 0.01 / N
    assert float(info["compact"].sum()) == 0.0  # pre-reset: the empty observation after the last row
    np.testing.assert_array_equal(env.compact_state(state), env.start_compact(params))  # post-reset state
    np.testing.assert_array_equal(env.obs_from_compact(info["compact"], params), np.zeros((5, 5), np.float32))
    assert env.num_cells == 26


def test_deep_sea_action_mapping_is_drawn_per_run():
    env = DEEP5
    raw, _ = gymnax.make("DeepSea-bsuite", size=5)
    np.testing.assert_array_equal(env.default_params.action_mapping, raw.action_mapping)  # gymnax's own mapping
    params = jax.vmap(env.sample_params)(jax.random.split(jax.random.key(1), 3))
    mappings = np.asarray(params.action_mapping)
    assert not np.array_equal(mappings[0], mappings[1]) and not np.array_equal(mappings[1], mappings[2])
    _, state = jax.vmap(RESET5)(jax.random.split(jax.random.key(2), 3), params)
    np.testing.assert_array_equal(state.env_state.action_mapping, mappings)
    # run 0 always takes the action that moves right: it reaches the treasure, then auto-resets with its mapping kept
    s = jax.tree.map(lambda x: x[0], state)
    p = jax.tree.map(lambda x: x[0], params)
    total = 0.0
    for t in range(5):
        _, s, reward, *_ = STEP5(jax.random.key(t), s, mappings[0][t, t], p)
        total += float(reward)
    assert total == pytest.approx(0.99)
    np.testing.assert_array_equal(s.env_state.action_mapping, mappings[0])


def test_keyword_arguments_are_routed_by_name():
    env = make_gymnax("DeepSea-bsuite", size=5, max_steps_in_episode=7, deterministic=False, action_mapping_key=3)
    assert env.env.size == 5 and env.observation_space(env.default_params).shape == (5, 5)
    assert env.default_params.max_steps_in_episode == 7 and env.default_params.deterministic is False
    expected = jax.random.bernoulli(jax.random.key(3), 0.5, (5, 5)).astype(jnp.int32)
    np.testing.assert_array_equal(env.default_params.action_mapping, expected)
    minatar = make_gymnax("Breakout-MinAtar", use_minimal_action_set=False, max_steps_in_episode=50)
    assert minatar.num_actions == 6 and minatar.default_params.max_steps_in_episode == 50
    assert minatar.observation_space().shape == (10, 10, 4) and minatar.num_cells == 2**16
    assert not minatar.has_cell_table


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_unknown_name_kwarg_action_space_and_missing_package_fail_in_one_line():
    with pytest.raises(ValueError) as e:
        make_gymnax("DeepSee-bsuite")
    assert "DeepSea-bsuite" in one_line(e) and "MountainCar-v0" in one_line(e)
    with pytest.raises(ValueError) as e:
        make_gymnax("DeepSea-bsuite", sise=10)
    assert "sise" in one_line(e) and "size" in one_line(e) and "max_steps_in_episode" in one_line(e)
    with pytest.raises(ValueError) as e:
        make_gymnax("Pendulum-v1")
    assert "discrete" in one_line(e)

    def needs_a_package():
        import opiq_jax_not_a_real_package  # noqa: F401

    if "OpiqTestNeedsPackage-v0" not in gymnax.registered_envs:
        registration.register("OpiqTestNeedsPackage-v0", needs_a_package)
    with pytest.raises(ImportError) as e:
        make_gymnax("OpiqTestNeedsPackage-v0")
    assert "pip install opiq_jax_not_a_real_package" in one_line(e)


def test_cli_rejects_an_unknown_gymnax_env_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "gymnax:NotAnEnv-v0", "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("opiq-jax: error: unknown gymnax environment 'NotAnEnv-v0'") and "\n" not in err


def test_cli_trains_mountain_car_under_the_compiled_trainer(tmp_path):
    out = tmp_path / "mc"
    main(["train", "--env", "gymnax:MountainCar-v0", "--env-arg", "max_steps_in_episode=50", "--method", "opiq",
          "--seeds", "2", "--steps", "300", "--log-every", "100", "--hidden", "16", "--buffer-size", "200",
          "--out", str(out), "--no-progress", "--no-plot"])
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["run"] for r in rows} == {"0", "1"} and {r["step"] for r in rows} == {"100", "200", "300"}
    value = {(r["run"], r["step"], r["metric"]): float(r["value"]) for r in rows}
    for run in ("0", "1"):
        assert value[(run, "300", "episodes")] >= 1  # 50-step episodes: two ended in each 100-step chunk
        assert value[(run, "300", "test_return")] == -50.0  # -1 per step, the goal is out of reach in 50 steps
        assert math.isfinite(value[(run, "300", "loss")]) and value[(run, "300", "states_visited")] > 50


# ------------------------------------------------------------------------------------------ learning

DEEP_SEA = 8
SEEDS = 8
BUDGET_EPISODES = 100  # OPIQ finds the treasure in all 8 seeds by ~75 episodes; DQN in none of 8 by 500
DEEP_SEA_STATIC = static_for_env(
    "gymnax:DeepSea-bsuite", env_kwargs=(("size", DEEP_SEA),), total_steps=BUDGET_EPISODES * DEEP_SEA,
    log_every=BUDGET_EPISODES * DEEP_SEA // 2, buffer_size=1000, hidden=(64, 64),  # count_features: SimHash (default)
)


@pytest.fixture(scope="module")
def deep_sea_history():
    runs = tuple(RunSpec(m, "paper", s, method_hparams("gymnax:DeepSea-bsuite", m)) for m in ("opiq", "dqn")
                 for s in range(SEEDS))
    experiment = Experiment(DEEP_SEA_STATIC, runs)
    _, final, history = train_chunks(experiment)
    return experiment, final, history


def test_opiq_finds_the_deep_sea_treasure_where_epsilon_greedy_dqn_does_not(deep_sea_history):
    experiment, _, history = deep_sea_history
    found = np.nan_to_num(history[-1]["max_return"], nan=-1.0) > deepsea.FOUND
    opiq = found[[i for i, r in enumerate(experiment.runs) if r.method == "opiq"]]
    dqn = found[[i for i, r in enumerate(experiment.runs) if r.method == "dqn"]]
    assert opiq.sum() >= 6, (f"OPIQ found the treasure in only {opiq.sum()} of {SEEDS} seeds within "
                             f"{BUDGET_EPISODES} episodes")
    assert dqn.sum() <= 2, f"epsilon-greedy DQN found the treasure in {dqn.sum()} of {SEEDS} seeds"
    # the treasure's return is 1 - 0.01 exactly, and cells are counted exactly: N (N + 1) / 2 reachable + 1 terminal
    assert np.nanmax(history[-1]["max_return"]) == pytest.approx(0.99)
    assert history[-1]["states_visited"].max() <= DEEP_SEA * (DEEP_SEA + 1) // 2 + 1


def test_runs_get_their_own_deep_sea_mapping_shared_across_methods(deep_sea_history):
    experiment, final, _ = deep_sea_history
    mappings = np.asarray(final.runs.env.params.action_mapping)
    opiq = [i for i, r in enumerate(experiment.runs) if r.method == "opiq"]
    dqn = [i for i, r in enumerate(experiment.runs) if r.method == "dqn"]
    assert len({m.tobytes() for m in mappings[opiq]}) == SEEDS
    np.testing.assert_array_equal(mappings[opiq], mappings[dqn])  # seed i: the same sea for every method


IMPORTS_WHAT = """
import sys
import opiq_jax.cli
from gymnax.environments.bsuite import catch
real = lambda name: type(sys.modules.get(name)).__name__ == "module"
before = [real("seaborn"), real("matplotlib.pyplot")]
figure = catch.plt.figure  # gymnax's Catch reads its renderer: the real pyplot
import matplotlib.pyplot
print(before, real("matplotlib.pyplot"), figure is matplotlib.pyplot.figure)
"""


def test_the_command_line_imports_gymnax_without_its_renderers_until_one_is_read():
    """gymnax imports seaborn and pyplot to draw frames (envs/_imports.py): the command line, which draws none,
    starts without them, and a gymnax module that reads its stand-in gets the real module."""
    run = subprocess.run([sys.executable, "-c", IMPORTS_WHAT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["[False,", "False]", "True", "True"]


class CartPoleWithoutReset:
    """CartPole as an environment that does not reset itself (as Craftax and MiniGrid come): its ``step_env``
    as ``step``; counts the resets traced."""

    def __init__(self):
        (self.env, self.default_params), self.resets = gymnax.make("CartPole-v1"), 0

    def reset(self, key, params):
        self.resets += 1
        return self.env.reset_env(key, params)

    def step(self, key, state, action, params):
        obs, state, reward, done, info = self.env.step_env(key, state, action, params)
        return obs, state, reward, done, {**info, "truncated": self.env.is_truncated(state, params)}

    def action_space(self, params=None):
        return self.env.action_space(params)


def test_the_test_episode_steps_without_a_reset_and_returns_what_the_resetting_step_gives():
    """The greedy test episode never reads what follows its end, so its steps skip the reset (Craftax: a world
    generated per step): the episode's values up to its end are ``step``'s, and its return the same."""
    from types import SimpleNamespace

    from opiq_jax.contracts.compact import CompactStepping
    from opiq_jax.envs.gymnax_adapter import GymnaxAdapter

    raw = CartPoleWithoutReset()
    env = GymnaxAdapter(raw, name="CartPoleWithoutReset")
    params, horizon = env.default_params, 60
    assert not env.resets_itself
    greedy = lambda obs: (obs[2] > 0).astype(jnp.int32)  # noqa: E731  push the way the pole leans: ends in ~40 steps

    def played(step, key):
        obs, state = env.reset(jax.random.key(1), params)
        values = []
        for k in jax.random.split(key, horizon):
            obs, state, reward, terminated, truncated = step(k, state, greedy(obs), params)[:5]
            values.append((np.asarray(obs), float(reward), bool(terminated), bool(truncated)))
        return values

    with_reset, without = played(env.step, jax.random.key(2)), played(env.step_in_episode, jax.random.key(2))
    end = next(t for t, v in enumerate(with_reset) if v[2] or v[3])
    assert 5 < end < horizon - 5  # the episode ends inside the horizon: the steps after it differ
    for a, b in zip(with_reset[:end], without[:end]):
        np.testing.assert_array_equal(a[0], b[0])
    assert [v[1:] for v in with_reset[:end + 1]] == [v[1:] for v in without[:end + 1]]  # reward and ends
    assert not np.array_equal(with_reset[end][0], without[end][0])  # a reset's start, the pole past its limit

    raw.resets = 0
    stepping = SimpleNamespace(env=env, horizon=horizon)
    run = SimpleNamespace(env=SimpleNamespace(params=params))
    keys = jax.random.key(1), jax.random.key(2)
    total = jax.jit(lambda a, b: CompactStepping.test_return(stepping, run, greedy, a, b))(*keys)
    assert raw.resets == 1  # the episode's own reset; none in its steps
    assert float(total) == sum(v[1] for v in with_reset[:end + 1]) == end + 1
