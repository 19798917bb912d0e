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

from opiq_jax.agent.weights import master_params
from opiq_jax.common.config import Option
from opiq_jax.envs.base import CompactEnvironment
from opiq_jax.parts import PARTS, Part
from opiq_jax.registry.environments import ENVIRONMENT_ORIGINS, ENVIRONMENTS, EnvironmentSpec, register_environment
from opiq_jax.registry.methods import method_hparams
from opiq_jax.registry.methods import METHODS, ORIGINS, Method, register_method
from opiq_jax.host.train_programs import run_methods
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.runs.results_folder import read_metrics

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
    from opiq_jax.registry.environments import static_for_env

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
    from opiq_jax.registry.environments import static_for_env

    (state,) = states.values()  # both methods share one program: the new part shares programs
    assert master_params(static_for_env("corridor"), state.runs)["params"]["head"]["bias"].shape[0] == 4
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


# ------------------------------------------------------------------------------------ a part with networks of its own


@struct.dataclass
class DistillState:
    params: Any
    opt_state: Any
    target: Any


class Distill(Part):
    """RND again, in this file alone: a fixed random network and a predictor of it, whose error is the bonus. Its
    static option, its networks and its random streams are declared here; registering the method is the one line."""

    name = "distill"
    hparams = (Option("beta_distill", 0.0, "Scale of the predictor's error as intrinsic reward.", minimum=0.0),)
    static_options = (Option("distill_outputs", 16, "Outputs of the distilled networks.", minimum=1, type=int),)
    random_streams = {"distill_predictor": None, "distill_target": None}

    def init(self, agent, run_key, example):
        network = agent.make_network(agent.static.part("distill").outputs)
        params = network.init(agent.init_key(run_key, "distill_predictor"), example.obs[None])
        target = network.init(agent.init_key(run_key, "distill_target"), example.obs[None])
        return DistillState(params=params, opt_state=agent.optimiser.init(params), target=target)

    def error(self, agent, state, params, obs, lead):
        network = agent.make_network(agent.static.part("distill").outputs)
        fixed = jax.lax.stop_gradient(agent.apply_flat(network, state.target, obs, lead))
        return jnp.sum(jnp.square(agent.apply_flat(network, params, obs, lead) - fixed), axis=-1)

    def intrinsic_reward(self, agent, run, batch):
        state = run.parts[self.name]
        return run.hparams["beta_distill"] * self.error(agent, state, state.params, batch.reached_obs,
                                                        batch.actions.ndim)

    def update(self, agent, run, batch, key):
        state = run.parts[self.name]
        obs, stored = agent.replay.recent(run, agent.static.batch_size)
        grads = jax.grad(lambda p: jnp.sum(self.error(agent, state, p, obs, 1) * stored))(state.params)
        params, opt_state = agent.sgd_step(state.params, state.opt_state, grads, run.hparams["lr"])
        return state.replace(params=params, opt_state=opt_state)


def test_a_part_with_its_own_static_option_networks_and_streams_is_one_module(tmp_path):
    import opiq_jax
    from opiq_jax.common.config import DECLARED_GROUPS, DECLARED_STATIC_OPTIONS, STATIC_OPTIONS, Owner
    from opiq_jax.registry.methods import SETTINGS

    register_method(Method("dqn_distill", (Distill(),), "DQN + a distilled random network",
                           settings={"chain": {"beta_distill": 1.0}}))
    try:
        assert STATIC_OPTIONS["distill_outputs"].doc == "Outputs of the distilled networks."
        with pytest.raises(opiq_jax.UsageError, match="distill_outputs must be >= 1"):
            opiq_jax.train("chain", ["dqn_distill"], 1, steps=200, distill_outputs=0, out=tmp_path / "bad",
                           verbose=False, progress=False)
        results = opiq_jax.train("chain", ["dqn_distill"], 2, steps=400, log_every=200, buffer_size=400,
                                 distill_outputs=8, out=tmp_path / "distill", verbose=False, progress=False)
        config = json.loads((tmp_path / "distill" / "config.json").read_text())
        assert config["static"]["distill_outputs"] == 8
        state = results.state().state.parts["distill"]
        assert state.target["params"]["head"]["kernel"].shape[-1] == 8  # the option shaped its networks
        # each run's fixed network is drawn from its own named stream, and the predictor from another
        assert not np.allclose(state.target["params"]["head"]["kernel"][0], state.target["params"]["head"]["kernel"][1])
        rewards = [r["value"] for r in results.metrics if r["metric"] == "intrinsic_reward"]
        assert rewards and all(v > 0 for v in rewards)
    finally:
        METHODS.pop("dqn_distill"), ORIGINS.pop("dqn_distill"), PARTS.pop("distill")
        SETTINGS["chain"].pop("dqn_distill")
        STATIC_OPTIONS.pop("distill_outputs"), DECLARED_STATIC_OPTIONS.pop("distill_outputs")
        DECLARED_GROUPS.pop(Owner("part", "distill"))


@pytest.mark.parametrize("declared, message", [
    (dict(static_options=(Option("buffer_size", 5, "clash", type=int),)), "static option buffer_size is already"),
    (dict(static_options=(Option("rnd_batch", 5, "clash", type=int),)), "static option rnd_batch is already"),
    (dict(random_streams={"predictor": None}), "random stream 'predictor' is part 'rnd''s"),
])
def test_a_part_cannot_take_an_option_or_stream_declared_elsewhere(declared, message):
    clashing = type("Clashing", (Part,), {"name": "clashing", **declared})()
    with pytest.raises(ValueError, match=re.escape(message)):
        register_method(Method("dqn_clashing", (clashing,), "clashes"))
    assert "clashing" not in PARTS and "dqn_clashing" not in METHODS
