"""Environment objects with gymnax's API, adapted: both step conventions (5 values, as gymnax before 1.0 and navix's
``ToGymnax``; 6 without ``final_observation``), registration and ``opiq_jax.train(env=...)`` of an object, and the
network ``auto`` chooses by the observation's shape."""

import csv
import json
import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces

import opiq_jax
from opiq_jax.agent.trainer import network_name
from opiq_jax.envs.gymnax_adapter import GymnaxAdapter
from opiq_jax.registry.environments import ENVIRONMENTS, static_for_env

LENGTH = 4  # the corridor's cells; the last one ends the episode with reward 1


@struct.dataclass
class CorridorParams:
    max_steps_in_episode: int = 10


@struct.dataclass
class CorridorState:
    position: jax.Array
    time: jax.Array


class Corridor:
    """A corridor of LENGTH cells seen one-hot: action 1 moves right, 0 stays; reaching the last cell ends the
    episode (reward 1), and so does the time limit. It never resets on its own, as navix's ``ToGymnax`` (which
    resets lazily, on the next call): ``values`` says whether ``step`` returns 5 values (``done``, with
    ``info["truncated"]``) or 6."""

    def __init__(self, values: int = 5):
        self.values = values

    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def observe(self, state: CorridorState) -> jax.Array:
        return jax.nn.one_hot(state.position, LENGTH)

    def reset(self, key, params):
        state = CorridorState(jnp.int32(0), jnp.int32(0))
        return self.observe(state), state

    def step(self, key, state, action, params):
        state = CorridorState(jnp.minimum(state.position + action, LENGTH - 1), state.time + 1)
        terminated = state.position == LENGTH - 1
        truncated = ~terminated & (state.time >= params.max_steps_in_episode)
        reward = terminated.astype(jnp.float32)
        if self.values == 5:
            return self.observe(state), state, reward, terminated | truncated, {"truncated": truncated}
        return self.observe(state), state, reward, terminated, truncated, {}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (LENGTH,), jnp.float32)


@pytest.mark.parametrize("values", [5, 6])
def test_an_environment_that_does_not_reset_itself_is_reset_by_the_adapter(values):
    env = GymnaxAdapter(Corridor(values))
    assert (env.step_values, env.resets_itself, env.name, env.num_actions) == (values, False, "Corridor", 2)
    params = env.default_params
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    for t in range(LENGTH - 1):
        obs, state, reward, terminated, truncated, info = step(jax.random.key(t), state, 1, params)
    # the last cell reached: its observation is the transition's (info["compact"]), the next one is a reset's
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    np.testing.assert_array_equal(info["compact"], np.eye(LENGTH)[LENGTH - 1])
    np.testing.assert_array_equal(obs, np.eye(LENGTH)[0])
    assert int(state.env_state.position) == 0 and int(info["cell_id"]) == int(env.cell_id(info["compact"]))


@pytest.mark.parametrize("values", [5, 6])
def test_the_time_limit_is_a_truncation_in_either_convention(values):
    env = GymnaxAdapter(Corridor(values), CorridorParams(max_steps_in_episode=2))
    _, state = env.reset(jax.random.key(0), env.default_params)
    for t in range(2):  # staying put: the limit ends the episode, not the goal
        _, state, reward, terminated, truncated, info = env.step(jax.random.key(t), state, 0, env.default_params)
    assert (bool(terminated), bool(truncated), float(reward)) == (False, True, 0.0)
    assert int(state.env_state.time) == 0  # reset


def test_an_object_without_gymnaxs_api_is_refused_in_one_line():
    class Stepless:
        default_params = CorridorParams()

        def reset(self, key, params):
            return jnp.zeros(3), jnp.int32(0)

        def step(self, key, state, action, params):
            return jnp.zeros(3), state, 0.0

        def action_space(self, params=None):
            return spaces.Discrete(2)

    with pytest.raises(opiq_jax.UsageError, match="Stepless is not an environment with gymnax's API") as error:
        opiq_jax.train(env=Stepless(), seeds=1, steps=10)
    assert "\n" not in str(error.value) and "returns 3 values" in str(error.value)


def test_an_environment_object_trains_through_the_api_and_registers(tmp_path):
    out = tmp_path / "corridor, ✓"
    try:
        results = opiq_jax.train(env=(Corridor(5), CorridorParams(max_steps_in_episode=8)), methods=["opiq", "dqn"],
                                 seeds=2, steps=400, log_every=200, out=out, progress=False, verbose=False,
                                 buffer_size=400)
        assert results.finished and "Corridor" in ENVIRONMENTS
        assert static_for_env("Corridor").network == "auto"  # a gymnax environment's settings: the chain's
    finally:
        ENVIRONMENTS.pop("Corridor", None)
    with open(out / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "test_return" and r["step"] == "400"]
    assert len(rows) == 4 and all(0.0 <= float(r["value"]) <= 1.0 for r in rows)


@pytest.mark.parametrize("shape,network", [((LENGTH,), "mlp"), ((7, 7, 3), "mlp"), ((10, 10, 4), "mlp"),
                                           ((16, 16, 3), "maze_conv"), ((24, 24, 1), "maze_conv")])
def test_auto_reads_small_grids_whole_and_convolves_larger_images(shape, network):
    assert network_name(static_for_env("gymnax:MountainCar-v0"), shape) == network


def environment_example() -> str:
    """The add-an-environment example of docs/design.md: the fenced block after its marker, unindented."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- environment-example:[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/design.md has no marked environment example"
    return textwrap.dedent(match.group(1))


def test_the_design_docs_environment_example_runs_verbatim(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(environment_example(), "docs/design.md", "exec"), {"__name__": "__main__"})
    finally:
        ENVIRONMENTS.pop("Line", None)
    assert "| opiq | 2 | 600 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "results/line/config.json").read_text())["static"]["env"] == "Line"
