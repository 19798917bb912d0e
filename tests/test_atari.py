"""Any Atari game on the pool path: ``atari:NAME`` is Montezuma's settings around the game's pool, and what the
frames mean to the agent (what is counted, the reward learned from, whether there are rooms) comes from the
environment's spec, never from a game's name. The training tests use :class:`tests.fake_pool.FakePool`; the
EnvPool ones are skipped where EnvPool is missing; real games train through EnvPool in tests/test_atari_games.py."""

from __future__ import annotations

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.contracts.pool import ATARI_FRAMES, NUM_ROOMS, PoolStepping
from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec, register_environment, static_for_env
from opiq_jax.registry.methods import method_hparams
from opiq_jax.host.train_programs import run_methods
from opiq_jax.runs.experiment import Experiment, RunSpec
from opiq_jax.runs.results_folder import read_metrics
from tests.fake_pool import FakePool

SMALL = dict(total_steps=32, log_every=16, buffer_size=256, batch_size=8, train_every=4, target_update=32,
             sketch_width=512)


def test_an_atari_game_takes_montezumas_settings_and_rooms_only_where_the_game_has_them():
    venture, montezuma = environment_spec("atari:Venture"), environment_spec("montezuma")
    assert venture.stepping is PoolStepping and venture.settings == "montezuma"
    assert venture.defaults == montezuma.defaults
    assert venture.frames.num_rooms == 0 and montezuma.frames.num_rooms == NUM_ROOMS
    assert environment_spec("atari:MontezumaRevenge").frames.num_rooms == NUM_ROOMS  # the game, however named
    assert environment_spec("atari:Venture-v5").name == "atari:Venture-v5"
    for method in ("opiq", "dqn_pc", "dqn_rnd", "bsp"):
        assert method_hparams("atari:Gravitar", method) == method_hparams("montezuma", method)
    assert static_for_env("atari:Solaris").part("rnd").outputs == 512
    with pytest.raises(ValueError, match="an Atari game is named as EnvPool names it"):
        environment_spec("atari:Private Eye")


def fake_game(name, frames):
    """A fake pool registered as an Atari environment whose spec declares ``frames``."""
    register_environment(dataclasses.replace(
        environment_spec("atari:FakeGame"), name=name, frames=frames,
        make=lambda static, num_envs, seed, **kw: FakePool(num_envs, seed, 20, **kw)))


@pytest.fixture(scope="module")
def two_games(tmp_path_factory):
    """OPIQ and DQN + PC on a fake game without rooms (its rewards halved for training) and on one with rooms."""
    fake_game("fake_roomless", dataclasses.replace(ATARI_FRAMES, train_reward=lambda r: 0.5 * r))
    fake_game("fake_rooms", dataclasses.replace(ATARI_FRAMES, num_rooms=NUM_ROOMS))
    trained = {}
    for env in ("fake_roomless", "fake_rooms"):
        runs = tuple(RunSpec(m, "paper", s, method_hparams(env, m)) for m in ("opiq", "dqn_pc") for s in range(2))
        out = tmp_path_factory.mktemp(env)
        states = run_methods(Experiment(static_for_env(env, **SMALL), runs), out, progress=False, keep_states=True)
        trained[env] = (states, read_metrics(out), out)
    yield trained
    ENVIRONMENTS.pop("fake_roomless"), ENVIRONMENTS.pop("fake_rooms")


def test_rooms_visited_is_recorded_only_where_the_game_defines_rooms(two_games):
    _, roomless, folder = two_games["fake_roomless"]
    _, rooms, _ = two_games["fake_rooms"]
    assert "rooms_visited" not in {r["metric"] for r in roomless}
    # the fake's room is 1 + (t // 10) % 3 at episode step t of 0..20: rooms 1, 2 and 3 by step 32
    assert {r["value"] for r in rooms if r["metric"] == "rooms_visited" and r["step"] == 32} == {3.0}
    assert any(r["metric"] == "loss" for r in roomless)
    header = (folder / "metrics.csv").read_text().splitlines()[0]
    assert header == "run,method,setting,seed,step,metric,value"


def test_the_replay_stores_the_reward_the_spec_says_the_agent_learns_from(two_games):
    (state,) = two_games["fake_roomless"][0].values()
    memory = state.runs.memory  # [runs, envs, capacity]: the fake pays 5 every 7 steps, the spec halves it
    stored = np.asarray(memory.reward)[np.asarray(memory.size)[..., None] > np.arange(memory.reward.shape[-1])]
    assert set(np.unique(stored)) == {0.0, 2.5}
    (rooms_state,) = two_games["fake_rooms"][0].values()
    assert set(np.unique(np.asarray(rooms_state.runs.memory.reward))) == {0.0, 1.0}  # Atari's clip to [-1, 1]


def test_the_counts_are_of_the_code_the_spec_says(tmp_path):
    """A spec whose code is the same for every frame makes every count the number of steps taken."""
    fake_game("fake_one_code", dataclasses.replace(ATARI_FRAMES, count_code=lambda frame: jnp.zeros(9, jnp.uint32)))
    try:
        runs = (RunSpec("opiq", "paper", 0, method_hparams("fake_one_code", "opiq")),)
        static = static_for_env("fake_one_code", **{**SMALL, "total_steps": 16})
        (state,) = run_methods(Experiment(static, runs), tmp_path, progress=False, keep_states=True).values()
        sketch = np.asarray(state.runs.counts.sketch)[0]  # [actions, rows, width]: one code, one column per row
        assert int(sketch.sum(axis=(0, 2))[0]) == 16 and (sketch > 0).sum(axis=2).max() == 1
    finally:
        ENVIRONMENTS.pop("fake_one_code")


# ------------------------------------------------------------------------------------ through EnvPool


def test_a_game_envpool_lacks_or_a_missing_envpool_is_one_line(monkeypatch, capsys):
    from opiq_jax.cli import main

    pytest.importorskip("envpool")
    with pytest.raises(SystemExit) as stop:
        main(["train", "--env", "atari:Ventur", "--steps", "100"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("opiq-jax: error: EnvPool has no Atari game 'Ventur' (Ventur-v5); did "
                                               "you mean Adventure, Venture?")
    monkeypatch.setitem(__import__("sys").modules, "envpool", None)
    with pytest.raises(SystemExit):
        main(["train", "--env", "atari:Venture", "--steps", "100"])
    assert capsys.readouterr().err.strip() == ("opiq-jax: error: --env atari:Venture needs EnvPool: "
                                               "pip install -e '.[atari]'")


def test_the_resolved_configuration_says_what_is_counted_on_the_pool_path(two_games):
    config = json.loads((two_games["fake_roomless"][2] / "config.json").read_text())
    assert config["static"]["count_features"] == "simhash"  # the option, which the pool path does not read ...
    assert config["resolved"]["counted"] == ATARI_FRAMES.counted  # ... and what it counts instead
    assert config["resolved"]["network"] == "nature" and config["resolved"]["target_values"] == "network"


def test_the_resolved_configuration_says_what_auto_chose(tmp_path):
    from opiq_jax import train

    train("chain", ["opiq", "bsp"], 1, steps=100, log_every=100, chain_length=10,
          precision="bfloat16", bsp_heads=2, out=tmp_path, verbose=False, progress=False)
    plain = json.loads((tmp_path / "plain" / "config.json").read_text())["resolved"]
    bsp = json.loads((tmp_path / "bsp" / "config.json").read_text())["resolved"]
    assert plain == {"network": "mlp", "precision": "bfloat16", "maze_torso": "-", "weight_storage": "compute copy",
                     "target_values": "table", "backward": "xla",
                     "counted": "SimHash codes of 32 bits of the observation"}
    assert bsp["network"] == "mlp with 2 heads"
