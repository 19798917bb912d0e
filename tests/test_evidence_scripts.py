"""The small scripts that compute the documentation's evidence, each run as its command: far-end counts, SimHash
aliasing, install size; and how every script's record names the call."""

import gzip
import json
import shutil

import sys

import pytest

from experiments.bench import install_size
from experiments.paper import chain_far_end
from experiments.studies import simhash_aliasing
from experiments.tools.command_line import command_line
from tests.results_folders import tidy_row, write_folder


def gzipped(folder):
    """``folder``'s metrics gzipped, as results folders are committed."""
    with open(folder / "metrics.csv", "rb") as plain, gzip.open(folder / "metrics.csv.gz", "wb") as packed:
        shutil.copyfileobj(plain, packed)
    (folder / "metrics.csv").unlink()


def test_far_end_counts_a_seed_once_its_best_return_reaches_one(tmp_path, capsys):
    source = tmp_path / "chain, ✓"  # a comma and unicode; two program subfolders, read together
    gzipped(write_folder(source / "plain", [
        tidy_row(0, "a", 0, 10, "max_return", 0.1), tidy_row(0, "a", 0, 20, "max_return", 1.0),
        tidy_row(0, "a", 0, 20, "states_visited", 10), tidy_row(1, "a", 1, 20, "max_return", 0.9),
        tidy_row(1, "a", 1, 20, "states_visited", 9)], env="chain", chain_length=10))
    gzipped(write_folder(source / "rnd", [tidy_row(0, "b", 0, 20, "loss", 5.0)], env="chain", chain_length=10))
    chain_far_end.main([str(source), "--out", str(tmp_path / "out"), "--chain-length", "10"])
    document = json.loads((tmp_path / "out" / "far_end.json").read_text())
    # seed 0 reached 1 (its best, not its last), seed 1 did not; only seed 0 saw all 10 states; b logged neither
    assert document["methods"] == {"a": {"seeds": 2, "reached_far_end": 1, "visited_every_state": 1}}
    assert document["options"] == {"folder": source.name, "chain_length": 10}  # no absolute path of the machine
    assert ("| a | 1/2 | 1/2 |" in (tmp_path / "out" / "far_end.md").read_text()
            and "| a | 1/2 |" in capsys.readouterr().out)


def test_aliasing_counts_distinct_codes_per_number_of_bits(tmp_path):
    simhash_aliasing.main(["--out", str(tmp_path), "--bits", "1", "128", "--matrices", "3"])
    results = json.loads((tmp_path / "aliasing.json").read_text())["results"]
    chain, maze = results["chain (100 states)"], results["maze (open cells)"]
    assert chain["1"]["states"] == 100 and len(chain["1"]["distinct_codes"]) == 3
    assert max(chain["1"]["distinct_codes"]) <= 2  # one bit tells at most two codes apart
    assert chain["128"]["max"] <= 100 and maze["1"]["max"] <= 2 and maze["128"]["states"] == maze["1"]["states"] > 100
    # a state merged with its left neighbour is one code fewer: the merges are at most the codes lost
    for k in ("1", "128"):
        for distinct, merged in zip(chain[k]["distinct_codes"], chain[k]["same_code_as_left_neighbour"], strict=True):
            assert merged <= 100 - distinct
    assert sum(chain["1"]["same_code_as_left_neighbour"]) > 0
    assert "| chain (100 states) | 128 | 100 |" in (tmp_path / "aliasing.md").read_text()


def test_install_size_counts_what_the_atari_extra_adds(tmp_path):
    pytest.importorskip("envpool")
    install_size.main(["--out", str(tmp_path)])
    document = json.loads((tmp_path / "install_size.json").read_text())
    added = document["distributions"]
    assert "envpool" in added and not {"jax", "flax", "numpy"} & set(added)  # the core's are not the extra's
    assert document["total_bytes"] == sum(d["bytes"] for d in added.values()) > 1_000_000
    assert f"| **all {len(added)}** |" in (tmp_path / "install_size.md").read_text()


def test_a_record_names_its_call_without_this_machines_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["script", "--from-the-process"])
    here, elsewhere = tmp_path / "out, \"q\" ✓", "/elsewhere/runs/maze"
    assert command_line("m", ["--out", str(here), f"--results={elsewhere}", "7"]) == \
        'python -m m --out out, "q" ✓ --results=maze 7'
    assert command_line("m", []) == "python -m m"  # called from Python with no arguments: not the process's
    assert command_line("m", None) == "python -m m --from-the-process"
