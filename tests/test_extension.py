"""Extension is shown, not claimed: a new environment and a new exploration part, each defined in this file
alone, registered and trained; no file of the package is edited."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from opiq_jax.config import Option
from opiq_jax.environments import ENVIRONMENT_ORIGINS, ENVIRONMENTS, EnvironmentSpec, register_environment
from opiq_jax.methods import method_hparams
from opiq_jax.envs.base import CompactEnvironment
from opiq_jax.methods import METHODS, ORIGINS, Method, register_method
from opiq_jax.parts import PARTS, Part
from opiq_jax.programs import run_methods
from opiq_jax.reading import read_metrics
from opiq_jax.experiment import Experiment, RunSpec

# ------------------------------------------------------------------------------------ a new environment


@struct.dataclass
class CorridorState(environment.EnvState):
    pos: jax.Array
    time: jax.Array


@struct.dataclass
class CorridorParams(environment.EnvParams):
    max_steps_in_episode: int = 12


class Corridor(CompactEnvironment):
    """Eight cells in a row; action 1 moves right, 0 left; the rightmost cell pays 10 and ends the episode."""

    compact_dim = 1
    has_cell_table = True
    length = 8

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def num_cells(self) -> int:
        return self.length

    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def step_env(self, key, state, action, params):
        pos = jnp.clip(state.pos + 2 * action - 1, 0, self.length - 1).astype(jnp.int32)
        state = CorridorState(pos=pos, time=state.time + 1)
        done = pos == self.length - 1
        compact = self.compact_state(state)
        info = {"compact": compact, "cell_id": self.cell_id(compact)}
        return self.get_obs(state), state, 10.0 * done.astype(jnp.float32), done, info

    def reset_env(self, key, params):
        state = CorridorState(pos=jnp.int32(0), time=jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.pos, self.length)

    def is_terminated(self, state, params):
        return state.pos == self.length - 1

    def compact_state(self, state) -> jax.Array:
        return state.pos[None].astype(jnp.int32)

    def obs_from_compact(self, compact, params) -> jax.Array:
        return jax.nn.one_hot(compact[0], self.length)

    def cell_id(self, compact) -> jax.Array:
        return compact[0].astype(jnp.int32)

    def start_compact(self, params) -> jax.Array:
        return jnp.array([0], jnp.int32)

    def all_compacts(self) -> jax.Array:
        return jnp.arange(self.length, dtype=jnp.int32)[:, None]

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (self.length,), jnp.float32)


# ------------------------------------------------------------------------------------ a new exploration part


class FavouredAction(Part):
    """A constant bonus for one action when acting, and a metric that reports the bonus."""

    name = "favoured_action"
    # A default that is not off: the methods that do not name the part must still run without it (its off value).
    hparams = (Option("favour", 50.0, "Bonus added to action 0's value when acting.", minimum=0.0),)
    shares_program = True
    off = {"favour": 0.0}
    metric_names = ("favour",)

    def action_bonus(self, agent, run, obs, counts):
        envs = obs.shape[0]
        return jnp.zeros((envs, agent.num_actions)).at[:, 0].set(run.hparams["favour"])

    def metrics(self, agent, run):
        return {"favour": run.hparams["favour"]}


@pytest.fixture
def registered():
    """The corridor and a method with the new part, registered for one test and removed after it."""
    register_environment(EnvironmentSpec(
        "corridor", "eight cells in a row", lambda static: Corridor(),
        defaults=dict(network="mlp", hidden=(32,), total_steps=2000, log_every=1000, buffer_size=2000, batch_size=16,
                      target_update=50, count_features="exact"),
        hparams=dict(epsilon_start=0.1, epsilon_end=0.1, epsilon_decay_steps=0.0), settings="chain",
    ))
    register_method(Method("dqn_favour", ("pseudocounts", FavouredAction()), "DQN + PC that favours action 0",
                           settings={"chain": {"beta": 0.1, "favour": 100.0}}))
    yield
    ENVIRONMENTS.pop("corridor")
    ENVIRONMENT_ORIGINS.pop("corridor")
    METHODS.pop("dqn_favour")
    ORIGINS.pop("dqn_favour")
    PARTS.pop("favoured_action")


def train(tmp_path, methods, seeds=4):
    from opiq_jax.environments import static_for_env

    static = static_for_env("corridor")
    runs = tuple(RunSpec(m, "paper", s, method_hparams("corridor", m)) for m in methods for s in range(seeds))
    states = run_methods(Experiment(static, runs), tmp_path, progress=False, keep_states=True)
    return states, read_metrics(tmp_path)


def test_opiq_trains_on_an_environment_defined_in_a_test_file(registered, tmp_path):
    states, rows = train(tmp_path, ["opiq"])
    final = {(r["run"], r["metric"]): r["value"] for r in rows if r["step"] == 2000}
    assert [final[run, "states_visited"] for run in range(4)] == [8.0] * 4
    assert [final[run, "max_return"] for run in range(4)] == [10.0] * 4  # every seed found the goal
    # OPIQ's training episodes mostly reach the goal by the end (a random walk of 12 steps seldom does: 7 net
    # steps right); its greedy Q is nearly flat here (optimism and intrinsic rewards lift every value to ~10)
    assert np.median([final[run, "train_return"] for run in range(4)]) >= 5.0


def test_a_part_defined_in_a_test_file_composes_into_a_method_and_trains(registered, tmp_path):
    states, rows = train(tmp_path, ["dqn_favour", "dqn_pc"], seeds=2)
    (state,) = states.values()  # both methods share one program: the new part shares programs
    assert state.runs.params["params"]["head"]["bias"].shape[0] == 4
    actions = np.asarray(state.runs.memory.items.action)  # [runs, capacity]: every step's action
    favoured, plain = actions[:2], actions[2:]
    assert (favoured == 0).mean() > 0.85  # the bonus of 100 wins over Q but for epsilon's 10 % random actions
    assert (plain == 0).mean() < 0.85
    favour = {r["method"]: r["value"] for r in rows if r["metric"] == "favour"}
    assert favour == {"dqn_favour": 100.0, "dqn_pc": 0.0}  # the part's metric; its off value (not 50) for dqn_pc



def design_example() -> str:
    """The worked example of docs/design.md: the fenced block right after its marker."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- design-example:[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/design.md has no marked example"
    return match.group(1)


def test_the_design_docs_worked_example_runs_verbatim(tmp_path, monkeypatch, capsys):
    """The part, the method and the training of docs/design.md, as a reader would paste them."""
    monkeypatch.chdir(tmp_path)
    saved = [(registry, dict(registry)) for registry in (METHODS, PARTS, ORIGINS)]
    try:
        exec(compile(design_example(), "docs/design.md", "exec"), {"__name__": "__main__"})
    finally:
        for registry, before in saved:
            registry.clear()
            registry.update(before)
    printed = capsys.readouterr().out
    assert "| dqn_inverse_count | 2 | 2,000 |" in printed and "| dqn_pc | 2 | 2,000 |" in printed
    assert "{'dqn_inverse_count': 0.1, 'dqn_pc': 0.0}" in printed
    config = json.loads((tmp_path / "results/inverse-count/config.json").read_text())
    assert config["plugins"] == ["__main__"] and "inverse_count" in config["static"]["parts"]
