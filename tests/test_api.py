"""The Python API: the README's example verbatim, loading and re-running a results folder, options declared once
(structural ones honoured or refused, never silently overridden), and imports nobody can shadow."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opiq_jax
from opiq_jax.common.config import RUNNER_SET, STATIC_OPTIONS
from opiq_jax.common.errors import UsageError
from opiq_jax.host.plan import plan_experiment
from opiq_jax.host.sweeping import load_preset, plan_static
from opiq_jax.runs.experiment import split_by_program
from tests.conftest import TEST_XLA_FLAGS, xla_flags_without

ROOT = Path(__file__).resolve().parents[1]
MARKER = r"<!-- api-example:[^>]*-->"


def readme_example() -> str:
    """The README's Python example: the fenced block right after the marker."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(MARKER + r"\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md has no marked Python example"
    return match.group(1)


def test_the_readmes_python_example_runs_verbatim_and_is_short(tmp_path):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 15
    # As a user runs it: without the test session's XLA flags (tests/conftest.py), which save compile time on the
    # tests' small programs but slow this one's 2 x 3,000 steps of 256-unit networks.
    flags = xla_flags_without(TEST_XLA_FLAGS)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| opiq |" in run.stdout and "| dqn_pc |" in run.stdout
    assert (tmp_path / "results/api-example/metrics.csv").exists()
    settings = {r["setting"] for r in json.loads((tmp_path / "results/api-grid/config.json").read_text())["runs"]}
    assert settings == {"m=0.5", "m=2"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "chain"
    results = opiq_jax.train(env="chain", methods=["opiq", "dqn_pc"], seeds=2, steps=600, log_every=300,
                             chain_length=6, hidden=(16,), buffer_size=600, out=out, progress=False, c_action=3)
    return results


def test_load_gives_the_metrics_the_resolved_config_and_the_trained_state(trained):
    loaded = opiq_jax.load(trained.folder)
    assert loaded.config["static"]["chain_length"] == 6 and len(loaded.config["runs"]) == 4
    assert [r["setting"] for r in loaded.config["runs"]] == ["c_action=3"] * 2 + ["paper"] * 2  # dqn_pc has no C_action
    steps = sorted({r["step"] for r in loaded.metrics})
    assert steps == [300, 600] and {r["method"] for r in loaded.metrics} == {"opiq", "dqn_pc"}
    state = loaded.state()
    assert state.step == 600 and [r["method"] for r in state.runs] == ["opiq", "opiq", "dqn_pc", "dqn_pc"]
    kernel = state.params["params"]["Dense_0"]["kernel"]
    assert kernel.shape[0] == 4 and np.all(np.isfinite(kernel))
    sketch = np.asarray(state.counts.sketch)
    assert sketch.shape[0] == 4 and sketch.min() >= 0
    # Every run took 600 steps, each counted once in every row of its action's sketch.
    assert np.all(sketch.sum(axis=(1, 3))[:, 0] == 600)
    assert "opiq" in loaded.summary("test_return")
    with pytest.raises(UsageError, match="has no metric 'nope': it has"):
        loaded.summary("nope")


def test_rerun_of_a_saved_config_reproduces_the_metrics(trained, tmp_path):
    again = opiq_jax.rerun(trained.folder / "config.json", tmp_path / "again", progress=False)
    assert (again.folder / "metrics.csv").read_bytes() == (trained.folder / "metrics.csv").read_bytes()


def test_bad_api_input_is_one_line_naming_the_option_as_written_in_python(tmp_path):
    cases = [
        (dict(steps=0), "steps must be >= 1, got 0"),
        (dict(m=-1), "m must be >= 0, got -1"),
        (dict(methods=["opiq", "nope"]), "unknown method 'nope': use any of dqn, dqn_pc"),
        (dict(seeds=0), "seeds must be a whole number >= 1"),
        (dict(chain_lenght=5), "unknown option chain_lenght; did you mean chain_length"),
        (dict(grid={"bsp_heads": [2, 3]}), "grid takes hyperparameters only"),
        (dict(grid={"m": []}), "grid m: give a non-empty list"),
        (dict(beta_rnd=1.0), "beta_rnd applies to none of opiq"),
        (dict(steps=1000, log_every=300), "steps (1000) must be a multiple of log_every (300)"),
        (dict(env="nowhere"), "unknown env 'nowhere'"),
        (dict(parts=("dora",)), "the parts come from the methods"),
        (dict(precision="float16"), "precision must be one of float32, bfloat16"),
        (dict(weight_storage="packed"), "weight_storage packed needs precision bfloat16"),
        (dict(mlp_backward="pallas"), "mlp_backward pallas needs weight_storage packed"),
    ]
    for kwargs, message in cases:
        with pytest.raises(UsageError) as caught:
            opiq_jax.train(out=tmp_path / "never", progress=False, **kwargs)
        assert message in str(caught.value) and "\n" not in str(caught.value), (kwargs, caught.value)
    assert not (tmp_path / "never").exists()


# A valid value other than the default for every static option users set: each must reach the program.
STRUCTURAL = dict(
    chain_length=12, network="auto", hidden=(32,), total_steps=2000, log_every=500, buffer_size=5000, batch_size=32,
    n_step=2, train_every=2, target_update=100, gamma=0.9, count_features="exact", simhash_bits=16, sketch_rows=2,
    sketch_width=1024, shared_action_mask=True, grad_clip=1.0, rms_decay=0.95, rms_eps=1e-6, bsp_heads=5,
    rnd_outputs=64, rnd_batch=16, dora_buffer_factor=2, dora_gamma=0.9, precision="bfloat16", maze_torso="xla",
    target_values="network", envs_per_run=2, overlap=False, env_kwargs=(("size", 8),), weight_storage="packed",
    mlp_backward="pallas", prior_values="table", mmc_unfinished="n_step", head_init_scale=0.5, network_init="flax",
    cfn_outputs=8, cfn_torso="mlp", cfn_hidden=(16,), cfn_lr=1e-3, craftax_episode_steps=50,
)
# Options valid only beside another's non-default value: that value is set with them.
NEEDS = {"weight_storage": {"precision": "bfloat16"},
         "mlp_backward": {"precision": "bfloat16", "weight_storage": "packed"},
         "envs_per_run": {"buffer_size": 4096}, "overlap": {"buffer_size": 4096},
         "mmc_unfinished": {"buffer_size": 4096},  # Montezuma's, smaller
         **dict.fromkeys(("cfn_outputs", "cfn_torso", "cfn_hidden", "cfn_lr"), {"count_features": "cfn"})}
# options of the pool path (Montezuma's): refused on the chain
POOL_ONLY = ("envs_per_run", "overlap", "mmc_unfinished")


def test_every_static_option_has_a_structural_case():
    assert set(STRUCTURAL) | set(RUNNER_SET) == set(STATIC_OPTIONS)


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_a_structural_option_in_a_preset_or_the_api_reaches_every_program(name):
    if name in POOL_ONLY:
        pytest.importorskip("envpool")
    if name == "craftax_episode_steps":
        pytest.importorskip("craftax")
    env = ("gymnax:DeepSea-bsuite" if name == "env_kwargs" else "craftax:Classic" if name == "craftax_episode_steps"
           else "montezuma" if name in POOL_ONLY else "chain")
    value = STRUCTURAL[name]
    assert value != STATIC_OPTIONS[name].default
    written = STATIC_OPTIONS[name].public_name
    needed = NEEDS.get(name, {})
    preset = load_preset({"env": env, "seeds": 1, "static": {name: value, **needed},
                          "grids": [{"method": "opiq"}, {"method": "bsp"}, {"method": "dqn_rnd"}]})
    options = {written: value, **{STATIC_OPTIONS[k].public_name: v for k, v in needed.items()}}
    methods = ("opiq", "bsp", "dqn_rnd") + (() if env == "montezuma" else ("dqn_dora",))  # no DORA there
    api = plan_experiment(env, methods, 1, options=options)
    for static in (plan_static(preset), api.static):
        programs = split_by_program(dataclasses.replace(api, static=static))
        assert len(programs) == len(methods)
        assert all(p.static.value(name) == value for p in programs.values()), name
    if name in POOL_ONLY:  # on an environment stepped in the program it would do nothing: refused
        with pytest.raises(UsageError, match=f"{written} applies to environments stepped through a pool"):
            plan_experiment("chain", ("opiq",), 1, options={written: value})


@pytest.mark.parametrize("name, message", [("env", "the preset's env field chooses"),
                                           ("parts", "the parts come from the methods")])
def test_options_the_runner_sets_are_refused_in_a_preset(name, message):
    with pytest.raises(UsageError, match=message):
        load_preset({"env": "chain", "seeds": 1, "static": {name: "maze" if name == "env" else ["dora"]},
                     "grids": [{"method": "opiq"}]})


def test_a_user_envs_folder_in_the_working_directory_changes_nothing(tmp_path):
    """A project of the user's own with an ``envs`` package (a common name) beside it: opiq-jax imports its own."""
    user = tmp_path / "envs"
    user.mkdir()
    (user / "__init__.py").write_text("raise ImportError('the user envs package was imported')\n")
    (user / "maze.py").write_text("raise ImportError('the user envs.maze was imported')\n")
    code = ("import sys, opiq_jax\n"
            "r = opiq_jax.train(env='maze', methods=['opiq'], seeds=1, steps=20, log_every=20, buffer_size=100, "
            "batch_size=8, progress=False, out='o')\n"
            "assert 'envs' not in sys.modules, sys.modules['envs']\n"
            "print(len(r.metrics), opiq_jax.envs.__file__ if hasattr(opiq_jax, 'envs') else '')\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.strip().splitlines()[-1].split()[0]) > 0


LOOP_NAMES = ("checkpoint_every", "checkpoint_seconds", "stop_on_nonfinite", "allow_nonfinite", "track", "programs")


def literal_defaults(source: str) -> list[str]:
    """Where ``source`` gives one of the loop's options a literal default (a signature's or a dataclass field's)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        pairs = []
        if isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = [*zip(positional[len(positional) - len(node.defaults):], node.defaults),
                     *zip(node.kwonlyargs, node.kw_defaults)]
            pairs = [(arg.arg, default) for arg, default in pairs]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, node.value)]
        found += [f"{name} (line {value.lineno})" for name, value in pairs
                  if name in LOOP_NAMES and isinstance(value, ast.Constant)]
    return found


def test_loop_options_are_declared_once_and_every_face_takes_them_from_the_declaration():
    """The loop's and the sweep's options (config.LOOP_OPTIONS, SWEEP_OPTIONS) give the command line, the Python
    API and the loop their defaults; no other module writes one of its own. The bench's static options are the
    trainer's declarations, with its one documented difference."""
    import inspect
    import typing

    from opiq_jax import api, cli
    from opiq_jax.host import host_loop as runner, sweeping
    from opiq_jax.benchmark.options import BENCH_DEFAULTS, Bench
    from opiq_jax.common.config import LOOP_OPTIONS, SWEEP_OPTIONS

    train_fields = {f.name: f.default for f in dataclasses.fields(cli.train_command())}
    train_signature = inspect.signature(api.train).parameters
    for name, option in LOOP_OPTIONS.items():
        assert train_fields[name] == option.default, name
        if name != "allow_nonfinite":  # the command's exit code: the API raises nothing for it
            assert train_signature[name].default == option.default, name
    loop = runner.Loop()
    assert (loop.checkpoint_seconds, loop.track, loop.stop_on_nonfinite, loop.progress) == tuple(
        LOOP_OPTIONS[n].default for n in ("checkpoint_every", "track", "stop_on_nonfinite", "progress"))
    sweep_fields = {f.name: f.default for f in dataclasses.fields(cli.Sweep)}
    for name, option in SWEEP_OPTIONS.items():
        assert sweep_fields[name] == option.default, name
        if name != "allow_nonfinite":
            assert inspect.signature(api.sweep).parameters[name].default == option.default, name
    assert inspect.signature(sweeping.run_sweep).parameters["checkpoint_seconds"].default == 300.0
    written = {str(p.relative_to(ROOT)): literal_defaults(p.read_text())
               for p in sorted((ROOT / "opiq_jax").rglob("*.py")) if p.name != "config.py"}
    assert {path: found for path, found in written.items() if found} == {}
    hints = typing.get_type_hints(Bench, include_extras=True)
    for name in BENCH_DEFAULTS:
        assert STATIC_OPTIONS[name].doc in hints[name].__metadata__[0].help, name
        if STATIC_OPTIONS[name].choices:
            assert set(STATIC_OPTIONS[name].choices) <= set(typing.get_args(typing.get_args(hints[name])[0])), name
    assert Bench().count_features == "exact" != STATIC_OPTIONS["count_features"].default


def test_the_loop_options_check_finds_a_literal_default():
    assert literal_defaults("def f(x, checkpoint_every: float = 60.0, *, track='none'):\n    pass\n") == [
        "checkpoint_every (line 1)", "track (line 1)"]
    assert literal_defaults("class C:\n    programs: str = 'sequential'\n    other: int = 3\n") == ["programs (line 2)"]
    assert literal_defaults("def f(track=DEFAULTS['track']):\n    pass\n") == []


def test_options_of_one_kind_split_every_option_in_two():
    static, hparams = opiq_jax.options("static"), opiq_jax.options("hyperparameters")
    assert not set(static) & set(hparams) and {**static, **hparams} == opiq_jax.options()
    assert "steps" in static and "c_action" in hparams and "beta" in hparams
    with pytest.raises(UsageError, match="kind must be one of all, static, hyperparameters, not 'hparams'"):
        opiq_jax.options("hparams")
