"""Properties that a planted slip broke while every other test still passed: each is checked here directly, against
a value worked out by hand, a plain-Python reference or an exact invariant, never against a learning threshold.

RND's intrinsic reward is read at the state each step reached (sampled on both observation paths, and where the
run acted); the largest TD error and |Q| are the largest over every update of a chunk; the diagnostics restart at
every chunk; ``sketch_false_visits`` counts every never-taken pair the sketch reads as taken; ``--head-init-scale``
scales by the factor as given; a resumed pool restarts its running-episode count; an ``atari:NAME`` run is called
by its game; a sweep ranks every metric a preset may name in its direction; a preset tried small keeps to a folder
of its own; the results index and the provenance rule see a cited sub-folder as that sub-folder; the execution's
defaults are the documented ones.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent import trainer as trainer_module
from opiq_jax.agent.trainer import chunk_metrics, make_train, sample_batch, targets_for
from opiq_jax.parts.rnd import PART as RND
from opiq_jax.primitives import counts, frame_replay
from opiq_jax.primitives.state import Diagnostics
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams, program_parts
from opiq_jax.runs.experiment import Experiment, RunSpec
from tests.fake_pool import FakePool
from tests.test_properties import WINDOWS, one_run
from tests.test_values import first_run, init_one, ring_arrays
from tests.training import batch_of

EPISODE = 20  # the fake pool's episodes: 20 steps, then a reset step
HP = {"m": 2.0, "c_action": 0.1, "c_bootstrap": 0.01, "beta": 0.01, "beta_mmc": 0.3, "beta_rnd": 0.5}


def pool_trainer(method: str, steps: int, **overrides):
    """A trainer of ``method`` on a one-environment fake pool: ``steps`` steps in one chunk, a small MLP."""
    static = static_for_env("montezuma", **{
        "total_steps": steps, "log_every": steps, "buffer_size": 128, "batch_size": 64, "train_every": 4,
        "target_update": 32, "sketch_width": 512, "network": "mlp", "hidden": (16,), "rnd_outputs": 8,
        "rnd_batch": 8, "parts": program_parts([method]), **overrides})
    pool = FakePool(1, max_episode_steps=EPISODE, reward=5.0)
    return make_train(static, pool), pool


def hparams_of(static, method: str) -> dict:
    """Every hyperparameter the program of ``method`` needs (the off values of the parts it does not name), with
    :data:`HP` where the method has them."""
    own = method_hparams("montezuma", method)
    full = Experiment(static, (RunSpec(method, "x", 0, own),)).hparams()[0]
    return {k: float(HP.get(k, v)) if k in own else float(v) for k, v in full.items()}


def one_chunk(method: str, steps: int, seed: int = 2, **overrides):
    """``(trainer, the state after one chunk, its metrics)``; with the default batch of 64 nothing trains."""
    trainer, pool = pool_trainer(method, steps, **overrides)
    state = init_one(trainer, hparams_of(trainer.static, method), seed=seed, start=pool.reset())
    state, metrics = jax.jit(trainer.train_chunk)(state)
    return trainer, state, jax.device_get(metrics)


# ---------------------------------------------------------------------------------- 1. RND reads the reached state


def rnd_error(agent, run, obs: jax.Array, lead: int) -> np.ndarray:
    """beta_rnd * ||predictor(s) - target(s)||^2 of each observation ``s`` of ``obs`` (``lead`` leading axes), the
    networks applied one observation batch at a time."""
    state, (predictor, target) = run.parts["rnd"], RND.networks(agent)
    flat = obs.reshape((-1, *obs.shape[lead:]))
    error = jnp.sum(jnp.square(predictor.apply(state.params, flat) - target.apply(state.target_params, flat)), axis=-1)
    return np.asarray(run.hparams["beta_rnd"] * error).reshape(obs.shape[:lead])


def frame_error(agent, run, frames: np.ndarray) -> np.ndarray:
    """:func:`rnd_error` of uint8 frames ``[..., 84, 84]``, read as RND reads a frame (one channel)."""
    return rnd_error(agent, run, jnp.asarray(frames)[..., None], frames.ndim - 2)


@pytest.fixture(scope="module")
def rnd_pool_chunk():
    """60 steps of DQN + RND on the fake pool without an update: the predictor is still its initialisation."""
    return one_chunk("dqn_rnd", 60)


def test_rnds_sampled_reward_on_the_pool_path_is_the_error_at_the_frame_each_step_reached(rnd_pool_chunk):
    """Recomputed at sampling: step j of the window from slot k reached the frame stored in slot k + 1 + j."""
    trainer, state, _ = rnd_pool_chunk
    agent, run = trainer.agent, first_run(state.runs)
    key = jax.random.key(4)

    def sampled(r, k):
        batch = sample_batch(agent, r, k)
        return RND.intrinsic_reward(agent, r, batch), batch.included

    reward, included = map(np.asarray, jax.jit(sampled)(run, key))
    ring = ring_arrays(run)
    memory = jax.tree.map(lambda x: x[0], run.memory)
    rows = frame_replay.sample(memory, jax.random.split(key, 1)[0], trainer.static.batch_size, trainer.static.n_step)
    slots = np.asarray(rows.slots)
    last = len(ring["frames"]) - 1  # past it, no step is included: the clamp only keeps the indices in range
    steps = slots[:, None] + np.arange(trainer.static.n_step)[None]  # the slot each step left
    reached = frame_error(agent, run, ring["frames"][np.minimum(steps + 1, last)])
    left = frame_error(agent, run, ring["frames"][np.minimum(steps, last)])
    assert included.sum() > 60  # most windows run their three steps
    np.testing.assert_allclose(reward[included], reached[included], rtol=1e-5)
    assert np.all(np.abs(reached - left)[included] > 1e-6)  # every step moves: the state left would read otherwise


def test_rnds_acted_intrinsic_on_the_pool_path_is_the_error_at_the_frame_each_step_reached(rnd_pool_chunk):
    """The mean over the chunk's real steps (reset steps excluded) of the error at the frame the step received."""
    trainer, state, metrics = rnd_pool_chunk
    run = first_run(state.runs)
    ring = ring_arrays(run)
    real = np.flatnonzero(~ring["first"])  # slot k holds the frame the step into it reached
    reached = frame_error(trainer.agent, run, ring["frames"][real])
    left = frame_error(trainer.agent, run, ring["frames"][real - 1])
    assert len(real) == 60 - 2  # two reset steps between the three episodes
    assert float(metrics["acted_intrinsic"][0]) == pytest.approx(reached.mean(), rel=1e-5)
    assert left.mean() != pytest.approx(reached.mean(), rel=1e-3)


def test_rnds_sampled_reward_on_the_compact_path_is_the_error_at_the_state_each_step_reached():
    trainer, _, run = one_run("dqn_rnd")
    run = run.replace(hparams={**run.hparams, "beta_rnd": jnp.float32(0.5)})
    agent, env = trainer.agent, trainer.stepping.env
    exists = jnp.ones((2, 3), bool)
    sampled = jax.jit(lambda r, w: RND.intrinsic_reward(agent, r, batch_of(trainer, r, w, exists)))
    reward = np.asarray(sampled(run, WINDOWS))

    def error_at(compact):  # [2, 3, 1] compact states -> the error at each
        obs = jax.vmap(jax.vmap(env.obs_from_compact, in_axes=(0, None)), in_axes=(0, None))(compact, run.env.params)
        return rnd_error(agent, run, obs, 2)

    reached, left = error_at(WINDOWS.next_compact), error_at(WINDOWS.compact)
    np.testing.assert_allclose(reward, reached, rtol=1e-5)
    assert np.all(np.abs(reached - left) > 1e-6)  # every step of these windows moves


# ---------------------------------------------------------------------------------- 2, 3. the diagnostics of a chunk


def test_the_largest_td_error_and_q_are_kept_over_updates_and_the_other_diagnostics_summed():
    made = Diagnostics.zeros().add_update(3.0, 7.0, 0.25, 0.5).add_update(1.0, 2.0, 0.75, 0.0)
    means = jax.device_get(made.means())
    assert (float(means["td_error_max"]), float(means["q_abs_max"])) == (3.0, 7.0)  # the first update's, not the last
    assert (float(means["sampled_bonus"]), float(means["unknown_return_share"])) == (0.5, 0.25)


def test_td_error_max_and_q_abs_max_are_the_largest_over_every_update_of_the_chunk(monkeypatch):
    """Each update's own largest |y - Q| and |Q| (its diagnostics taken alone) recorded as the chunk trains; the
    chunk's row holds the largest of them, which an update before the last one reached."""
    alone = []
    original = trainer_module.sampled_diagnostics

    def recording(agent, run, batch, targets, q):
        fresh = run.replace(stats=run.stats.replace(diagnostics=Diagnostics.zeros()))
        own = original(agent, fresh, batch, targets, q)
        jax.debug.callback(lambda td, q: alone.append((float(np.ravel(td)[0]), float(np.ravel(q)[0]))),
                           own.td_error_max, own.q_abs_max)
        return original(agent, run, batch, targets, q)

    monkeypatch.setattr(trainer_module, "sampled_diagnostics", recording)
    _, _, metrics = one_chunk("opiq", 60, seed=3, batch_size=8)
    td, q = np.array(alone).T
    assert len(alone) >= 10
    assert float(metrics["td_error_max"][0]) == pytest.approx(td.max(), rel=1e-6)
    assert float(metrics["q_abs_max"][0]) == pytest.approx(q.max(), rel=1e-6)
    assert td.max() > td[-1] and q.max() >= q[-1]  # the last update alone would read less


def hand_diagnostics(td, q, acted_intrinsic, acted_bonus, steps, sampled_bonus, unknown, updates) -> Diagnostics:
    f, i = jnp.float32, jnp.int32
    return Diagnostics(td_error_max=f(td), q_abs_max=f(q), acted_intrinsic_sum=f(acted_intrinsic),
                       acted_bonus_sum=f(acted_bonus), acted_steps=i(steps), sampled_bonus_sum=f(sampled_bonus),
                       unknown_return_sum=f(unknown), updates=i(updates))


def test_each_chunks_diagnostics_row_holds_that_chunk_alone(rnd_pool_chunk):
    """Two chunks with hand-made diagnostics give two rows of their own values: the second row is not a running
    value over both. A chunk's end leaves the diagnostics at zero."""
    trainer, state, _ = rnd_pool_chunk
    agent, run = trainer.agent, first_run(state.runs)
    jax.tree.map(lambda x: np.testing.assert_array_equal(x, 0), run.stats.diagnostics)  # train_chunk reset them
    rows = jax.jit(lambda r: chunk_metrics(agent, r, jnp.int32(60)))

    def with_diagnostics(r, diagnostics):
        return r.replace(stats=r.stats.replace(diagnostics=diagnostics))

    after, first = rows(with_diagnostics(run, hand_diagnostics(4.0, 9.0, 6.0, 3.0, 3, 1.0, 0.5, 2)))
    later = after.stats.diagnostics.add_update(1.5, 2.5, 0.2, 0.0).add_acted(
        jnp.array([0.7]), jnp.array([0.3]), jnp.array([True]))
    _, second = rows(with_diagnostics(after, later))
    expected_first = dict(td_error_max=4.0, q_abs_max=9.0, acted_intrinsic=2.0, acted_bonus=1.0, sampled_bonus=0.5,
                          unknown_return_share=0.25)
    expected_second = dict(td_error_max=1.5, q_abs_max=2.5, acted_intrinsic=0.7, acted_bonus=0.3, sampled_bonus=0.2,
                           unknown_return_share=0.0)
    for row, expected in ((first, expected_first), (second, expected_second)):
        assert {k: pytest.approx(float(row[k]), rel=1e-6) for k in expected} == expected


# ---------------------------------------------------------------------------------- 4. the probe's false visits


def distinct_codes(count: int, rows: int, width: int) -> np.ndarray:
    """``count`` three-word codes (the first all zeros) whose sketch columns differ from each other in every row."""
    def columns(code):
        return np.asarray(counts.sketch_columns(jnp.asarray(code), rows, width))

    rng = np.random.default_rng(0)
    codes = [np.zeros(3, np.uint32)]
    while len(codes) < count:
        code = rng.integers(0, 2**32, 3, dtype=np.uint32)
        if not np.any([columns(code) == columns(c) for c in codes]):
            codes.append(code)
    return np.stack(codes)


def test_sketch_false_visits_is_the_share_of_never_taken_pairs_the_sketch_reads_as_taken():
    """Four tracked codes, three actions, the sketch's reads set by hand (every row alike). Never taken: six pairs,
    read 1, 0, 4, 0, 0 and 2, so three of six are false visits; an over-counted taken pair and the pairs of an
    untracked slot (read 7) are not among them."""
    exact = np.array([[2, 0, 0], [0, 0, 1], [0, 3, 0], [1, 1, 1]])
    read = np.array([[2, 1, 0], [4, 0, 1], [0, 3, 2], [1, 5, 1]])
    rows, width = 2, 64
    codes = distinct_codes(5, rows, width)  # codes[0] (zeros) is the untracked slot's
    sketch = jnp.zeros((3, rows, width), jnp.int32)
    for code, values in zip(codes, [np.full(3, 7), *read]):
        columns = counts.sketch_columns(jnp.asarray(code), rows, width)
        for action, value in enumerate(values):
            sketch = sketch.at[action, jnp.arange(rows), columns].set(int(value))
    probe = counts.init_probe(8, 3, 3)
    probe = probe.replace(codes=probe.codes.at[:4].set(codes[1:]), owned=probe.owned.at[:4].set(True),
                          counts=probe.counts.at[:4].set(exact))
    measured = jax.device_get(counts.probe_overcount(probe, sketch))
    assert float(measured["false_visits"]) == pytest.approx(3 / 6)
    assert float(measured["overcount"]) == pytest.approx((read - exact).sum() / 12)
    assert float(measured["codes"]) == 4


# ---------------------------------------------------------------------------------- 5. --head-init-scale


@pytest.mark.parametrize("factor", [4.0, 0.25])
def test_head_init_scale_multiplies_the_initial_output_weights_by_the_factor_as_given(factor):
    """Above 1 as below: the online and target networks' output weights are ``factor`` times the unscaled ones."""
    from opiq_jax.agent.weights import master_params
    from opiq_jax.common.config import stack_hparams
    from opiq_jax.runs.compiled import compiled_trainer
    from opiq_jax.runs.experiment import run_keys_for

    def initial(**option):
        static = static_for_env("chain", chain_length=8, total_steps=100, log_every=100, buffer_size=200,
                                hidden=(8,), parts=program_parts(["dqn"]), **option)
        experiment = Experiment(static, (RunSpec("dqn", "paper", 0, method_hparams("chain", "dqn")),))
        runs = compiled_trainer(static)[1](*run_keys_for(experiment), stack_hparams(experiment.hparams())).runs
        return master_params(static, runs), runs.target_params  # the online and the target network

    for plain, scaled in zip(initial(), initial(head_init_scale=factor)):
        a, b = plain["params"]["head"], scaled["params"]["head"]
        np.testing.assert_allclose(b["kernel"], factor * a["kernel"], rtol=1e-6)


# ---------------------------------------------------------------------------------- 6. a resumed pool


@pytest.fixture(scope="module")
def cut_and_resumed():
    """OPIQ on the fake pool stopped 18 steps into its third episode (mmc_unfinished n_step), then resumed as a
    checkpoint is: the same state continued on a fresh pool's first observation."""
    trainer, state, _ = one_chunk("opiq", 60, mmc_unfinished="n_step")
    resumed = trainer.stepping.restart(state, FakePool(1, seed=1, max_episode_steps=EPISODE, reward=5.0))
    return trainer, first_run(state.runs), first_run(jax.device_get(resumed.runs))


def test_a_resume_on_the_pool_path_starts_the_running_episode_count_at_zero(cut_and_resumed):
    _, cut, resumed = cut_and_resumed
    assert int(cut.env.episode_steps[0]) == 18  # 60 steps: 20, a reset, 20, a reset, 18
    assert int(resumed.env.episode_steps[0]) == 0
    ring = ring_arrays(resumed)
    assert ring["first"][-1] and len(ring["first"]) == 61 + 1  # the fresh episode's first frame follows the cut one


def test_the_cut_episodes_transitions_are_not_unknown_and_keep_the_mixed_target(cut_and_resumed):
    """After the resume every stored transition's return is settled: the cut episode's counts as 0 for good (the
    paper's rule), so its rows are known (no share of unknown returns) and their targets keep the mixed form
    (1 - beta_mmc) y + beta_mmc * 0 under --mmc-unfinished n_step, as every other row's does."""
    trainer, _, resumed = cut_and_resumed
    agent = trainer.agent
    beta = HP["beta_mmc"]
    memory = jax.tree.map(lambda x: x[0], resumed.memory)
    key = jax.random.key(5)
    rows = frame_replay.sample(memory, jax.random.split(key, 1)[0], trainer.static.batch_size, trainer.static.n_step)
    slots, valid = np.asarray(rows.slots), np.asarray(rows.valid)
    cut_rows = valid & (slots >= 42) & (slots < 60)  # the transitions of the third episode (its first slot is 42)
    assert cut_rows.sum() >= 5

    def sampled(run, k, beta_mmc):
        run = run.replace(hparams={**run.hparams, "beta_mmc": beta_mmc})
        batch = sample_batch(agent, run, k)
        targets, _ = targets_for(agent, run, batch)
        diagnostics = trainer_module.sampled_diagnostics(
            agent, run.replace(stats=run.stats.replace(diagnostics=Diagnostics.zeros())), batch, targets,
            trainer_module.sampled_values(agent, run, batch))
        return targets[:, 0], batch.mc_known, batch.mc_return, diagnostics.unknown_return_sum

    targets, known, mc_return, unknown_share = jax.device_get(jax.jit(sampled)(resumed, key, jnp.float32(beta)))
    plain = np.asarray(jax.jit(sampled)(resumed, key, jnp.float32(0.0))[0])
    assert known.all() and float(unknown_share) == 0.0
    np.testing.assert_array_equal(mc_return[cut_rows], 0.0)
    np.testing.assert_allclose(targets, (1 - beta) * plain + beta * mc_return, rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(plain[cut_rows]) > 1e-3)  # the mixed form differs from the n-step target alone there


# ---------------------------------------------------------------------------------- 7. an atari:NAME run's name


def test_an_atari_game_is_called_by_its_game_in_the_plan_line_the_config_and_the_figures(tmp_path, drawn):
    from opiq_jax.reporting.plotting import plot_folder
    from opiq_jax.host.plan import describe
    from tests.results_folders import curve_rows, write_folder

    static = static_for_env("atari:Venture", total_steps=100, log_every=50)
    experiment = Experiment(static, (RunSpec("opiq", "paper", 0, method_hparams("atari:Venture", "opiq")),))
    line = describe(experiment)
    config = json.dumps(experiment.to_json())
    rows = curve_rows({"opiq": [[0.0, 1.0], [1.0, 3.0]]}, [50, 100], metrics=("train_return", "max_return"))
    folder = write_folder(tmp_path / "venture", rows, **static.to_dict())
    assert plot_folder(folder)
    titles = [fig._suptitle.get_text() for fig in drawn if fig._suptitle]
    titles += [ax.get_title() for fig in drawn for ax in fig.axes if ax.get_title()]
    assert len(titles) == 2  # one figure per metric
    for text in (line, config, *titles):
        assert "Venture" in text and "Montezuma" not in text, text


# ---------------------------------------------------------------------------------- 8. a sweep's direction

SMALLER_IS_BETTER = {"loss", "td_error_max", "q_abs_max", "nonfinite", "count_nonfinite", "env_restarts",
                     "sketch_overcount", "sketch_false_visits", "unknown_return_share"}
"""Errors and faults: the setting with the smallest area is the best."""
LARGER_IS_BETTER = {"train_return", "test_return", "max_return", "states_visited", "state_actions_visited",
                    "rooms_visited", "episodes", "q_start", "qplus_start", "epsilon", "intrinsic_reward",
                    "acted_intrinsic", "acted_bonus", "sampled_bonus", "probe_codes"}
"""Returns, what was visited, and the sizes of values and bonuses that no one calls an error."""


def every_rankable_metric() -> set[str]:
    """Every metric a preset may name: what the runs of any method on any registered environment record."""
    from opiq_jax.registry.environments import ENVIRONMENTS
    from opiq_jax.registry.methods import METHODS
    from opiq_jax.host.sweeping import ranked_metrics

    return {m for env in ENVIRONMENTS for m in ranked_metrics(env, list(METHODS))}


def test_a_sweep_ranks_every_metric_a_preset_may_name_in_its_direction(tmp_path, capsys):
    """Two settings whose curves differ by a constant: the best setting in best.md and the first one in the ranking
    is the smaller one for an error or fault metric and the larger one for every other."""
    from opiq_jax.host.sweeping import rank_settings, write_tables
    from tests.results_folders import tidy_row, write_folder

    metrics = every_rankable_metric()
    assert metrics <= SMALLER_IS_BETTER | LARGER_IS_BETTER, metrics - SMALLER_IS_BETTER - LARGER_IS_BETTER
    assert {"q_abs_max", "td_error_max", "loss"} <= metrics
    rows, run = [], 0
    for setting, level in (("larger", 2.0), ("smaller", 1.0)):
        for seed in range(2):
            rows += [tidy_row(run, "opiq", seed, step, metric, level + seed + step / 100, setting)
                     for step in (100, 200) for metric in sorted(metrics)]
            run += 1
    out = tmp_path / "sweep"
    write_folder(out / "batch_000", rows, env="chain", total_steps=200, log_every=100)
    for metric in sorted(metrics):
        expected = "smaller" if metric in SMALLER_IS_BETTER else "larger"
        ranking = rank_settings(out, metric)
        write_tables(out, ranking, metric)
        best = [line for line in (out / "best.md").read_text().splitlines() if line.startswith("| opiq |")]
        assert ranking[0]["setting"] == expected, metric
        assert len(best) == 1 and best[0].startswith(f"| opiq | {expected} |"), metric
    capsys.readouterr()  # write_tables prints each table


# ---------------------------------------------------------------------------------- 9. a preset tried small


def test_a_preset_shrunk_by_seeds_alone_or_steps_alone_writes_to_a_folder_of_its_own(tmp_path, monkeypatch):
    import opiq_jax.api as api

    folders = []
    monkeypatch.setattr(api, "run_sweep", lambda preset, out, **_: folders.append((out, preset.seeds,
                                                                                   preset.static["total_steps"])))
    monkeypatch.chdir(tmp_path)
    for shrink in ({}, {"seeds": 2}, {"steps": 2000}, {"seeds": 2, "steps": 2000}):
        api.sweep("chain_opiq", **shrink)
    default, *trials = folders
    assert default == (Path("results/sweep-chain_opiq"), 20, 100_000)
    assert trials == [(Path("results/sweep-chain_opiq-seeds2-steps100000"), 2, 100_000),
                      (Path("results/sweep-chain_opiq-seeds20-steps2000"), 20, 2000),
                      (Path("results/sweep-chain_opiq-seeds2-steps2000"), 2, 2000)]


# ---------------------------------------------------------------------------------- 10. a cited sub-folder


def results_tree(root: Path) -> Path:
    """A repository whose README cites two sub-folders of one family: ``sub-a`` complete with what its family holds
    above it (the command, the run info), ``sub-b`` holding only a figure. Returns the results folder."""
    results = root / "docs" / "results"
    family = results / "family"
    for folder in (family / "sub-a", family / "sub-b"):
        folder.mkdir(parents=True)
        (folder / "figure.png").write_bytes(b"png")
    (family / "README.md").write_text("# The family's claim\n\n    opiq-jax train --env chain\n", encoding="utf-8")
    (family / "run_info.json").write_text(json.dumps({"device": "cpu", "seconds": 1.5}), encoding="utf-8")
    (family / "sub-a" / "metrics.csv").write_text("run,step\n", encoding="utf-8")
    (family / "sub-a" / "config.json").write_text("{}", encoding="utf-8")
    (root / "README.md").write_text("![a](docs/results/family/sub-a/figure.png) and docs/results/family/sub-b.\n",
                                    encoding="utf-8")
    return results


def test_the_index_and_the_provenance_rule_see_a_cited_sub_folder_as_that_sub_folder(tmp_path, monkeypatch):
    """A citation of a sub-folder is of that sub-folder: the provenance rule checks it with what lies in it, below
    it and above it (its family's command and run info), never with its sibling's files; the index files it under
    its family, cited by the page."""
    from experiments.tools import results_index
    from tests import test_provenance

    results = results_tree(tmp_path)
    for module in (results_index, test_provenance):
        monkeypatch.setattr(module, "ROOT", tmp_path)
        monkeypatch.setattr(module, "RESULTS", results)
    family = results / "family"
    assert results_index.cited_folders() == {family / "sub-a": {"README.md"}, family / "sub-b": {"README.md"}}
    assert results_index.citing_pages() == {"family": ["README.md"]}
    assert "| [family](family/) | The family's claim | [README](../../README.md) |" in results_index.index_text()
    assert test_provenance.problems(family / "sub-a") == []
    missing = test_provenance.problems(family / "sub-b")
    assert len(missing) == 2 and all(m.startswith("docs/results/family/sub-b: ") for m in missing)
    assert "metrics" in missing[0] and "configuration" in missing[1]
    assert test_provenance.problems(family) == []  # the top folder alone would pass: sub-a's files are below it


# ---------------------------------------------------------------------------------- 11. the execution's defaults

DOCUMENTED_EXECUTION = dict(precision="float32", weight_storage="float32", mlp_backward="auto", maze_torso="auto",
                            target_values="auto", overlap=True)
"""docs/choices.md and docs/performance.md: float32 (the paper's arithmetic), the automatic choices, and a pool's
update overlapping its emulators' step (``--no-overlap`` keeps the paper's order)."""


@pytest.fixture
def fake_pool_env():
    from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec, register_environment

    register_environment(dataclasses.replace(
        environment_spec("montezuma"), name="fake_pool_env", check=None,
        make=lambda static, num_envs, seed, **kw: FakePool(num_envs, seed, EPISODE, **kw)))
    yield "fake_pool_env"
    ENVIRONMENTS.pop("fake_pool_env")


def test_the_execution_defaults_are_the_documented_ones_on_every_path(fake_pool_env):
    """Read directly: the configuration's defaults, every environment's, the API's and the command line's plans,
    and the pool path a default plan builds (its update overlaps the emulators' step)."""
    import tyro

    from opiq_jax.cli import plan_from_args, train_command
    from opiq_jax.common.config import Execution
    from opiq_jax.host.plan import plan_experiment

    assert dataclasses.asdict(Execution()) == DOCUMENTED_EXECUTION
    for env in ("chain", "maze", "montezuma", "atari:Venture", fake_pool_env):
        assert dataclasses.asdict(static_for_env(env).execution) == DOCUMENTED_EXECUTION, env
    planned = plan_experiment(fake_pool_env, ["opiq"], 1, options={"buffer_size": 64}).static
    argv = ["--env", fake_pool_env, "--seeds", "1", "--buffer-size", "64"]  # a replay that fits any machine
    parsed = plan_from_args(tyro.cli(train_command(), args=argv))[0].static
    no_overlap = plan_from_args(tyro.cli(train_command(), args=[*argv, "--no-overlap"]))[0].static
    for static in (planned, parsed):
        assert dataclasses.asdict(static.execution) == DOCUMENTED_EXECUTION
    assert no_overlap.execution.overlap is False
    small = dict(total_steps=32, log_every=16, buffer_size=64, batch_size=8, network="mlp", hidden=(8,))
    assert make_train(dataclasses.replace(planned, **small), FakePool(1)).stepping.overlaps is True
    assert make_train(dataclasses.replace(no_overlap, **small), FakePool(1)).stepping.overlaps is False
