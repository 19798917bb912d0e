"""Montezuma's settings, checked value by value against a written copy of the paper's appendix and the authors'
corrected README command, so that a wrong value fails with the method's and the setting's names.

The copy is typed out here from the sources, not read from the package: the paper's appendix ("Hyperparameters
and Network architectures", Montezuma's Revenge: the training setup and "The best hyperparameters we found
were") and the authors' OPIQ command for Montezuma as corrected on 2020-08-04 (``count_beta=0.1``, where the first
command had 0.01). Where neither gives a value, the value is this project's choice and says so.
"""

from __future__ import annotations

import pytest

from opiq_jax.registry.environments import environment_spec, static_for_env
from opiq_jax.registry.methods import SETTING_NOTES, SETTINGS, get_method, method_hparams

PAPER = "paper appendix"
COMMAND = "the authors' corrected command"
OURS = "this project's choice"

# method -> setting -> (value, where it comes from)
MONTEZUMA_METHODS: dict[str, dict[str, tuple[float, str]]] = {
    "dqn": {"epsilon_start": (1.0, PAPER), "epsilon_end": (0.01, PAPER), "epsilon_decay_steps": (1e6, PAPER)},
    "dqn_pc": {"beta": (0.01, PAPER), "beta_mmc": (0.01, PAPER)},
    "dqn_rnd": {"beta_rnd": (0.1, PAPER), "beta_mmc": (0.01, PAPER)},
    "bsp": {"beta_bsp": (0.1, PAPER), "beta_mmc": (0.025, PAPER)},
    "opiq": {"m": (2.0, PAPER), "c_action": (0.1, PAPER), "c_bootstrap": (0.01, PAPER), "beta_mmc": (0.01, PAPER),
             "beta": (0.1, COMMAND)},
    "opiq_no_ob": {"m": (2.0, PAPER), "c_action": (0.1, PAPER), "c_bootstrap": (0.0, PAPER),
                   "beta_mmc": (0.005, PAPER), "beta": (0.1, OURS)},
    "opiq_no_pc": {"m": (2.0, OURS), "c_action": (0.1, OURS), "c_bootstrap": (0.01, OURS), "beta_mmc": (0.01, OURS)},
}
"""Every Montezuma method's numbers. OPIQ w/o OB's beta and OPIQ w/o PC's settings are OPIQ's, as the package's
``SETTING_NOTES`` say; OPIQ w/o PC has no pseudocounts, so no beta at all."""

# the schedule every method shares there (paper appendix; the learning rate, clip and discount for all experiments)
MONTEZUMA_TRAINING: dict[str, float] = {
    "total_steps": 12_500_000, "n_step": 3, "batch_size": 32, "train_every": 4, "buffer_size": 1_000_000,
    "target_update": 8_000, "gamma": 0.99, "grad_clip": 5.0,
}
MONTEZUMA_EXPLORATION: dict[str, float] = {"epsilon_start": 1.0, "epsilon_end": 0.01, "epsilon_decay_steps": 1e6}
PAPER_LR = 5e-4
"""The paper's learning rate, in every experiment (its appendix; the authors' default.yaml)."""

# The authors' corrected README command for OPIQ on Montezuma, the flags that are numbers of the method.
AUTHORS_COMMAND = {"count_beta": 0.1, "optim_m": 2.0, "optim_action_tau": 0.1, "optim_bootstrap_tau": 0.01,
                   "mmc_beta": 0.01, "batch_size": 32, "update_freq": 4, "n_step": 3, "buffer_size": 1_000_000,
                   "target_update_interval": 8000, "epsilon_time_length": 1_000_000, "epsilon_finish": 0.01,
                   "gamma": 0.99}
OURS_FOR_THEIRS = {"count_beta": "beta", "optim_m": "m", "optim_action_tau": "c_action",
                   "optim_bootstrap_tau": "c_bootstrap", "mmc_beta": "beta_mmc", "batch_size": "batch_size",
                   "update_freq": "train_every", "n_step": "n_step", "buffer_size": "buffer_size",
                   "target_update_interval": "target_update", "epsilon_time_length": "epsilon_decay_steps",
                   "epsilon_finish": "epsilon_end", "gamma": "gamma"}


@pytest.mark.parametrize("method", sorted(MONTEZUMA_METHODS))
def test_each_montezuma_method_has_the_written_settings(method):
    hp = method_hparams("montezuma", method)
    for name, (value, source) in MONTEZUMA_METHODS[method].items():
        assert hp[name] == pytest.approx(value), f"montezuma {method} {name}: {hp[name]} where {source} has {value}"
    for name, value in MONTEZUMA_EXPLORATION.items():
        assert hp[name] == pytest.approx(value), f"montezuma {method} {name}"
    assert hp["lr"] == pytest.approx(PAPER_LR), f"montezuma {method} lr: {hp['lr']}, the paper's is {PAPER_LR}"


def test_the_learning_rate_is_the_papers_everywhere_and_the_choice_is_written_down():
    from pathlib import Path

    for env in ("chain", "maze", "montezuma", "atari:Pong"):
        assert method_hparams(env, "opiq")["lr"] == pytest.approx(PAPER_LR), env
    choices = (Path(__file__).resolve().parents[1] / "docs" / "choices.md").read_text(encoding="utf-8")
    assert "results/montezuma-defaults" in choices


@pytest.mark.parametrize("env", ["chain", "maze", "montezuma", "atari:Pong", "gymnax:CartPole-v1"])
def test_every_environment_starts_its_networks_as_the_authors(env):
    """The authors' PyTorch networks keep PyTorch's default draw; neither Montezuma at the paper's learning rate nor
    the chain and the maze (docs/results/network-init) gave a reason to depart from it."""
    assert static_for_env(env).network_init == "pytorch"
    assert static_for_env(env, network_init="flax").network_init == "flax"  # --network-init flax still chooses


@pytest.mark.parametrize("method", sorted(MONTEZUMA_METHODS))
def test_a_value_that_is_ours_is_said_to_be(method):
    ours = [name for name, (_, source) in MONTEZUMA_METHODS[method].items() if source in (OURS, COMMAND)]
    if ours:
        assert ("montezuma", method) in SETTING_NOTES, f"montezuma {method}: {ours} are not the paper's list"


def test_the_montezuma_schedule_is_the_papers():
    static = static_for_env("montezuma")
    for name, value in MONTEZUMA_TRAINING.items():
        assert static.value(name) == pytest.approx(value), f"montezuma {name}"
    assert environment_spec("montezuma").settings == "montezuma"


def test_opiq_on_montezuma_is_the_authors_corrected_command():
    static = static_for_env("montezuma")
    ours = {**{name: static.value(name) for name in ("batch_size", "train_every", "n_step", "buffer_size",
                                                     "target_update", "gamma")},
            **method_hparams("montezuma", "opiq")}
    for theirs, value in AUTHORS_COMMAND.items():
        assert ours[OURS_FOR_THEIRS[theirs]] == pytest.approx(value), f"opiq {OURS_FOR_THEIRS[theirs]} ({theirs})"
    assert ours["lr"] == pytest.approx(PAPER_LR)  # theirs is the paper's 5e-4: their default, which the command keeps


def test_the_authors_code_runs_the_corrected_command():
    from experiments.bench.authors_code_rate import PAPER_SETTINGS

    theirs = PAPER_SETTINGS["montezuma"]
    for flag, value in AUTHORS_COMMAND.items():
        assert float(theirs[flag]) == pytest.approx(value), flag


def test_every_montezuma_method_is_in_the_copy():
    assert set(SETTINGS["montezuma"]) == set(MONTEZUMA_METHODS)
    for method in MONTEZUMA_METHODS:  # the copy names only hyperparameters the method has
        assert set(MONTEZUMA_METHODS[method]) <= set(get_method(method).options()), method
