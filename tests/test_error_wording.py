"""An error is raised once, where the input is checked, and worded where it reaches the user: the command line
names options as flags (``--chain-length``), Python as arguments (``chain_length``). No ``style`` argument
travels through the calls to choose between them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opiq_jax
from opiq_jax.cli import main
from opiq_jax.common.errors import UsageError, command_line_message, option_name, worded

ROOT = Path(__file__).resolve().parents[1]


def test_no_function_of_the_package_takes_a_style_argument():
    takers = []
    for path in sorted((ROOT / "opiq_jax").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                if "style" in names:
                    takers.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert takers == []


def test_a_marked_name_reads_as_python_writes_it_and_as_the_command_line_does():
    message = f"{option_name('chain_length')} and {option_name('methods', flag='method')} and a_plain_word"
    assert worded(message) == "chain_length and methods and a_plain_word"
    assert worded(message, on_command_line=True) == "--chain-length and --method and a_plain_word"
    error = UsageError(message)
    assert str(error) == "chain_length and methods and a_plain_word"
    assert command_line_message(error) == "--chain-length and --method and a_plain_word"
    assert command_line_message(ValueError("--kept as it is")) == "--kept as it is"


# The same mistake from Python and from the command line: one check, two wordings.
CASES = [
    (dict(steps=0), ["--steps", "0"], "steps must be >= 1, got 0", "--steps must be >= 1, got 0"),
    (dict(chain_length=1), ["--chain-length", "1"], "chain_length must be >= 2", "--chain-length must be >= 2"),
    (dict(steps=1000, log_every=300), ["--steps", "1000", "--log-every", "300"],
     "steps (1000) must be a multiple of log_every (300)", "--steps (1000) must be a multiple of --log-every (300)"),
    (dict(methods=[]), ["--method"], "methods needs at least one of", "--method needs at least one of"),
    (dict(grid={"m": [float("nan")]}), ["--grid", "m=nan"], "m must be a finite number", "--m must be a finite number"),
]


@pytest.mark.parametrize("kwargs, argv, in_python, on_command_line", CASES, ids=[c[2][:24] for c in CASES])
def test_one_check_is_worded_by_its_caller(kwargs, argv, in_python, on_command_line, capsys, tmp_path):
    call = {**dict(env="chain", methods=["opiq"], seeds=1, steps=100, progress=False, out=tmp_path / "o"), **kwargs}
    with pytest.raises(UsageError) as raised:
        opiq_jax.train(**call)
    assert in_python in str(raised.value) and "\x1f" not in str(raised.value)
    with pytest.raises(SystemExit) as ended:
        main(["train", "--env", "chain", "--method", "opiq", "--seeds", "1", "--out", str(tmp_path / "c"), *argv])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and on_command_line in err and "\x1f" not in err, err


def test_the_bench_words_its_options_for_its_caller(capsys):
    with pytest.raises(UsageError, match=r"^min_runs must be >= 1, got 0$"):
        opiq_jax.bench(min_runs=0)
    with pytest.raises(SystemExit):
        main(["bench", "--min-runs", "0"])
    assert "error: --min-runs must be >= 1, got 0" in capsys.readouterr().err


def test_a_preset_names_its_own_fields_as_it_writes_them_on_the_command_line_too(tmp_path, capsys):
    preset = tmp_path / "p.json"
    preset.write_text('{"env": "chain", "seeds": 0, "grids": [{"method": "opiq"}]}')
    with pytest.raises(SystemExit):
        main(["sweep", str(preset), "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert "preset p: seeds must be a whole number >= 1, got 0" in err and "--seeds must" not in err, err
