"""An environment declares what the plan, the memory check, the sweeps and the figures need of it, as a part
declares its own: its device-memory headroom, the metrics its figures draw and a sweep's default metric. The
paper's environments declare what was chosen by their kind before (a pool's 1.2 headroom, its training-return
headline, its rooms figure); a plugin's declarations are honoured."""

from __future__ import annotations

import dataclasses

import pytest

import opiq_jax
from opiq_jax.common.errors import DoesNotFit
from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec, register_environment, static_for_env
from opiq_jax.reporting.plotting import plot_folder
from opiq_jax.runs import memory
from opiq_jax.host.sweeping import load_preset

PLUGIN = "chain_declaring"


def plugin():
    """The chain, declaring one figure, a sweep headline of its own and a headroom of 40 states per run."""
    if PLUGIN not in ENVIRONMENTS:
        register_environment(dataclasses.replace(environment_spec("chain"), name=PLUGIN, figures=("train_return",),
                                                 headline_metric="max_return", memory_headroom=40.0))
    return ENVIRONMENTS[PLUGIN]


def test_the_papers_environments_declare_what_their_kind_chose_before():
    for name in ("chain", "maze", "gymnax:CartPole-v1"):
        spec = environment_spec(name)
        assert (spec.memory_headroom, spec.headline_metric) == (3.0, "test_return")
        assert spec.figures == ("train_return", "test_return", "states_visited", "max_return")
    for name in ("montezuma", "atari:Venture"):
        spec = environment_spec(name)
        assert (spec.memory_headroom, spec.headline_metric) == (1.2, "train_return")
        assert spec.figures == ("train_return", "max_return", "rooms_visited")


def test_the_memory_check_uses_the_environments_headroom(monkeypatch):
    """Free memory for 10 chain states at 3x: the chain fits, the plugin's 40x does not, and says how much it needs."""
    plugin()
    per_run = memory.state_bytes_per_run(static_for_env("chain", chain_length=8))
    monkeypatch.setattr(memory, "available_device_bytes", lambda: int(per_run * 3.0 * 10))
    memory.check_fits(static_for_env("chain", chain_length=8), 4)
    with pytest.raises(DoesNotFit, match=r"x40"):
        memory.check_fits(static_for_env(PLUGIN, chain_length=8), 4)


def test_a_sweep_ranks_by_the_environments_headline_metric():
    plugin()
    grids = [{"method": "dqn_pc", "grid": {"beta": [0.1]}}]
    assert load_preset({"env": "chain", "seeds": 2, "grids": grids}).metric == "test_return"
    assert load_preset({"env": PLUGIN, "seeds": 2, "grids": grids}).metric == "max_return"


def test_plot_draws_the_figures_the_environment_declares(tmp_path):
    plugin()
    small = dict(steps=200, log_every=100, chain_length=6, buffer_size=200, batch_size=8, hidden=(16,))
    opiq_jax.train("chain", ["dqn"], 1, out=tmp_path / "chain", progress=False, verbose=False, **small)
    opiq_jax.train(PLUGIN, ["dqn"], 1, out=tmp_path / "plugin", progress=False, verbose=False, **small)
    drawn = {name: sorted(p.name for p in plot_folder(tmp_path / name)) for name in ("chain", "plugin")}
    assert drawn["chain"] == ["plot_max_return.png", "plot_states_visited.png", "plot_test_return.png",
                              "plot_train_return.png"]
    assert drawn["plugin"] == ["plot_train_return.png"]
