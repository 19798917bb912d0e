"""experiments.studies.atari_games end to end: every game's training in a process of its own, a game that fails said
in one line while the other is kept, then figures and one summary. Venture has no rooms: this is also the
test that a game without them trains through EnvPool with the Nature network and records no ``rooms_visited``."""

from __future__ import annotations

import json

import pytest

from experiments.studies import atari_games
from opiq_jax import read_metrics


def test_games_train_side_by_side_a_failed_one_is_said_in_one_line_and_the_others_are_summarised(tmp_path):
    pytest.importorskip("envpool")
    out = tmp_path / "atari, ✓"  # a comma and unicode in the folder's name
    # One game that trains beside one that fails (a second good game would be a second Nature-network program to
    # compile, never cached: EnvPool's programs name their pools by address)
    with pytest.raises(SystemExit, match="some games failed: {'Venture': 0, 'Ventur': 2}"):
        atari_games.main(["--games", "Venture", "Ventur", "--seeds", "1", "--steps", "64", "--log-every",
                          "32", "--out", str(out), "--drop-checkpoints"])
    assert "EnvPool has no Atari game 'Ventur'" in (out / "Ventur" / "train_log.txt").read_text()
    info = json.loads((out / "run_info.json").read_text())
    assert info["calls"][0]["exit_codes"] == {"Venture": 0, "Ventur": 2} and info["device"]
    assert info["seconds"] > 0
    for game in ("Venture",):
        config = json.loads((out / game / "config.json").read_text())
        assert config["static"]["env"] == f"atari:{game}" and config["static"]["network"] == "nature"
        assert (out / game / "train_log.txt").exists() and not list((out / game).glob("checkpoint*"))
        # a game without rooms trains through EnvPool and records no rooms_visited
        metrics = {r["metric"] for r in read_metrics(out / game)}
        assert "rooms_visited" not in metrics and {"train_return", "loss", "max_return"} <= metrics
    atari_games.main(["--games", "Venture", "--out", str(out), "--summarise"])
    assert (out / "Venture_max_return.png").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"Venture"} and set(summary["Venture"]) == {"opiq", "dqn_pc"}
    assert summary["Venture"]["opiq"]["last_step"] == 64
    table = (out / "summary.md").read_text().splitlines()
    assert len(table) == 2 + 2 and table[2].startswith("| Venture | ")
