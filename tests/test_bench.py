"""The throughput benchmark: the plain baseline learns and counts exactly, the FLOP model matches a hand
count, and the whole bench runs end to end on CPU at tiny sizes.

The plain baseline's tests and the bench share one configuration and two runs, so its step is
compiled once for the module.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.benchmark import throughput
from opiq_jax.benchmark.plain import run_plain
from opiq_jax.benchmark.plain import td_targets as plain_td_targets
from opiq_jax.benchmark.throughput import (
    TABLE_COLUMNS,
    Bench,
    Measurement,
    _guarded,
    cached_plain,
    compiles_timed_lines,
    forward_flops,
    keeps_growing,
    layer_macs,
    main,
    markdown_table,
    pair_rows,
    row_summary,
    run_bench,
    runs_schedule,
    timed_repeats,
    work_model,
)
from opiq_jax.common.config import stack_hparams
from opiq_jax.primitives.networks import make_network
from opiq_jax.registry.methods import method_hparams
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for
from tests.hand_targets import hand_targets

CHAIN = 8  # horizon 17; the best return is 11 (6 steps to the right end, then +1 on each of 11 steps)
STEPS = 800
OPTIONS = Bench(
    envs=("chain",), max_runs=2, steps_per_measure=100, repeats=1, baseline_steps=20, chain_length=CHAIN,
    buffer_size=1000, hidden=(16,), probe_bytes=16 * 2**20, matmul_size=256, progress=False,
)
STATIC = OPTIONS.static_for("chain")


# ------------------------------------------------------------------------------ FLOPs by hand


def test_mlp_flops_match_a_hand_count():
    network = make_network("mlp", 2, (16,))
    assert layer_macs(network, jnp.zeros((CHAIN,))) == {"Dense_0": CHAIN * 16, "head": 16 * 2}
    assert forward_flops(network, jnp.zeros((CHAIN,))) == 2 * (CHAIN * 16 + 16 * 2)
    paper = make_network("mlp", 2, (256, 256))
    assert forward_flops(paper, jnp.zeros((100,))) == 2 * (100 * 256 + 256 * 256 + 256 * 2)


def test_maze_conv_flops_match_a_hand_count():
    # 24 -> 11 -> 5 with 3x3 stride-2 VALID convolutions of 16 channels, then 400, 200 and 4 units.
    macs = 11 * 11 * (3 * 3 * 1) * 16 + 5 * 5 * (3 * 3 * 16) * 16 + 400 * 400 + 400 * 200 + 200 * 4
    assert forward_flops(make_network("maze_conv", 4), jnp.zeros((24, 24, 1))) == 2 * macs


def test_work_model_of_a_small_chain():
    model = work_model(dataclasses.replace(STATIC, target_values="table"))
    assert model.params == CHAIN * 16 + 16 + 16 * 2 + 2
    fwd, batch = 2 * (CHAIN * 16 + 16 * 2), STATIC.batch_size
    assert model.forward_flops == fwd
    assert model.flops["acting forward"] == fwd
    assert model.flops["online forward+backward"] == 3 * fwd * batch
    assert model.flops["simhash"] == 0  # the bench counts exact cell ids by default
    param_bytes = 4 * model.params
    assert model.bytes["update params"] == 4 * param_bytes
    assert model.bytes["replay"] == (batch * STATIC.n_step + 1) * model.replay_item_bytes
    assert model.total_bytes == pytest.approx(sum(model.bytes.values()))
    # the target table: every cell's two action values filled once per copy, two looked up per sample
    cells, copy = CHAIN, 1 / STATIC.target_update
    assert model.flops["target forward"] == pytest.approx(fwd * cells * copy)
    assert model.bytes["target"] == pytest.approx((3 * param_bytes + cells * 2 * 4) * copy + batch * 2 * 4)
    network = work_model(STATIC)  # float32: the target network on every batch
    assert network.flops["target forward"] == fwd * batch
    assert network.bytes["target"] == pytest.approx(param_bytes * (1 + 2 * copy))


# ------------------------------------------------------------------------------ the plain baseline


@pytest.fixture(scope="module")
def plain_runs():
    """Six seeds of OPIQ (paper setting) on the short chain, two at a time, ``STEPS`` steps each."""
    plain = cached_plain(STATIC)
    finals = []
    for pair in ((0, 1), (2, 3), (4, 5)):
        experiment = Experiment(STATIC, tuple(RunSpec("opiq", "paper", s, method_hparams("chain", "opiq"))
                                              for s in pair))
        run_keys, env_keys = run_keys_for(experiment)
        state = plain.init(run_keys, env_keys, stack_hparams(experiment.hparams()))
        state = run_plain(plain, state, STEPS)
        finals.append(jax.device_get(state.replace(key=jax.random.key_data(state.key))))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *finals)


def test_the_byte_model_counts_each_weight_storage_by_hand_and_refuses_a_strategy_it_does_not_know():
    from types import SimpleNamespace

    from opiq_jax.agent.weights import PackedStored, PackedWeights
    from opiq_jax.benchmark.traffic import target_work, unread_gradient_bytes, weight_update_bytes

    bf16 = jnp.dtype("bfloat16")
    assert weight_update_bytes(SimpleNamespace(name="float32"), 100.0, None) == 200.0  # read and written
    assert weight_update_bytes(SimpleNamespace(name="compute copy", compute_dtype=bf16), 100.0, None) == 250.0
    zeros = lambda dtype: {"w": jnp.zeros((10,), dtype)}  # noqa: E731
    run = SimpleNamespace(weights=PackedStored(compute=zeros(bf16), low=zeros(jnp.uint8), accumulator=zeros(bf16)))
    assert weight_update_bytes(PackedWeights(STATIC), 999.0, run) == 2 * (20 + 10)  # the accumulator apart
    assert unread_gradient_bytes(SimpleNamespace(name="xla"), {}, 32) == 0.0
    with pytest.raises(ValueError, match="no byte model of the weight storage 'fp8'"):
        weight_update_bytes(SimpleNamespace(name="fp8"), 1.0, None)
    with pytest.raises(ValueError, match="no byte model of the target values 'cached'"):
        target_work(SimpleNamespace(name="cached"), STATIC, 1.0, 1.0, None)


def test_plain_counts_equal_the_visits_exactly(plain_runs):
    s = plain_runs
    assert (s.step == STEPS).all() and (s.replay.size == STEPS).all()
    for run in range(s.step.shape[0]):
        cells, actions = s.replay.cell[run, :STEPS], s.replay.action[run, :STEPS]
        visits = np.zeros_like(s.counts[run])
        np.add.at(visits, (cells, actions), 1)
        np.testing.assert_array_equal(s.counts[run], visits)
        # the stored cells are the true states: thermometer observations, consecutive steps chained
        np.testing.assert_array_equal(s.replay.obs[run, :STEPS].sum(-1) - 1, cells)
        np.testing.assert_array_equal(s.replay.next_obs[run, :STEPS].sum(-1) - 1, s.replay.next_cell[run, :STEPS])
        follows = np.where(s.replay.done[run, : STEPS - 1], 1, s.replay.next_cell[run, : STEPS - 1])
        np.testing.assert_array_equal(cells[1:], follows)
        assert cells[0] == 1  # episodes start in state 1


def test_plain_targets_by_hand_bootstrap_from_the_next_cells_counts(plain_runs):
    """``plain.td_targets`` against the hand computation, with n = 3 so that windows cross episode ends (every 17
    steps), and a zero target network so that the bootstrap is the optimism term of the next cell's counts."""
    one = jax.tree.map(lambda x: x[0], plain_runs)
    run = one.replace(hparams={**one.hparams, "beta": np.float32(0.5), "c_bootstrap": np.float32(0.3),
                               "m": np.float32(2.0)},
                      target_params=jax.tree.map(np.zeros_like, one.target_params))
    static = dataclasses.replace(STATIC, n_step=3)
    horizon = CHAIN + 9
    ages = np.array([0, 5, horizon - 3, horizon - 2, horizon - 1, horizon, STEPS - 2, STEPS - 1])
    got = np.asarray(plain_td_targets(static, cached_plain(STATIC).network, run, jnp.asarray(ages)))
    expected = hand_targets(run, ages, 0.5, 0.3, 2.0, static.gamma, 3, "cell", "next_cell")
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    current_cells = hand_targets(run, ages, 0.5, 0.3, 2.0, static.gamma, 3, "cell", "cell")
    assert not np.allclose(got, current_cells, rtol=1e-5)  # the bootstrap's counts are the next cell's, which differ


def test_plain_learns_the_short_chain(plain_runs):
    s = plain_runs
    assert np.isfinite(s.loss).all() and (s.updates == STEPS - STATIC.batch_size).all()
    best = np.isclose(s.max_return, 11.0)
    assert best.sum() >= 5, f"only {best.sum()} of 6 seeds reached the best return 11: {s.max_return}"
    assert (s.episodes == STEPS // (CHAIN + 9)).all()


# ------------------------------------------------------------------------------ the sweep


def test_runs_schedule_and_stopping_rule():
    assert runs_schedule(5) == [1, 2, 4]
    assert runs_schedule(16, min_runs=3) == [4, 8, 16]
    assert keeps_growing(None, 1.0, 0.1)
    assert keeps_growing(100.0, 111.0, 0.1) and not keeps_growing(100.0, 109.0, 0.1)


def test_sweep_stops_when_the_rate_stops_growing_or_memory_runs_out(monkeypatch):
    rates = {1: 100.0, 2: 150.0, 4: 160.0, 8: 500.0}
    fake = lambda static, runs, method, repeats: Measurement(runs=runs, steps_per_s=rates[runs])  # noqa: E731
    monkeypatch.setattr(throughput, "measure_trainer", fake)
    options = dataclasses.replace(OPTIONS, max_runs=64)
    assert [m.runs for m in throughput.sweep_trainer(options, STATIC)] == [1, 2, 4]  # 160 < 1.1 x 150

    def out_of_memory(static, runs, method, repeats):
        if runs == 4:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB")
        return Measurement(runs=runs, steps_per_s=100.0 * runs)

    monkeypatch.setattr(throughput, "measure_trainer", out_of_memory)
    rows = throughput.sweep_trainer(options, STATIC)
    assert [(m.runs, m.error) for m in rows] == [(1, None), (2, None), (4, "out of memory")]


def test_memory_guard():
    assert _guarded(lambda: Measurement(runs=4), 4, 1 << 60).error == "would not fit"
    with pytest.raises(ValueError):  # anything but running out of memory is a real error
        _guarded(lambda: (_ for _ in ()).throw(ValueError("bug")), 1, 1)


def test_timed_repeats_counts_the_compiles_inside_its_intervals():
    grow = jax.jit(lambda x: jnp.concatenate([x, x]))  # a new shape each call: each call compiles
    state, seconds, compiles = timed_repeats(grow, jnp.ones(3), 2)
    assert state.shape == (12,) and len(seconds) == 2 and all(s > 0 for s in seconds) and compiles == 2
    assert timed_repeats(grow, jnp.ones(3), 2)[2] == 0  # the same shapes again: nothing left to compile


def test_plain_rows_fall_back_to_the_largest_r_that_fit():
    trainer = [Measurement(runs=r, steps_per_s=float(r)) for r in (1, 2, 4)]
    plain = {1: Measurement(runs=1, steps_per_s=1.0), 2: Measurement(runs=2, steps_per_s=2.0),
             4: Measurement(runs=4, error="would not fit")}
    assert [p.runs for _, p in pair_rows(trainer, plain)] == [1, 2, 2]
    assert [p for _, p in pair_rows(trainer, {})] == [None, None, None]
    too_big = {1: Measurement(runs=1, error="would not fit")}  # none fitted: the error is the row's plain column
    assert [p and p.error for _, p in pair_rows(trainer[:1], too_big)] == ["would not fit"]
    model = work_model(STATIC)
    rows = [row_summary(t, p, model, None) for t, p in pair_rows(trainer[:1], too_big)]
    device = dict(device_kind="test card", platform="cpu", jax="0")
    line = next(x for x in markdown_table("chain", rows, device, None, model, STATIC).splitlines()
                if x.startswith("| chain"))
    assert line.endswith("| would not fit | n/a |")


def test_bad_options_stop_with_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--max-runs", "0", "--no-progress"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().startswith("opiq-jax bench: error: --max-runs")


class FakeClock:
    """A stand-in for the ``time`` module whose ``perf_counter`` advances ``tick`` seconds at every reading, so that
    every interval the bench times lasts exactly ``tick``."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


def test_speedup_on_a_fake_clock_is_the_hand_computed_ratio(monkeypatch):
    """Trainer chunks of 100 steps of 2 runs that take 0.5 s (400 steps/s) against plain steps of 2 runs, 20 per timed
    interval, that take 2 s (20 steps/s): a speed-up of 20."""
    assert STATIC.log_every == 100
    monkeypatch.setattr(throughput, "time", FakeClock(0.5))
    trainer = throughput.measure_trainer(STATIC, 2, repeats=1)
    monkeypatch.setattr(throughput, "time", FakeClock(2.0))
    plain = throughput.measure_plain(STATIC, 2, steps=20, repeats=1)
    assert (trainer.seconds, trainer.steps_per_s, trainer.compile_s) == (0.5, 400.0, 0.5)
    assert (plain.seconds, plain.steps_per_s) == (2.0, 20.0)
    assert row_summary(trainer, plain, work_model(STATIC), None)["speedup"] == 20.0


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="asserts the CPU backend's table (no memory statistics)")
def test_bench_runs_end_to_end_on_cpu(plain_runs, tmp_path, capsys):
    report = run_bench(dataclasses.replace(OPTIONS, out=tmp_path))
    rows = report["envs"]["chain"]["rows"]
    assert [r["runs"] for r in rows] == [1, 2]
    for row in rows:
        t, p = row["trainer"], row["plain"]
        assert t["error"] is None and t["steps_per_s"] > 0 and t["compile_s"] > 0 and t["program_bytes"] > 0
        assert p["runs"] == row["runs"] and p["steps_per_s"] > 0
        assert t["compiles_timed"] == p["compiles_timed"] == 0  # compiled before the timed intervals
        assert row["speedup"] > 0  # its value: test_speedup_on_a_fake_clock_is_the_hand_computed_ratio
        assert 0 < row["bandwidth_fraction"] and 0 < row["compute_fraction"]
    assert report["peaks"]["bandwidth"] > 0 and report["peaks"]["flops_f32"] > 0

    printed = capsys.readouterr().out
    written = (tmp_path / "bench.md").read_text()
    assert printed.strip() == written.strip()
    assert jax.devices()[0].device_kind in written
    lines = [line for line in written.splitlines() if line.startswith("|")]
    assert lines[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    body = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert len(body) == 2 and all(len(cells) == len(TABLE_COLUMNS) for cells in body)
    for cells in body:
        filled = dict(zip(TABLE_COLUMNS, cells))
        assert filled["peak GiB"] == "n/a"  # the CPU backend keeps no memory statistics
        assert all(v and v != "n/a" for k, v in filled.items() if k != "peak GiB"), filled
    assert json.loads((tmp_path / "bench.json").read_text())["envs"]["chain"]["rows"][1]["runs"] == 2
    assert "XLA compiles fell inside" not in written
    recompiled = [{**rows[0], "trainer": {**rows[0]["trainer"], "compiles_timed": 1}}, rows[1]]
    assert compiles_timed_lines(recompiled) == ["", "XLA compiles fell inside the timed intervals of: trainer at R=1 "
                                                "(1); those rates include them and are too low."]
