"""A table of bad inputs across ``train``, ``sweep``, ``plot``, ``bench``, presets and the Python API, then the
problems that used to pass silently or end in a traceback.

Each bad input must stop with one line that says what to change (exit code 2 on the command line, a
:class:`~opiq_jax.common.errors.UsageError` in Python) and leave an existing results folder byte for byte as it was.
``pytest -s`` prints the count.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import opiq_jax
from opiq_jax.cli import main
from opiq_jax.common.errors import UsageError
from opiq_jax.parts import PARTS
from opiq_jax.registry.methods import METHODS, ORIGINS

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--chain-length", "6", "--hidden", "16", "--buffer-size", "600", "--steps", "600", "--log-every", "300",
         "--seeds", "1", "--no-progress", "--no-plot"]
SMALL_API = dict(chain_length=6, hidden=(16,), buffer_size=600, steps=600, log_every=300, seeds=1, progress=False)
GOOD_PRESET = {"env": "chain", "seeds": 1, "static": {"total_steps": 600, "log_every": 300},
               "grids": [{"method": "opiq"}]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """An existing results folder, a broken copy of it, two experiments side by side, and preset files."""
    root = tmp_path_factory.mktemp("bad")
    main(["train", *SMALL, "--out", str(root / "existing")])
    broken = root / "broken"
    shutil.copytree(root / "existing", broken)
    (broken / "config.json").write_text('{"static": {"env": "chain", ')  # cut short
    shutil.copytree(root / "existing", root / "two" / "a")
    shutil.copytree(root / "existing", root / "two" / "b")
    presets = {
        "unknown_method": {**GOOD_PRESET, "grids": [{"method": "opiq_plus"}]},
        "zero_steps": {**GOOD_PRESET, "static": {"total_steps": 0}},
        "sets_env": {**GOOD_PRESET, "static": {"env": "maze"}},
        "structural_grid": {**GOOD_PRESET, "grids": [{"method": "bsp", "grid": {"bsp_heads": [2, 4]}}]},
        "foreign_hparam": {**GOOD_PRESET, "grids": [{"method": "dqn", "grid": {"m": [1, 2]}}]},
        "unknown_field": {**GOOD_PRESET, "sedes": 3},
        "bad_value": {**GOOD_PRESET, "grids": [{"method": "opiq", "grid": {"c_action": [-1]}}]},
    }
    for name, preset in presets.items():
        (root / f"{name}.json").write_text(json.dumps(preset))
    (root / "not_json.json").write_text("{'env': 'chain'}")
    (root / "a_file").write_text("not a folder")
    user = root / "user's, \"own\" ✓"  # a folder of the user's, with files named as ours
    user.mkdir()
    (user / "metrics.csv").write_text("mine\n")
    (user / "run_info.json").write_text("{}")
    (root / "huge_seed.json").write_text(json.dumps({**GOOD_PRESET, "seed": 2**32}))
    twice = {**GOOD_PRESET, "grids": [{"method": "opiq", "grid": {"m": [1, 1.0]}}]}
    (root / "twice.json").write_text(json.dumps(twice))
    unconfigured = root / "unconfigured"  # a run whose config.json was deleted
    shutil.copytree(root / "existing", unconfigured)
    (unconfigured / "config.json").unlink()
    links = root / "links"
    links.mkdir()
    (links / "loop").symlink_to("loop")
    (links / "dangling").symlink_to("nowhere")
    older = root / "older"  # a program of a folder an older opiq-jax wrote (its config.json names a bonus_network)
    shutil.copytree(ROOT / "docs" / "results" / "precision" / "chain-all-f32" / "plain", older)
    return {"root": root, "existing": root / "existing", "broken": broken, "user": user, "unconfigured": unconfigured,
            "loop": links / "loop", "dangling": links / "dangling", "older": older}


def cli_cases(f: dict[str, Path]) -> list[tuple[list[str], str]]:
    existing, root = str(f["existing"]), f["root"]
    return [
        (["train", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["train", "--m", "-1"], "--m must be >= 0, got -1"),
        (["train", "--method", "opiq", "nope"], "unknown method 'nope': use any of dqn, dqn_pc"),
        (["train", "--steps", "1000", "--log-every", "300"], "--steps (1000) must be a multiple of --log-every (300)"),
        (["train", "--epsilon-start", "2"], "--epsilon-start must lie in [0, 1], got 2"),
        # (other modules of a test process may register environments of their own: the list's start is the paper's)
        (["train", "--env", "mars"], "unknown --env 'mars': use chain, maze, montezuma, "),
        (["train", "--chain-length", "1"], "--chain-length must be >= 2, got 1"),
        (["train", "--seeds", "0"], "--seeds must be a whole number >= 1, got 0"),
        (["train", "--grid", "bsp_heads=2,3"], "--grid takes hyperparameters only: bsp_heads changes the compiled"),
        (["train", "--grid", "m=a,b"], "--grid m: values must be numbers, got 'a,b'"),
        (["train", "--grid", "m"], "--grid takes NAME=V1,V2,... pairs, got 'm'"),
        (["train", "--beta-rnd", "1"], "--beta-rnd applies to none of opiq"),
        (["train", "--env-arg", "size=3"], "--env-arg applies to gymnax:NAME only, not to chain"),
        (["train", "--num-processes", "2"], "--coordinator, --num-processes and --process-id go together"),
        (["train", "--config", existing, "--m", "3"], "--config re-runs the saved experiment as it is: drop --m"),
        (["train", "--config", str(root / "nowhere" / "config.json")], "does not exist"),
        (["train", "--config", str(f["broken"] / "config.json")], f"{f['broken'] / 'config.json'} is not valid JSON"),
        (["train", *SMALL, "--out", str(root / "a_file")], f"--out {root / 'a_file'} is a file, not a folder"),
        (["train", *SMALL, "--seed", "3", "--out", existing], f"{existing} holds a different experiment"),
        (["sweep", "no_such_preset"], "unknown preset 'no_such_preset': use a JSON file or one of chain_baselines"),
        (["sweep", str(root / "unknown_method.json")], "preset unknown_method: unknown method 'opiq_plus'"),
        (["sweep", str(root / "zero_steps.json")], "preset zero_steps: static.total_steps must be >= 1, got 0"),
        (["sweep", str(root / "sets_env.json")], "preset sets_env: static.env cannot be set"),
        (["sweep", str(root / "structural_grid.json")],
         "preset structural_grid: grids[bsp] takes hyperparameters only"),
        (["sweep", str(root / "foreign_hparam.json")], "preset foreign_hparam: the grid for dqn has hyperparameters"),
        (["sweep", str(root / "unknown_field.json")], "preset unknown_field: unknown field(s) sedes"),
        (["sweep", str(root / "bad_value.json")], "preset bad_value: grids[opiq] c_action must be >= 0, got -1"),
        (["sweep", str(root / "not_json.json")], f"{root / 'not_json.json'} is not valid JSON"),
        (["sweep", "chain_opiq", "--max-batch-runs", "0"], "--max-batch-runs must be >= 1, got 0"),
        (["plot", existing, "--metrics", "nope"], "nope"),
        (["plot", str(root / "nowhere")], f"{root / 'nowhere'} does not exist"),
        (["plot", str(root / "two")], "holds 2 experiments"),
        (["bench", "--min-runs", "0"], "--min-runs must be >= 1, got 0"),
        (["bench", "--min-runs", "4", "--max-runs", "2"], "--max-runs (2) must be >= --min-runs (4)"),
        (["bench", "--buffer-size", "1"], "--buffer-size must be >= 2, got 1"),
        # seeds JAX's keys cannot hold (they trained as smaller seeds, or ended in a traceback)
        (["train", *SMALL, "--seed", "4294967296"], "--seed must be below 2**32 = 4,294,967,296"),
        (["train", *SMALL, "--seed", "18446744073709551617"], "--seed must be below 2**32"),
        (["train", *SMALL, "--seed", "-1"], "--seed must be a whole number >= 0, got -1"),
        # intervals and numbers that are not finite
        (["train", *SMALL, "--checkpoint-every", "nan"], "--checkpoint-every must be a finite number >= 0, got nan"),
        (["train", *SMALL, "--checkpoint-every", "inf"], "--checkpoint-every must be a finite number >= 0, got inf"),
        (["train", *SMALL, "--checkpoint-every", "-1"], "--checkpoint-every must be a finite number >= 0, got -1"),
        (["sweep", "chain_opiq", "--checkpoint-every", "nan"], "--checkpoint-every must be a finite number >= 0"),
        (["train", *SMALL, "--lr", "inf"], "--lr must be a finite number, got inf"),
        (["train", *SMALL, "--m", "nan"], "--m must be a finite number, got nan"),
        (["train", *SMALL, "--grid", "lr=0.001,inf"], "--lr must be a finite number, got inf"),
        # one value twice would train one setting twice under one label
        (["train", *SMALL, "--grid", "m=1,1.0"], "--grid m names the value 1 twice"),
        (["train", *SMALL, "--grid", "m=0.1,0.1000000000001"], "--grid m names the value 0.1 twice (as labels write"),
        # options of the pool path alone (Montezuma's), which did nothing on the chain
        (["train", *SMALL, "--envs-per-run", "2"], "--envs-per-run applies to environments stepped through a pool"),
        (["train", *SMALL, "--no-overlap"], "--overlap applies to environments stepped through a pool"),
        (["sweep", str(root / "twice.json")], "preset twice: grids[opiq] m names the value 1 twice"),
        (["sweep", str(root / "huge_seed.json")], "preset huge_seed: seed must be below 2**32"),
        # folders that are not an experiment's
        (["train", *SMALL, "--out", ""], "--out is empty: name a folder"),
        (["sweep", str(root / "twice.json"), "--out", ""], "--out is empty: name a folder"),
        (["train", *SMALL, "--out", str(f["user"])], "already holds files that opiq-jax did not write (metrics.csv, "
                                                       "run_info.json)"),
        (["sweep", "chain_opiq", "--out", existing], "holds an opiq-jax training run (config.json), not a sweep"),
        (["train", "--plugin", "no_such_plugin_module"], "--plugin no_such_plugin_module: importing it failed "
                                                          "(ModuleNotFoundError"),
        # a run whose config.json was deleted: named, with how to resume it or start anew
        (["train", *SMALL, "--out", str(f["unconfigured"])], f"--out {f['unconfigured']} holds an opiq-jax run "
         "(checkpoint.msgpack, metrics.csv) whose config.json is missing (deleted?): put config.json back to resume it "
         "(the same command then does), or choose a new --out to start anew"),
        (["plot", str(f["unconfigured"])], "whose config.json is missing (deleted?): put config.json back to plot it"),
        # symbolic links that lead nowhere (a loop was "cannot be written (File exists)")
        (["train", *SMALL, "--out", str(f["loop"])], f"--out {f['loop']} is a symbolic link that loops back on itself: "
                                                      "point it at a folder, or choose another"),
        (["train", *SMALL, "--out", str(f["dangling"])], f"--out {f['dangling']} is a symbolic link to nowhere, which "
                                                          "does not exist"),
        (["plot", str(f["loop"])], f"{f['loop']} is a symbolic link that loops back on itself"),
        (["train", *SMALL, "--out", str(f["loop"] / "run")], "lies under a symbolic link that loops back on itself"),
        (["train", *SMALL, "--max-minutes", "0"], "--max-minutes must be a finite number > 0, got 0.0"),
        (["train", "--chain-length", "100", "--seeds", "20", "--no-progress", "--out", str(f["older"])],
         f"{f['older'] / 'config.json'} was written by an opiq-jax from before 28a7929 (2026-11-26, when the methods "
         "became parts: it names a bonus_network, not parts): this version reads its metrics (summary, curves, plot) "
         "but cannot resume it; opiq-jax at commit 28a7929~1 can"),
    ]


def api_cases(f: dict[str, Path]) -> list[tuple[callable, str]]:
    existing = f["existing"]
    return [
        (lambda: opiq_jax.train(steps=0, out=existing), "steps must be >= 1, got 0"),
        (lambda: opiq_jax.train(chain_lenght=6, out=existing),
         "unknown option chain_lenght; did you mean chain_length"),
        (lambda: opiq_jax.train(grid={"m": "0.5"}, out=existing), "grid m: give a non-empty list of values"),
        (lambda: opiq_jax.load(f["root"] / "nowhere"), "does not exist"),
        (lambda: opiq_jax.load(existing).summary("nope"), "has no metric 'nope': it has"),
        (lambda: opiq_jax.sweep({"env": "chain", "seeds": 1}), "preset (dict): a preset needs env and grids"),
        (lambda: opiq_jax.bench(nope=1), "unknown bench option nope"),
        (lambda: opiq_jax.bench(min_runs=0), "min_runs must be >= 1, got 0"),
        (lambda: opiq_jax.rerun(f["broken"]), "is not valid JSON"),
        (lambda: opiq_jax.train(seeds=[2**32], out=existing), "seeds must be below 2**32"),
        (lambda: opiq_jax.train(seed=2**64 + 1, out=existing), "seed must be below 2**32"),
        (lambda: opiq_jax.train(out=123), "out must be a path (str or pathlib.Path), got 123"),
        (lambda: opiq_jax.train(out=""), "out is empty: name a folder"),
        (lambda: opiq_jax.train(env=None, out=existing), "env must be an environment's name"),
        (lambda: opiq_jax.train(methods=None, out=existing), "methods must be a method's name or a list of them"),
        (lambda: opiq_jax.train(methods=[3], out=existing), "methods must be a method's name or a list of them"),
        (lambda: opiq_jax.train(checkpoint_every=float("nan"), out=existing), "checkpoint_every must be a finite"),
        (lambda: opiq_jax.train(max_minutes=float("inf"), out=existing), "max_minutes must be a finite number > 0"),
        (lambda: opiq_jax.train(progress="no", out=existing), "progress must be True or False, got 'no'"),
        (lambda: opiq_jax.train(lr=float("inf"), out=existing), "lr must be a finite number, got inf"),
        (lambda: opiq_jax.train(grid={"m": [1, 1.0]}, out=existing), "grid m names the value 1 twice"),
        (lambda: opiq_jax.train(out=f["user"], **SMALL_API), "already holds files that opiq-jax did not write"),
        (lambda: opiq_jax.sweep(GOOD_PRESET, out=123), "out must be a path"),
        (lambda: opiq_jax.sweep(GOOD_PRESET, out=f["user"]), "already holds files that opiq-jax did not write"),
        (lambda: opiq_jax.load(123), "folder must be a path"),
        (lambda: opiq_jax.rerun(None), "config must be a path (str or pathlib.Path), got None"),
        (lambda: opiq_jax.load(f["unconfigured"]), "whose config.json is missing (deleted?): put config.json back"),
        (lambda: opiq_jax.load(f["loop"]), f"{f['loop']} is a symbolic link that loops back on itself"),
        (lambda: opiq_jax.load(existing).plot(3), "metrics must be a metric's name or a list of them, got 3"),
        (lambda: opiq_jax.bench(min_runs=np.int64(0)), "min_runs must be >= 1, got 0"),  # not np.int64(0)
    ]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_bad_input_gives_one_line_and_leaves_existing_results_unchanged(folders, capsys):
    before = snapshot(folders["root"])
    cli, api = cli_cases(folders), api_cases(folders)
    for argv, message in cli:
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2, (argv, err)
        assert len(err.splitlines()) == 1 and err.startswith("opiq-jax: error: ") and message in err, (argv, err)
    for call, message in api_cases(folders):
        with pytest.raises(UsageError) as caught:
            call()
        assert message in str(caught.value) and "\n" not in str(caught.value), (message, caught.value)
    assert snapshot(folders["root"]) == before
    with capsys.disabled():
        print(f"\nbad inputs: {len(cli)} on the command line and {len(api)} in Python, each one line, "
              "no results changed")
    assert len(cli) + len(api) >= 25


# ------------------------------------------------------------------------------------ what used to pass silently


def test_a_run_that_ended_non_finite_exits_with_1_unless_allowed_and_the_closing_lines_name_every_metrics_file(
        tmp_path, capsys):
    """Two programs (RND adds one) into a folder whose name needs quoting; a learning rate of 1e30 sends runs to
    infinity. The command writes everything, names each program's metrics.csv, and exits with 1 (0 if allowed)."""
    out = tmp_path / "two programs, 'quoted' ✓"
    argv = ["train", *SMALL, "--method", "opiq", "dqn_rnd", "--grid", "lr=0.0005,1e30", "--out", str(out)]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    printed = capsys.readouterr()
    assert stop.value.code == 1
    last = printed.err.strip().splitlines()[-1]
    assert last.startswith("opiq-jax: 2 run(s) became NaN or infinite (the first: opiq, lr=1e+30, seed 0)"), last
    assert last.endswith("exit code 1 (--allow-nonfinite exits with 0)")
    closing = [line for line in printed.out.splitlines() if line.startswith("opiq-jax: metrics in ")][0]
    assert f"{shlex.quote(str(out / 'plain' / 'metrics.csv'))} and {shlex.quote(str(out / 'rnd' / 'metrics.csv'))}" \
        in closing
    assert f"opiq-jax plot {shlex.quote(str(out))} [--statistic iqm]" in closing
    assert f"opiq-jax train --config {shlex.quote(str(out))};" in closing
    assert not (out / "metrics.csv").exists() and (out / "plain" / "metrics.csv").exists()
    main([*argv, "--allow-nonfinite"])  # the finished experiment again: exit 0, the runs still named
    assert "2 run(s) became NaN or infinite" in capsys.readouterr().out


def test_a_run_longer_than_a_day_says_so_after_its_first_chunk(tmp_path, capsys):
    results = opiq_jax.train(out=tmp_path / "long", **{**SMALL_API, "steps": 3 * 10**14}, max_minutes=1e-9)
    assert not results.finished
    said = [line for line in capsys.readouterr().out.splitlines() if "more than a day" in line]
    assert len(said) == 1 and "the 299,999,999,999,700 steps per run left take about" in said[0], said
    assert "years" in said[0] and "stop at any time with Ctrl-C" in said[0]


# ------------------------------------------------------------------------------------ what used to end in a traceback


def test_a_metrics_file_without_its_header_after_the_whole_run_is_restored(tmp_path, capsys):
    argv = ["train", *SMALL, "--out", str(tmp_path / "headless")]
    main(argv)
    metrics = tmp_path / "headless" / "metrics.csv"
    whole = metrics.read_bytes()
    metrics.write_bytes(whole.split(b"\r\n", 1)[1])
    main(argv)
    assert metrics.read_bytes() == whole
    out = capsys.readouterr().out
    assert "was without its header: restored its" in out and "| opiq | 1 | 600 |" in out


def test_an_empty_opiq_jax_folder_in_the_working_directory_does_not_hide_the_command(tmp_path):
    """The ``opiq-jax`` command starts Python outside the working directory, so a results folder named ``opiq_jax``
    there hides nothing from it (the installed wheel's case, for Python itself, is in tests/test_packaging.py)."""
    (tmp_path / "opiq_jax").mkdir()
    command = Path(sys.executable).with_name("opiq-jax")
    run = subprocess.run([str(command), "train", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--chain-length" in run.stdout


# ------------------------------------------------------------------------------------ extensions that failed silently


@contextlib.contextmanager
def registries_restored():
    """The method, part and origin registries (and imported plugin modules) as they were, after the block."""
    saved = [(registry, dict(registry)) for registry in (METHODS, PARTS, ORIGINS)]
    modules = set(sys.modules)
    try:
        yield
    finally:
        for registry, before in saved:
            registry.clear()
            registry.update(before)
        for name in set(sys.modules) - modules:
            if name.endswith("_plugin"):
                del sys.modules[name]


class Bonus(opiq_jax.Part):
    """A part whose hooks return what ``shape`` says (the right shapes by default), for the tests below."""

    name = "test_bonus"
    hparams = (opiq_jax.Option("test_bonus", 0.0, "A constant bonus.", minimum=0.0),)
    shares_program = True
    off = {"test_bonus": 0.0}
    metric_names = ("test_bonus",)
    wrong = ""

    def action_bonus(self, agent, run, obs, counts):
        shape = (agent.num_actions,) if self.wrong == "action_bonus" else (obs.shape[0], agent.num_actions)
        return jnp.full(shape, run.hparams["test_bonus"])

    def intrinsic_reward(self, agent, run, batch):
        shape = batch.rewards.shape[:1] if self.wrong == "intrinsic_reward" else batch.rewards.shape
        return jnp.full(shape, run.hparams["test_bonus"])

    def bootstrap_bonus(self, agent, run, batch):
        return jnp.zeros((batch.rewards.shape[0], agent.num_actions + (self.wrong == "bootstrap_bonus")))

    def metrics(self, agent, run):
        return {"other" if self.wrong == "metrics" else "test_bonus": run.hparams["test_bonus"]}


class StatefulBonus(opiq_jax.Part):
    """A part with a state of its own, whose update may change the state's shape."""

    name = "test_stateful"
    wrong = ""

    def init(self, agent, run_key, example):
        return jnp.zeros((3,))

    def update(self, agent, run, batch, key):
        return jnp.zeros((4,) if self.wrong == "update" else (3,))


WRONG_HOOKS = {
    "intrinsic_reward": (Bonus, "part 'test_bonus': intrinsic_reward returned shape [64], expected [64, 1] ([B, n]"),
    "action_bonus": (Bonus, "part 'test_bonus': action_bonus returned shape [2], expected [1, 2] ([E, A]"),
    "bootstrap_bonus": (Bonus, "part 'test_bonus': bootstrap_bonus returned shape [64, 3], expected [64, 2]"),
    "metrics": (Bonus, "part 'test_bonus': metrics returned ['other'], expected a dict of its metric_names"),
    "update": (StatefulBonus, "part 'test_stateful': update returned a tree of another structure, shape or dtype"),
}


@pytest.mark.parametrize("hook", list(WRONG_HOOKS))
def test_a_part_returning_the_wrong_shape_stops_in_one_line_naming_the_part_and_the_hook(tmp_path, hook):
    kind, message = WRONG_HOOKS[hook]
    part = type("Wrong", (kind,), {"wrong": hook})()
    settings = {"test_bonus": 1.0} if kind is Bonus else {}
    with registries_restored():
        opiq_jax.register_method(opiq_jax.Method("dqn_wrong", (part,), "a part with a wrong hook",
                                                 settings={"chain": settings}))
        with pytest.raises(opiq_jax.PartError) as caught:
            opiq_jax.train(methods=["dqn_wrong"], out=tmp_path / "wrong", **SMALL_API)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value
    assert not (tmp_path / "wrong" / "metrics.csv").exists()


def test_registration_is_all_or_nothing_and_the_same_definition_registers_again():
    with registries_restored():
        bad = opiq_jax.Method("dqn_bonus", (Bonus(),), "a typo in its settings", settings={"chain": {"test_bonsu": 1}})
        with pytest.raises(ValueError, match="sets test_bonsu on chain, which none of its parts"):
            opiq_jax.register_method(bad)
        assert "dqn_bonus" not in METHODS and "test_bonus" not in PARTS  # nothing of it stays behind
        good = opiq_jax.Method("dqn_bonus", (Bonus(),), "corrected", settings={"chain": {"test_bonus": 1.0}})
        opiq_jax.register_method(good)  # the corrected cell runs again
        opiq_jax.register_method(opiq_jax.Method("dqn_bonus", (Bonus(),), "the cell run twice",
                                                 settings={"chain": {"test_bonus": 2.0}}))
        assert METHODS["dqn_bonus"].description == "the cell run twice" and ORIGINS["dqn_bonus"] == __name__
        other = type("Impostor", (opiq_jax.Part,), {"name": "test_bonus"})()  # another definition, same name
        with pytest.raises(ValueError, match="another part is already registered as 'test_bonus'"):
            opiq_jax.register_method(opiq_jax.Method("dqn_other", (other,), "clash", settings={}))
        assert "dqn_other" not in METHODS
        with pytest.raises(ValueError, match="method dqn_twice names a part twice: test_bonus, test_bonus"):
            opiq_jax.register_method(opiq_jax.Method("dqn_twice", (Bonus(), Bonus()), "twice", settings={}))
        assert "dqn_twice" not in METHODS
        with pytest.raises(ValueError, match="opiq is one of the paper's methods and cannot be replaced"):
            opiq_jax.register_method(opiq_jax.Method("opiq", ("pseudocounts",), "not OPIQ", settings={}))
        assert METHODS["opiq"].description.startswith("OPIQ")
        unswitchable = type("On", (opiq_jax.Part,), {"name": "always_on", "shares_program": True})()
        with pytest.raises(ValueError, match="'always_on' shares programs, so it must declare off"):
            opiq_jax.register_part(unswitchable)


def test_a_parts_defaults_never_switch_it_on_for_methods_that_do_not_name_it():
    from opiq_jax.registry.methods import program_parts
    from opiq_jax.host.plan import plan_experiment

    loud = type("Loud", (Bonus,), {"name": "test_loud", "hparams": (
        opiq_jax.Option("loud", 5.0, "On by default.", minimum=0.0),), "off": {"loud": 0.0}, "metric_names": ()})
    with registries_restored():
        opiq_jax.register_method(opiq_jax.Method("dqn_loud", (loud(),), "loud", settings={"chain": {}}))
        assert "test_loud" not in program_parts(["dqn", "opiq"])  # registering it changes no other experiment
        experiment = plan_experiment("chain", ["dqn_loud", "dqn"], 1, options={"steps": 600, "log_every": 300})
        loudness = {r.method: float(hp["loud"]) for r, hp in zip(experiment.runs, experiment.hparams())}
        assert loudness == {"dqn_loud": 5.0, "dqn": 0.0}


PLUGIN = '''
import jax.numpy as jnp
import opiq_jax


class InverseCount(opiq_jax.Part):
    name = "plugin_inverse_count"
    hparams = (opiq_jax.Option("beta_inv", 0.0, "Scale of beta_inv / N(s, a).", minimum=0.0),)
    uses_counts = True
    shares_program = True
    off = {"beta_inv": 0.0}

    def intrinsic_reward(self, agent, run, batch):
        counts = jnp.maximum(batch.step_counts.astype(jnp.float32), 1.0)
        return run.hparams["beta_inv"] / (counts[:, 0] if BROKEN else counts)


opiq_jax.register_method(opiq_jax.Method("dqn_inverse_count", (InverseCount(),), "DQN + 1/N",
                                         settings={"chain": {"beta_inv": 0.1}}))
'''


def test_the_cli_trains_a_method_of_a_plugin_and_load_says_what_to_register(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good_plugin.py").write_text("BROKEN = False\n" + PLUGIN)
    (tmp_path / "broken_plugin.py").write_text("BROKEN = True\n" + PLUGIN)
    with registries_restored():
        main(["train", "--plugin", "good_plugin", "--method", "dqn_inverse_count", "--beta-inv", "0.2", *SMALL,
              "--out", "plugged"])
        config = json.loads((tmp_path / "plugged" / "config.json").read_text())
        assert config["plugins"] == ["good_plugin"] and config["runs"][0]["hparams"]["beta_inv"] == pytest.approx(0.2)
        assert "opiq-jax train --plugin good_plugin --config plugged" in capsys.readouterr().out
    with registries_restored():
        with pytest.raises(SystemExit) as stop:
            main(["train", "--plugin", "broken_plugin", "--method", "dqn_inverse_count", *SMALL, "--out", "broken"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert "part 'plugin_inverse_count': intrinsic_reward returned shape [64], expected [64, 1]" in err
    code = ("import opiq_jax\n"
            "try:\n    opiq_jax.load('plugged').state()\nexcept opiq_jax.ResultsError as e:\n    print(e)\n"
            "import good_plugin\nprint(opiq_jax.load('plugged').state().step)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and len(lines) == 2, run.stderr[-2000:]
    assert "was trained with method 'dqn_inverse_count', which this process has not registered: import " \
           "good_plugin first (on the command line: --plugin good_plugin)" in lines[0]
    assert lines[1] == "600"


# ------------------------------------------------------------------------------------ issue 66: numbers, folders, words


def test_numpy_and_jax_numbers_are_taken_as_python_numbers_are_and_recorded_as_plain_json(tmp_path, capsys):
    """Seeds, the base seed, static options, hyperparameters, a grid and the loop's options as numpy's and JAX's
    numbers train the experiment Python's numbers do: the same config.json byte for byte, which --config re-runs."""
    plain = opiq_jax.train(out=tmp_path / "python", seeds=[0, 1], seed=3, steps=600, chain_length=6, hidden=(16,),
                           buffer_size=600, log_every=300, m=2.0, grid={"c_action": [1, 10]}, progress=False,
                           checkpoint_every=0)
    numpy = opiq_jax.train(out=tmp_path / "numpy", seeds=[np.int64(0), np.int64(1)], seed=np.uint32(3),
                           steps=np.int64(600), chain_length=np.int32(6), hidden=np.array([16]),
                           buffer_size=jnp.int32(600), log_every=np.int16(300), m=jnp.float32(2.0),
                           grid={"c_action": jnp.array([1.0, 10.0])}, progress=np.bool_(False),
                           checkpoint_every=np.float64(0))
    assert (numpy.folder / "config.json").read_bytes() == (plain.folder / "config.json").read_bytes()
    assert (numpy.folder / "metrics.csv").read_bytes() == (plain.folder / "metrics.csv").read_bytes()
    main(["train", "--config", str(numpy.folder), "--out", str(tmp_path / "rerun"), "--no-progress", "--no-plot"])
    assert (tmp_path / "rerun" / "metrics.csv").read_bytes() == (plain.folder / "metrics.csv").read_bytes()
    assert numpy.summary(np.str_("test_return")) == plain.summary("test_return")
    tenth = opiq_jax.train(out=tmp_path / "tenth", grid={"m": [np.float32(0.1)]}, **SMALL_API)
    assert tenth.config["runs"][0]["setting"] == "m=0.1"  # a float32 is the decimal it prints as, not 0.100000001490
    preset = {**GOOD_PRESET, "seeds": np.int64(1), "grids": [{"method": "opiq", "grid": {"m": np.array([2.0])}}]}
    swept = opiq_jax.sweep(preset, out=tmp_path / "sweep", seeds=np.int64(1), steps=np.int64(600),
                           max_batch_runs=np.int64(2), progress=np.bool_(False))
    assert json.loads((swept.folder / "preset.json").read_text())["grids"][0]["grid"] == {"m": [2.0]}
    assert [r["setting"] for r in swept.ranking()] == ["m=2"]


def test_a_refusal_after_the_folder_was_made_leaves_no_folder_behind(tmp_path, monkeypatch):
    """A part whose hook returns the wrong shape is refused when the program is traced, after the folder, its lock
    and its config.json were made; a sweep too large for the device is refused at its first batch, after its
    preset.json and plan.json. Neither leaves a folder behind, nor the folders made above it."""
    part = type("Wrong", (Bonus,), {"wrong": "action_bonus"})()
    empty = tmp_path / "mine"  # a folder of the user's, empty but for what a file browser leaves
    empty.mkdir()
    (empty / ".DS_Store").write_bytes(b"\0")
    with registries_restored():
        opiq_jax.register_method(opiq_jax.Method("dqn_wrong", (part,), "a part with a wrong hook",
                                                 settings={"chain": {"test_bonus": 1.0}}))
        for out in (tmp_path / "new" / "deeper" / "run", empty):
            with pytest.raises(opiq_jax.PartError):
                opiq_jax.train(methods=["dqn_wrong"], out=out, **SMALL_API)
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and [p.name for p in empty.iterdir()] == [".DS_Store"]
    (empty / ".DS_Store").unlink()
    from opiq_jax.runs import memory
    from opiq_jax.host import sweeping

    for module in (memory, sweeping):
        monkeypatch.setattr(module, "available_device_bytes", lambda: 1000)
    with pytest.raises(opiq_jax.DoesNotFit):
        opiq_jax.sweep(GOOD_PRESET, out=tmp_path / "mine" / "sweep", progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and list((tmp_path / "mine").iterdir()) == []


def test_environments_and_methods_of_the_package_list_them_and_name_the_modules_a_plugin_wants():
    from opiq_jax import environments, methods

    assert "chain" in environments() and "opiq" in methods()
    with pytest.raises(AttributeError) as caught:
        environments.register_environment  # noqa: B018 - what a plugin of the flat layout wrote
    assert str(caught.value) == ("opiq_jax.environments is the API's function that lists them, not the module "
                                 "opiq_jax.registry.environments that has register_environment: import it from there")
    with pytest.raises(AttributeError, match="not the module opiq_jax.registry.methods that has METHODS"):
        methods.METHODS  # noqa: B018
    with pytest.raises(AttributeError, match="^opiq_jax.methods has no attribute 'nope'$"):
        methods.nope  # noqa: B018


def test_a_preset_tried_with_steps_its_chunk_does_not_divide_logs_on_a_chunk_that_does_and_says_so(tmp_path, capsys):
    preset = tmp_path / "every300.json"
    preset.write_text(json.dumps(GOOD_PRESET))  # 600 steps, a row every 300
    main(["sweep", str(preset), "--steps", "700", "--out", str(tmp_path / "sw"), "--no-progress"])
    said = [line for line in capsys.readouterr().out.splitlines() if "does not divide" in line]
    assert said == ["opiq-jax: the preset logs every 300 steps, which does not divide 700: logging every 175 steps "
                    "instead (4 points per run for the ranking's area under the curve)"]
    steps = {r["step"] for r in opiq_jax.load(tmp_path / "sw").metrics}
    assert steps == {175, 350, 525, 700}


def test_max_minutes_on_the_command_line_stops_after_a_chunk_and_the_same_command_goes_on(tmp_path, capsys):
    steps = SMALL.index("--steps")
    argv = ["train", *SMALL[:steps], "--steps", "1200", *SMALL[steps + 2:], "--out", str(tmp_path / "boxed")]
    main([*argv, "--max-minutes", "1e-9"])
    said = [line for line in capsys.readouterr().out.splitlines() if "--max-minutes" in line]
    assert len(said) == 1 and said[0].startswith("opiq-jax: stopped by --max-minutes 1e-09 after "), said
    assert said[0].endswith(" s, at step 300 of 1,200 (a checkpoint is kept); run the same command to go on"), said
    assert not opiq_jax.load(tmp_path / "boxed").finished
    main(argv)
    assert opiq_jax.load(tmp_path / "boxed").finished and "opiq-jax: finished in" in capsys.readouterr().out


def test_a_results_folder_of_an_older_version_says_which_wrote_it_and_what_still_works(tmp_path, capsys):
    old = tmp_path / "chain-all-f32"
    shutil.copytree(ROOT / "docs" / "results" / "precision" / "chain-all-f32", old)
    written = ("was written by an opiq-jax from before 28a7929 (2026-11-26, when the methods became parts: it names a "
               "bonus_network, not parts): this version reads its metrics (summary, curves, plot) but cannot")
    results = opiq_jax.load(old)
    with pytest.raises(opiq_jax.ResultsError) as caught:
        results.state("plain")
    assert str(caught.value) == f"{old / 'plain' / 'config.json'} {written} restore its state; opiq-jax at commit " \
                                "28a7929~1 can"
    with pytest.raises(SystemExit) as stop:
        main(["train", "--config", str(old), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and written in err and err.endswith("re-run it; opiq-jax at commit 28a7929~1 can"), err
    assert "| opiq |" in results.summary("test_return")
    main(["plot", str(old), "--metrics", "test_return"])  # its four programs are one experiment, as they trained
    assert capsys.readouterr().out.strip() == f"opiq-jax: wrote {old / 'plot_test_return.png'}"
    assert results.plot("test_return") == [old / "plot_test_return.png"]  # a name, not its letters


# ------------------------------------------------------------------------------------ memory and progress, named


def test_a_state_too_large_for_one_run_names_what_fits_not_at_most_0_runs(monkeypatch, capsys):
    from opiq_jax.runs import memory

    monkeypatch.setattr(memory, "available_device_bytes", lambda: 1000)
    with pytest.raises(SystemExit):
        main(["train", *SMALL])
    err = capsys.readouterr().err.strip()
    assert err.startswith("opiq-jax: error: 1 run needs about ") and len(err.splitlines()) == 1, err
    assert ": use a smaller --buffer-size (none above a batch fits) or " in err and "at most 0 runs" not in err


def test_the_memory_line_of_a_short_atari_run_names_the_buffer_size_that_fits(monkeypatch, capsys):
    """A Montezuma smoke run with the default replay (a million steps per run, 6.6 GiB) on a machine with 8 GiB
    free: the line says which --buffer-size the run can fill and what it keeps then."""
    pytest.importorskip("envpool")
    from opiq_jax.runs import memory
    from opiq_jax.host.plan import plan_experiment

    monkeypatch.setattr(memory, "available_device_bytes", lambda: 8 * 2**30)
    plan_experiment("montezuma", ["opiq"], 1, options={"steps": 2000})
    line = capsys.readouterr().out.strip()
    assert "most of it the replay of 1,000,000 steps per run: --buffer-size makes it smaller; a run of 2,000 steps " \
           "fills at most 2,000 of them: with --buffer-size 2000 it keeps 0.0" in line, line
    plan_experiment("montezuma", ["opiq"], 1, options={"steps": 2_000_000})
    line = capsys.readouterr().out.strip()
    assert re.search(r"--buffer-size makes it smaller: \d+ or less keeps it within a quarter of the free memory$",
                     line), line


def test_the_progress_bar_says_no_value_where_no_episode_ended_as_the_table_does():
    import time

    from opiq_jax.registry.environments import static_for_env
    from opiq_jax.host.host_loop import progress_fields

    static = static_for_env("chain", total_steps=600, log_every=300)
    none_ended = {"train_return": np.array([np.nan, np.nan]), "rooms_visited": np.array([1.0, 2.0])}
    assert progress_fields(none_ended, 1, static, 2, time.monotonic()).split(", ")[1:] == ["train no value", "rooms 2"]
    one_ended = {"train_return": np.array([np.nan, 2.5])}
    assert progress_fields(one_ended, 1, static, 2, time.monotonic()).split(", ")[1:] == ["train 2.5"]
