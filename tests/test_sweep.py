"""Sweeps: grid expansion, batching by memory, resume, and the selection protocol."""

import json
import shutil

import pytest

from opiq_jax.cli import main
from opiq_jax.sweeping import (
    best_per_method, expand, load_preset, plan_batches, preset_names, split, tied_with_best, write_tables,
)

TINY = {
    "env": "chain", "seeds": 2, "metric": "test_return",
    "static": {"chain_length": 8, "total_steps": 400, "log_every": 200, "buffer_size": 400, "hidden": [16]},
    "grids": [
        {"method": "opiq", "grid": {"m": [0.5, 2.0], "c_action": [0.0, 1.0]}},
        {"method": "dqn", "grid": {"epsilon_decay_steps": [100]}},
    ],
}


def test_shipped_presets_expand_to_the_paper_grids():
    assert {"chain_opiq", "chain_baselines", "maze_opiq", "maze_baselines"} <= set(preset_names())
    chain = load_preset("chain_opiq")
    assert len(expand(chain)) == 48 * 20
    maze = load_preset("maze_opiq")
    assert len(expand(maze)) == 16 * 8 and maze.seeds == 8
    settings = {r.setting for r in expand(load_preset("chain_baselines")) if r.method == "opiq_no_pc"}
    assert len(settings) == 48
    maze_baselines = expand(load_preset("maze_baselines"))
    per_method = {}
    for r in maze_baselines:
        per_method.setdefault(r.method, set()).add(r.setting)
    assert {m: len(s) for m, s in per_method.items()} == {
        "dqn": 3, "dqn_pc": 5, "dqn_bias_pc": 3, "dqn_rsubtract_pc": 3, "opiq_no_ob": 4, "opiq_no_pc": 16,
        "dqn_rnd": 6, "dqn_dora": 1, "dqn_dora_oa": 1, "bsp": 6}
    assert "beta_bsp=30" in per_method["bsp"] and len(maze_baselines) == 48 * 8


def test_batches_are_as_few_as_fit_and_equal():
    assert plan_batches(960, per_run_bytes=2**20, free_bytes=2**40) == 1
    assert plan_batches(960, per_run_bytes=2**20, free_bytes=3 * 2**20 * 100) == 10
    runs = list(range(7))
    batches = split(runs, 3)
    assert [len(b) for b in batches] == [3, 3, 3] and batches[-1] == (6, 6, 6)


def test_bad_presets_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown preset"):
        load_preset("no_such_preset")
    bad = dict(TINY, grids=[{"method": "opiq", "grid": {"mm": [1]}}])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unknown option mm; did you mean m"):
        load_preset(str(tmp_path / "bad.json"))


def test_sweep_runs_in_batches_resumes_and_ranks(tmp_path, capsys):
    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(TINY))
    out = tmp_path / "sweep"
    main(["sweep", str(preset), "--out", str(out), "--max-batch-runs", "4", "--no-progress"])
    printed = capsys.readouterr().out
    assert "3 batch(es) of 4 runs" in printed
    rows = (out / "settings.csv").read_text().splitlines()
    assert rows[0] == "method,setting,auc,auc_low,auc_high,final_median,seeds" and len(rows) == 1 + 5
    assert "| opiq |" in (out / "best.md").read_text() and "| dqn |" in (out / "best.md").read_text()
    main(["sweep", str(preset), "--out", str(out), "--max-batch-runs", "4", "--no-progress"])
    assert printed.count("batch 1/3") == 1 and "already finished" in capsys.readouterr().out
    # the appendix's M figure reads the finished sweep
    from experiments import chain_m_comparison

    chain_m_comparison.main(["--sweep", str(out)])
    assert (out / "m_comparison_test_return.png").exists()
    table = (out / "m_comparison.md").read_text()
    assert "| 0.5 | m=0.5," in table and "| 2 | m=2," in table


def test_a_resumed_sweep_keeps_the_batches_it_planned_first_whatever_the_memory_says_now(tmp_path, capsys,
                                                                                          monkeypatch):
    """A resume trains the batches planned first (plan.json; for a sweep older than plan.json, its batch folders):
    a run's floats may depend on the size of the program it trains in, so a resume must not change it."""
    from opiq_jax import sweeping

    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(TINY))
    out = tmp_path / "sweep"
    main(["sweep", str(preset), "--out", str(out), "--max-batch-runs", "4", "--no-progress"])
    assert json.loads((out / "plan.json").read_text()) == {"batches": {"plain": 3}}
    settings = (out / "settings.csv").read_bytes()
    for forget in ("batch_001", "settings.csv", "plan.json"):  # interrupted in its second batch, before plan.json
        path = out / forget
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    monkeypatch.setattr(sweeping, "available_device_bytes", lambda: 2**50)  # a card where all would fit at once
    capsys.readouterr()
    main(["sweep", str(preset), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "resuming the batches planned first (plan.json): plain 3" in printed and "batch 2/3" in printed
    assert "1 batch(es)" not in printed and (out / "settings.csv").read_bytes() == settings


def test_the_selection_names_the_settings_tied_with_the_best_within_their_intervals(tmp_path):
    ranking = [dict(method="a", setting="x", auc=2.0, auc_low=1.5, auc_high=2.5, final_median=1.0, seeds=4),
               dict(method="a", setting="y", auc=1.6, auc_low=1.0, auc_high=1.8, final_median=1.0, seeds=4),
               dict(method="a", setting="z", auc=0.5, auc_low=0.2, auc_high=0.9, final_median=0.0, seeds=4),
               dict(method="b", setting="w", auc=1.0, auc_low=0.9, auc_high=1.1, final_median=1.0, seeds=4)]
    assert [t["setting"] for t in tied_with_best(ranking, ranking[0])] == ["y"]
    write_tables(tmp_path, ranking, "test_return")
    best = (tmp_path / "best.md").read_text()
    assert "| a | x | 2 (1.5, 2.5) | 1 | 3 | y |" in best and "| b | w | 1 (0.9, 1.1) | 1 | 1 | none |" in best


def test_best_per_method_picks_largest_area():
    ranking = [dict(method="a", setting="x", auc=1.0), dict(method="a", setting="y", auc=2.0),
               dict(method="b", setting="z", auc=0.5)]
    assert [(t["method"], t["setting"]) for t in best_per_method(ranking)] == [("a", "y"), ("b", "z")]


def test_sweep_with_structural_methods_runs_one_program_per_structure(tmp_path, capsys):
    """RND and BSP add networks: the sweep batches them apart from the numbers-only methods and ranks all."""
    preset = dict(TINY, grids=[{"method": "opiq", "grid": {"c_action": [1.0]}},
                               {"method": "dqn_rnd", "grid": {"beta_rnd": [0.1, 10]}},
                               {"method": "bsp", "grid": {"beta_bsp": [100]}}])
    path = tmp_path / "structural.json"
    path.write_text(json.dumps(preset))
    main(["sweep", str(path), "--out", str(tmp_path / "sweep"), "--no-progress"])
    printed = capsys.readouterr().out
    for line in ("plain: 2 runs", "rnd: 4 runs", "bsp: 2 runs"):
        assert line in printed
    assert sorted(p.name for p in (tmp_path / "sweep").glob("batch_*")) == ["batch_000", "batch_001", "batch_002"]
    rows = (tmp_path / "sweep" / "settings.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 and any(r.startswith("dqn_rnd,beta_rnd=10,") for r in rows)
    best = (tmp_path / "sweep" / "best.md").read_text()
    assert all(f"| {m} |" in best for m in ("opiq", "dqn_rnd", "bsp"))


def test_sweep_precision_overrides_the_preset(tmp_path):
    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(dict(TINY, grids=[{"method": "opiq", "grid": {"m": [0.5]}}])))
    main(["sweep", str(preset), "--out", str(tmp_path / "sweep"), "--precision", "bfloat16", "--no-progress"])
    configs = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("batch_*/config.json")]
    assert configs and all(c["static"]["precision"] == "bfloat16" for c in configs)


def test_a_finished_batch_of_another_precision_is_not_reused(tmp_path):
    preset = tmp_path / "tiny.json"
    preset.write_text(json.dumps(dict(TINY, grids=[{"method": "opiq", "grid": {"m": [0.5]}}])))
    main(["sweep", str(preset), "--out", str(tmp_path / "sweep"), "--no-progress"])
    with pytest.raises(SystemExit):
        main(["sweep", str(preset), "--out", str(tmp_path / "sweep"), "--precision", "bfloat16", "--no-progress"])


def test_the_batching_experiment_compares_every_number_and_both_selections(tmp_path):
    from experiments import sweep_batching
    from opiq_jax.sweeping import sweep_rows

    small = {"chain_length": 8, "log_every": 200, "buffer_size": 400, "hidden": [16]}
    report = sweep_batching.main(["--out", str(tmp_path), "--seeds", "2", "--steps", "400",
                                  "--static", json.dumps(small)])
    found = report["differences"]
    assert found["runs"] == 6 and found["values"] == len(sweep_rows(tmp_path / "three")) > 0
    assert found["differ"] == sum(found["per_metric"].values()) and found["runs_differing"] <= 6
    assert (found["first_step"] is None) == (found["differ"] == 0)
    assert [s[0]["method"] for s in report["selections"]] == ["dqn_pc", "dqn_pc"]
    assert json.loads((tmp_path / "three" / "plan.json").read_text()) == {"batches": {"plain": 3}}
    assert not list(tmp_path.rglob("checkpoint*")) and len(list(tmp_path.rglob("metrics.csv.gz"))) == 4
    assert "| one batch | dqn_pc |" in (tmp_path / "comparison.md").read_text()
