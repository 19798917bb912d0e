"""Sweeps: grid expansion, batching by memory, resume, and the selection protocol."""

import json

import pytest

from opiq_jax.cli import main
from opiq_jax.host.sweeping import (best_per_method, expand, load_preset, plan_batches, plan_static, preset_names,
                                       split)

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
    for suite, env in (("minigrid", "minigrid:DoorKey-16x16"), ("craftax", "craftax:Classic")):
        preset = load_preset(f"{suite}_opiq")
        runs = expand(preset)
        assert preset.env == env and len(runs) == 24 * 4 and {r.method for r in runs} == {"opiq"}
        assert {frozenset(label_values(r.setting)) for r in runs} == {frozenset({"m", "c_action", "c_bootstrap",
                                                                                 "beta"})}


def label_values(setting: str) -> dict[str, float]:
    """``m=0.5,c_action=1`` -> ``{"m": 0.5, "c_action": 1.0}`` (``paper``: none)."""
    return {} if setting == "paper" else {k: float(v) for k, v in (pair.split("=") for pair in setting.split(","))}


def test_every_runs_label_names_the_hyperparameters_it_trains_with():
    """A grid of two names with two values each, expanded by a sweep and by train's grid: each run's label, its
    hyperparameters and the numbers its program is given all agree, for every grid point."""
    from opiq_jax.host.plan import plan_experiment
    from opiq_jax.runs.experiment import Experiment

    grid = {"m": [0.5, 2.0], "c_action": [1.0, 10.0]}
    preset = load_preset({"env": "chain", "seeds": 2, "grids": [{"method": "opiq", "grid": grid},
                                                                 {"method": "dqn_pc", "grid": {"beta": [0.01, 1.0]}}]})
    swept = Experiment(plan_static(preset), tuple(expand(preset)))
    planned = plan_experiment("chain", ["opiq", "dqn_pc"], 2, grid={**grid, "beta": [0.01, 1.0]})  # OPIQ has beta
    for experiment, settings in ((swept, 4 + 2), (planned, 8 + 2)):
        labels = {(r.method, r.setting) for r in experiment.runs}
        assert len(labels) == settings and len(experiment.runs) == settings * 2
        for run, numbers in zip(experiment.runs, experiment.hparams(), strict=True):
            values = label_values(run.setting)
            assert values and set(values) <= {"m", "c_action", "beta"}
            for name, value in values.items():
                assert run.hparams[name] == value and float(numbers[name]) == pytest.approx(value), run


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
    # every trained run's label names the hyperparameters it trained with, read back from the batches' files
    trained = [r for batch in sorted(out.glob("batch_*"))
               for r in json.loads((batch / "config.json").read_text())["runs"]]
    assert len(trained) == 12 and all(label_values(r["setting"]) for r in trained if r["method"] == "opiq")
    for run in trained:
        for name, value in label_values(run["setting"]).items():
            assert run["hparams"][name] == pytest.approx(value), run
    # the appendix's M figure reads the finished sweep
    from experiments.paper import chain_m_comparison

    chain_m_comparison.main(["--sweep", str(out)])
    assert (out / "m_comparison_test_return.png").exists()
    table = (out / "m_comparison.md").read_text()
    assert "| 0.5 | m=0.5," in table and "| 2 | m=2," in table


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
