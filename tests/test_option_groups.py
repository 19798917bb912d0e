"""A part's and an environment's static options read as their owner's group (``static.part("rnd").outputs``,
``static.environment("chain").length``) while every name users write stays flat: the command line's flags, the
API's keywords, presets and the keys of a results folder's ``config.json``, today's and earlier versions' alike."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
import tyro

from opiq_jax.common.config import (DECLARED_GROUPS, DECLARED_STATIC_OPTIONS, Owner, StaticConfig,
                                    register_static_options, short_name)
from opiq_jax.parts import Part
from opiq_jax.registry.environments import (ENVIRONMENT_ORIGINS, ENVIRONMENTS, environment_spec, register_environment,
                                            static_for_env)
from opiq_jax.registry.methods import METHODS, Method, register_method
from opiq_jax.host.plan import experiment_from_configs, plan_experiment

SET = dict(rnd_outputs=64, rnd_batch=16, dora_buffer_factor=2, dora_gamma=0.9, bsp_heads=3, prior_values="network",
           chain_length=12)
"""Every option the paper's parts and the chain declare, away from its default."""

GROUPS = {("part", "rnd"): {"outputs": 64, "batch": 16}, ("part", "dora"): {"buffer_factor": 2, "gamma": 0.9},
          ("part", "bsp"): {"heads": 3, "prior_values": "network"}, ("environment", "chain"): {"length": 12}}
"""Where :data:`SET` reads, by short name."""


def read(static: StaticConfig, kind: str, owner: str, short: str):
    return getattr(static.part(owner) if kind == "part" else static.environment(owner), short)


def test_each_paper_option_reads_in_its_owners_group_by_its_short_name():
    static = static_for_env("chain", **SET)
    for (kind, owner), values in GROUPS.items():
        assert {short: read(static, kind, owner, short) for short in values} == values, owner
    defaults = static_for_env("chain")
    assert (defaults.part("rnd").outputs, defaults.part("bsp").heads, defaults.environment("chain").length) == (
        128, 10, 100)
    assert static_for_env("montezuma").part("rnd").outputs == 512  # an environment's default for a part's option
    kwargs = static_for_env("gymnax:DeepSea-bsuite", env_kwargs=(("size", 8),))
    assert kwargs.environment(kwargs.env).env_kwargs == (("size", 8),)  # the family's spec, gymnax:NAME, holds it
    assert kwargs.environment("gymnax:NAME").env_kwargs == (("size", 8),)


def test_the_public_names_stay_flat_and_equal_configurations_stay_equal():
    static = StaticConfig(env="chain", rnd_outputs=64, chain_length=12)
    assert StaticConfig(rnd_outputs=128) == StaticConfig() and hash(StaticConfig(rnd_outputs=128)) == hash(
        StaticConfig())  # a default written out is no setting
    assert static == dataclasses.replace(StaticConfig(env="chain", chain_length=12), rnd_outputs=64)
    saved = static.to_dict()
    assert set(DECLARED_STATIC_OPTIONS) <= set(saved) and (saved["rnd_outputs"], saved["chain_length"]) == (64, 12)
    assert not any(isinstance(v, dict) for v in saved.values())  # flat, as config.json has always been
    assert static.value("rnd_outputs") == 64 and static.value("precision") == "float32"
    assert not hasattr(static, "rnd_outputs")  # read through the group or by name, never as a flat attribute


def test_the_command_line_and_the_api_set_the_options_by_their_public_names():
    from opiq_jax.cli import plan_from_args, train_command

    argv = ["--env", "chain", "--method", "dqn_rnd", "--rnd-outputs", "64", "--chain-length", "12", "--steps", "200",
            "--log-every", "100"]
    parsed = plan_from_args(tyro.cli(train_command(), args=argv))[0].static
    api = plan_experiment("chain", ("dqn_rnd",), 1, options=dict(rnd_outputs=64, chain_length=12, steps=200,
                                                                  log_every=100)).static
    for static in (parsed, api):
        assert (static.part("rnd").outputs, static.environment("chain").length) == (64, 12)


def test_a_config_json_an_earlier_version_wrote_loads_into_the_groups(tmp_path):
    """Flat keys, without ``network_init`` or ``prior_values`` (neither existed) and with a field that is gone
    (``bonus_network``): the static section of docs/results/precision/chain-all-f32/bsp/config.json, with the parts'
    and the chain's options set."""
    old = {"static": {"env": "chain", "env_kwargs": [], "chain_length": 12, "network": "mlp", "hidden": [256, 256],
                      "total_steps": 100000, "log_every": 1000, "buffer_size": 10000, "batch_size": 64, "n_step": 1,
                      "train_every": 1, "target_update": 200, "gamma": 0.99, "count_features": "simhash",
                      "simhash_bits": 32, "sketch_rows": 4, "sketch_width": 16384, "shared_action_mask": False,
                      "grad_clip": 5.0, "rms_decay": 0.99, "rms_eps": 1e-08, "bonus_network": "none", "bsp_heads": 3,
                      "rnd_outputs": 64, "rnd_batch": 16, "dora_buffer_factor": 2, "dora_gamma": 0.9,
                      "precision": "float32", "envs_per_run": 1},
           "seed": 0, "shared_mask_seed": 12345,
           "runs": [{"run": 0, "method": "bsp", "setting": "paper", "seed": 0, "hparams": {
               "m": 2.0, "c_action": 0.0, "c_bootstrap": 0.0, "beta": 0.0, "epsilon_start": 0.009999999776482582,
               "epsilon_end": 0.009999999776482582, "epsilon_decay_steps": 0.0, "reward_subtract": 0.0,
               "final_bias": 0.0, "lr": 0.0005000000237487257, "beta_mmc": 0.0, "beta_dora": 0.0,
               "beta_dora_action": 0.0, "beta_rnd": 0.0, "beta_bsp": 100.0}}]}
    (tmp_path / "config.json").write_text(json.dumps(old, indent=1))
    static = experiment_from_configs(tmp_path).static
    expected = {**GROUPS, ("part", "bsp"): {"heads": 3, "prior_values": "auto"}}  # prior_values: not in the file
    for (kind, owner), values in expected.items():
        assert {short: read(static, kind, owner, short) for short in values} == values, owner
    assert static.environment("gymnax:NAME").env_kwargs == () and static.network_init == "flax"
    assert static.to_dict()["rnd_outputs"] == 64 and static.to_dict()["chain_length"] == 12

    gymnax = {**old, "static": {**old["static"], "env": "gymnax:DeepSea-bsuite", "env_kwargs": [["size", 8]],
                                "chain_length": 100}}
    (tmp_path / "config.json").write_text(json.dumps(gymnax, indent=1))
    static = experiment_from_configs(tmp_path).static
    assert static.environment(static.env).env_kwargs == (("size", 8),)


@pytest.mark.parametrize("owner, option_name, short", [
    (Owner("part", "rnd"), "rnd_outputs", "outputs"),
    (Owner("part", "bsp"), "prior_values", "prior_values"),  # no prefix: the whole name
    (Owner("environment", "chain"), "chain_length", "length"),
    (Owner("environment", "gymnax:NAME"), "env_kwargs", "env_kwargs"),
    (Owner("environment", "gymnax:NAME"), "gymnax_seed", "seed"),  # a family's prefix is its name before ':'
    (Owner("part", "rnd"), "rnd_class", "rnd_class"),  # .class could not be written
    (Owner("part", "rnd"), "rnd_2x", "rnd_2x"),  # nor .2x
    (Owner("part", "rnd"), "rnd__inner", "rnd__inner"),  # nor a name the group keeps (leading '_')
])
def test_the_short_name_is_the_public_name_without_the_owners_prefix_where_it_can_be(owner, option_name, short):
    assert short_name(owner, option_name) == short


def test_reading_what_nobody_declares_is_one_line():
    static = StaticConfig()
    with pytest.raises(ValueError, match=r"^no part 'nope' is registered \(registered parts: .*rnd") as error:
        static.part("nope")
    with pytest.raises(ValueError, match=r"^no environment 'nowhere' is registered \(registered environments: .*chain"):
        static.environment("nowhere")
    with pytest.raises(AttributeError, match=r"^part 'rnd' declares no static option 'heads' \(it declares: outputs, "
                                             r"batch\)$"):
        static.part("rnd").heads
    with pytest.raises(AttributeError, match=r"^part 'pseudocounts' declares no static option 'x' \(it declares: "
                                             r"none\)$"):
        static.part("pseudocounts").x
    with pytest.raises(ValueError, match=r"^StaticConfig has no option 'rnd_outputz'$"):
        static.value("rnd_outputz")
    assert "\n" not in str(error.value)


def test_a_group_is_a_read_only_view_that_copies_and_pickles():
    group = StaticConfig(rnd_outputs=64).part("rnd")
    with pytest.raises(AttributeError, match="read-only"):
        group.outputs = 8
    for again in (copy.deepcopy(group), pickle.loads(pickle.dumps(group))):
        assert (again.outputs, again.batch) == (64, 32)
    assert dir(group) == ["batch", "outputs"] and "outputs=64" in repr(group)


def test_an_option_two_environments_declare_alike_is_one_setting_read_in_both_groups():
    copied = register_environment(dataclasses.replace(environment_spec("chain"), name="chain_twin"))
    try:
        static = static_for_env("chain_twin", chain_length=7)
        assert static.environment("chain_twin").chain_length == 7  # its prefix is chain_twin_: the whole name
        assert static.environment("chain").length == 7
    finally:
        ENVIRONMENTS.pop(copied.name), ENVIRONMENT_ORIGINS.pop(copied.name), DECLARED_GROUPS.pop(
            Owner("environment", copied.name))


def test_two_options_that_would_read_as_one_name_are_refused():
    from opiq_jax.common.config import Option

    twins = (Option("twin_size", 4, "a size", type=int), Option("size", 4, "another size", type=int))
    clashing = type("Twin", (Part,), {"name": "twin", "static_options": twins})()
    message = "part 'twin': static options twin_size and size would both read as .size in its group"
    with pytest.raises(ValueError, match=message):
        register_method(Method("dqn_twin", (clashing,), "twins"))
    assert "dqn_twin" not in METHODS and Owner("part", "twin") not in DECLARED_GROUPS
    with pytest.raises(ValueError, match="may not start with '_'"):
        register_static_options(Owner("part", "hidden"), (Option("_secret", 1, "no", type=int),))
