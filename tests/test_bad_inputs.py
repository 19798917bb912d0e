"""A table of bad inputs across ``train``, ``sweep``, ``plot``, ``bench``, presets and the Python API.

Each must stop with one line that says what to change (exit code 2 on the command line, a
:class:`~opiq_jax.errors.UsageError` in Python) and leave an existing results folder byte for byte as it was.
``pytest -s`` prints the count.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import opiq_jax
from opiq_jax.cli import main
from opiq_jax.errors import UsageError

SMALL = ["--chain-length", "6", "--hidden", "16", "--buffer-size", "600", "--steps", "600", "--log-every", "300",
         "--seeds", "1", "--no-progress", "--no-plot"]
GOOD_PRESET = {"env": "chain", "seeds": 1, "static": {"total_steps": 600, "log_every": 300}, "grids": [{"method": "opiq"}]}


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
    return {"root": root, "existing": root / "existing", "broken": broken}


def cli_cases(f: dict[str, Path]) -> list[tuple[list[str], str]]:
    existing, root = str(f["existing"]), f["root"]
    return [
        (["train", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["train", "--m", "-1"], "--m must be >= 0, got -1"),
        (["train", "--method", "opiq", "nope"], "unknown method 'nope': use any of dqn, dqn_pc"),
        (["train", "--steps", "1000", "--log-every", "300"], "--steps (1000) must be a multiple of --log-every (300)"),
        (["train", "--epsilon-start", "2"], "--epsilon-start must lie in [0, 1], got 2"),
        (["train", "--env", "mars"], "unknown --env 'mars': use chain, maze, montezuma, gymnax:NAME"),
        (["train", "--chain-length", "1"], "--chain-length must be >= 2, got 1"),
        (["train", "--seeds", "0"], "--seeds must be a whole number >= 1, got 0"),
        (["train", "--grid", "bsp_heads=2,3"], "--grid takes hyperparameters only: bsp_heads changes the compiled"),
        (["train", "--grid", "m=a,b"], "--grid m: values must be numbers, got 'a,b'"),
        (["train", "--grid", "m"], "--grid takes NAME=V1,V2,... pairs, got 'm'"),
        (["train", "--beta-rnd", "1"], "--beta-rnd applies to none of opiq"),
        (["train", "--env-arg", "size=3"], "--env-arg applies to gymnax:NAME environments only"),
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
        (["sweep", str(root / "structural_grid.json")], "preset structural_grid: grids[bsp] takes hyperparameters only"),
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
    ]


def api_cases(f: dict[str, Path]) -> list[tuple[callable, str]]:
    existing = f["existing"]
    return [
        (lambda: opiq_jax.train(steps=0, out=existing), "steps must be >= 1, got 0"),
        (lambda: opiq_jax.train(chain_lenght=6, out=existing), "unknown option chain_lenght; did you mean chain_length"),
        (lambda: opiq_jax.train(grid={"m": "0.5"}, out=existing), "grid m: give a non-empty list of values"),
        (lambda: opiq_jax.load(f["root"] / "nowhere"), "does not exist"),
        (lambda: opiq_jax.load(existing).summary("nope"), "has no metric 'nope': it has"),
        (lambda: opiq_jax.sweep({"env": "chain", "seeds": 1}), "preset (dict): a preset needs env and grids"),
        (lambda: opiq_jax.bench(nope=1), "unknown bench option nope"),
        (lambda: opiq_jax.bench(min_runs=0), "min_runs must be >= 1, got 0"),
        (lambda: opiq_jax.rerun(f["broken"]), "is not valid JSON"),
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
