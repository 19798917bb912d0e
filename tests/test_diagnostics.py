"""The pool path's learning diagnostics, each checked against a value worked out by hand or by a plain Python recount:
the bonuses where the run acted, the largest TD error and |Q| of an update (invalid rows masked), the share of
sampled transitions whose Monte Carlo return is unknown, the mixed target's rule for them, and the count probe's
measure of the sketch's over-counting."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import make_train, sample_batch, sampled_diagnostics, sampled_values, targets_for
from opiq_jax.primitives import counts, frame_replay
from opiq_jax.primitives.state import DIAGNOSTIC_METRICS, Diagnostics
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import method_hparams, program_parts
from tests.fake_pool import FakePool
from tests.test_values import first_run, frame_codes, init_one, monte_carlo_returns, ring_arrays

STEPS = 60  # three 20-step episodes of the fake pool, with reset steps between
HP = {"m": 2.0, "c_action": 0.1, "c_bootstrap": 0.01, "beta": 0.01, "beta_mmc": 0.3}


def pool_trainer(**overrides):
    # flax's draw, so that a bonus read at the greedy action instead of the chosen one shows: under the authors'
    # draw (Montezuma's default) the two bonuses agreed at every step of this chunk and that mistake went unseen
    static = static_for_env("montezuma", total_steps=STEPS, log_every=STEPS, buffer_size=128, train_every=4,
                            target_update=32, sketch_width=512, network="mlp", hidden=(16,), network_init="flax",
                            parts=program_parts(["opiq"]), **{"batch_size": 64, **overrides})
    pool = FakePool(1, max_episode_steps=20, reward=5.0)
    return make_train(static, pool), pool


@pytest.fixture(scope="module")
def untrained_chunk():
    """One chunk of OPIQ whose batch exceeds the chunk: nothing trains, so acting alone made the counts."""
    trainer, pool = pool_trainer()
    state = init_one(trainer, method_hparams("montezuma", "opiq", **HP), seed=2, start=pool.reset())
    state, metrics = jax.jit(trainer.train_chunk)(state)
    return trainer, first_run(state.runs), jax.device_get(metrics)


@pytest.fixture(scope="module")
def trained_chunk():
    """One chunk of OPIQ with a batch of 8: it trains from step 9 on, one update every 4 steps."""
    trainer, pool = pool_trainer(batch_size=8)
    state = init_one(trainer, method_hparams("montezuma", "opiq", **HP), seed=3, start=pool.reset())
    state, metrics = jax.jit(trainer.train_chunk)(state)
    return trainer, first_run(state.runs), jax.device_get(metrics)


def test_the_pool_path_reports_the_diagnostics_instead_of_qplus_start(untrained_chunk):
    trainer, _, metrics = untrained_chunk
    names = trainer.metric_names
    assert "qplus_start" not in names and set(DIAGNOSTIC_METRICS) <= set(names)
    assert {"sketch_overcount", "sketch_false_visits", "probe_codes"} <= set(names)
    # no update was made: what only updates measure is NaN, what acting measures is there
    for name in ("td_error_max", "q_abs_max", "sampled_bonus", "unknown_return_share"):
        assert np.isnan(metrics[name][0]), name
    assert np.isfinite(metrics["acted_bonus"][0]) and np.isfinite(metrics["acted_intrinsic"][0])


def test_bonuses_where_the_run_acted_by_recount(untrained_chunk):
    """acted_bonus: C_action / (N(s, a) + 1)^M of each chosen action with the counts before its step; acted_intrinsic:
    beta / sqrt(N(s, a)) with the counts after it; both the mean over the real steps (reset steps excluded)."""
    _, run, metrics = untrained_chunk
    ring = ring_arrays(run)
    codes = frame_codes(ring["frames"])
    seen: Counter = Counter()
    bonuses, rewards = [], []
    for k in range(1, len(codes)):
        if ring["first"][k]:
            continue
        pair = (codes[k - 1], int(ring["action"][k]))
        bonuses.append(HP["c_action"] / (seen[pair] + 1) ** HP["m"])
        seen[pair] += 1
        rewards.append(HP["beta"] / np.sqrt(seen[pair]))
    assert len(bonuses) == STEPS - 2
    assert float(metrics["acted_bonus"][0]) == pytest.approx(np.mean(bonuses), rel=1e-5)
    assert float(metrics["acted_intrinsic"][0]) == pytest.approx(np.mean(rewards), rel=1e-5)


def test_the_running_episode_is_counted_in_stored_transitions(untrained_chunk):
    """episode_steps: the transitions since the ring's last first slot (the running episode's, returns unknown)."""
    _, run, _ = untrained_chunk
    ring = ring_arrays(run)
    last_first = max(k for k in range(len(ring["first"])) if ring["first"][k])
    assert int(run.env.episode_steps[0]) == len(ring["first"]) - 1 - last_first


def test_return_unknown_marks_only_the_running_episode():
    """A ring of: first, two steps ending an episode, first, two steps of a running episode. The transitions from
    slots 0 and 1 have returns; those from slots 3 and 4 do not (slot 2 ended its episode, slot 5 leads nowhere)."""
    ring = frame_replay.init(8, (2, 2))
    for first, done in [(True, False), (False, False), (False, True), (True, False), (False, False), (False, False)]:
        ring = frame_replay.add(ring, jnp.zeros((2, 2), jnp.uint8), jnp.int32(0), jnp.float32(1.0), done, False, first)
    unknown = frame_replay.return_unknown(ring, jnp.arange(5), jnp.int32(2))
    np.testing.assert_array_equal(np.asarray(unknown)[[0, 1, 3, 4]], [False, False, True, True])
    # a full ring that wrapped: the newest slots are still the running episode's
    for _ in range(5):
        ring = frame_replay.add(ring, jnp.zeros((2, 2), jnp.uint8), jnp.int32(0), jnp.float32(1.0), False, False, False)
    newest = (int(ring.position) - 1) % 8
    slots = jnp.array([(newest - back) % 8 for back in (1, 6, 7)])  # into the newest slot, the 6th newest, the oldest
    np.testing.assert_array_equal(np.asarray(frame_replay.return_unknown(ring, slots, jnp.int32(6))),
                                  [True, True, False])


def with_valid_rows(batch, rows):
    batch.weights = jnp.zeros_like(batch.weights).at[jnp.asarray(rows)].set(1.0)
    return batch


def diagnosed_update(agent, run, key, rows):
    """One update's diagnostics on a sampled batch whose valid rows are ``rows``; with them the batch's first actions,
    count columns and known returns, its targets, and Q(s_t, .) from the network applied by hand. One compiled
    program: op by op, the first test to sample made about 300 small compiles."""

    @jax.jit
    def update(run, key):
        batch = with_valid_rows(sample_batch(agent, run, key), rows)
        targets, _ = targets_for(agent, run, batch)
        run = run.replace(stats=run.stats.replace(diagnostics=Diagnostics.zeros()))
        diag = sampled_diagnostics(agent, run, batch, targets, sampled_values(agent, run, batch))
        taken = dict(actions=batch.actions[:, 0], columns=batch.step_columns[:, 0], mc_known=batch.mc_known)
        return taken, targets, diag, agent.q_network.apply(agent.forward_params(run), batch.obs)

    return update(run, key)


def test_largest_td_error_and_q_of_an_update_by_hand(trained_chunk):
    """Over the valid rows only: max |y - Q(s_t, a_t)| and max |Q(s_t, .)|, Q from the network applied by hand."""
    trainer, run, _ = trained_chunk
    batch, targets, diag, q = diagnosed_update(trainer.agent, run, jax.random.key(7), [1, 4])
    q = np.asarray(q)  # [B, A]
    taken = q[np.arange(q.shape[0]), np.asarray(batch["actions"])]
    errors = np.abs(taken - np.asarray(targets[:, 0]))
    assert float(diag.td_error_max) == pytest.approx(errors[[1, 4]].max(), rel=1e-5)
    assert float(diag.q_abs_max) == pytest.approx(np.abs(q[[1, 4]]).max(), rel=1e-5)
    assert int(diag.updates) == 1


def test_sampled_bonus_and_unknown_share_by_hand(trained_chunk):
    trainer, run, _ = trained_chunk
    batch, _, diag, _ = diagnosed_update(trainer.agent, run, jax.random.key(11), [0, 2, 5])
    n = np.asarray(jax.vmap(lambda cols, a: counts.query(run.counts.sketch, cols, a))(
        batch["columns"], batch["actions"]))
    bonus = HP["c_action"] / (n + 1.0) ** HP["m"]
    assert float(diag.sampled_bonus_sum) == pytest.approx(bonus[[0, 2, 5]].mean(), rel=1e-5)
    unknown = ~np.asarray(batch["mc_known"])
    assert float(diag.unknown_return_sum) == pytest.approx(unknown[[0, 2, 5]].mean())


def test_a_return_is_unknown_exactly_while_its_episode_runs(trained_chunk):
    """Sampled from the run's ring: a transition's return is unknown exactly when it lies after the ring's last first
    slot (the running episode); a known one equals the discounted clipped return recounted by hand, an unknown one
    reads 0; and the pool path's batch says the same as the ring."""
    trainer, run, _ = trained_chunk
    ring = ring_arrays(run)
    last_first = max(k for k in range(len(ring["first"])) if ring["first"][k])
    returns = monte_carlo_returns(ring, trainer.static.gamma)
    memory = jax.tree.map(lambda x: x[0], run.memory)
    sampled = frame_replay.sample(memory, jax.random.key(5), 64, trainer.static.n_step)
    unknown = np.asarray(frame_replay.return_unknown(memory, sampled.slots, run.env.episode_steps[0]))
    slots = np.asarray(sampled.slots)
    np.testing.assert_array_equal(unknown, slots + 1 > last_first)
    assert unknown.any() and (~unknown).any()
    np.testing.assert_allclose(np.asarray(sampled.mc_return)[~unknown], returns[slots[~unknown] + 1], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(sampled.mc_return)[unknown], 0.0)
    # the path draws its one ring's rows with the first of its split keys
    rows = frame_replay.sample(memory, jax.random.split(jax.random.key(5), 1)[0], trainer.static.batch_size,
                               trainer.static.n_step)
    batch = sample_batch(trainer.agent, run, jax.random.key(5))
    np.testing.assert_array_equal(~np.asarray(batch.mc_known),
                                  np.asarray(frame_replay.return_unknown(memory, rows.slots, run.env.episode_steps[0])))


@pytest.mark.parametrize("rule", ["zero", "n_step"])
def test_the_mixed_targets_rule_for_unfinished_episodes(rule):
    """zero (the paper): (1 - beta_mmc) y + beta_mmc * 0 while the episode runs; n_step: y alone until it ends. Rows
    whose return is known mix it in under both rules."""
    trainer, pool = pool_trainer(batch_size=8, mmc_unfinished=rule)
    state = init_one(trainer, method_hparams("montezuma", "opiq", **HP), seed=3, start=pool.reset())
    state, _ = jax.jit(trainer.train_chunk)(state)
    run, agent = first_run(state.runs), trainer.agent
    batch = sample_batch(agent, run, jax.random.key(5))
    targets, _ = targets_for(agent, run, batch)
    plain, _ = targets_for(agent, run.replace(hparams={**run.hparams, "beta_mmc": jnp.float32(0.0)}), batch)
    known = np.asarray(batch.mc_known)
    beta = HP["beta_mmc"]
    mixed = (1 - beta) * np.asarray(plain[:, 0]) + beta * np.asarray(batch.mc_return)
    np.testing.assert_allclose(np.asarray(targets[known, 0]), mixed[known], rtol=1e-5)
    expected_unknown = np.asarray(plain[:, 0]) if rule == "n_step" else (1 - beta) * np.asarray(plain[:, 0])
    np.testing.assert_allclose(np.asarray(targets[~known, 0]), expected_unknown[~known], rtol=1e-5)


def test_mmc_unfinished_is_a_pool_option():
    from opiq_jax.common.errors import UsageError
    from opiq_jax.host.plan import static_with

    with pytest.raises(UsageError, match="applies to environments stepped through a pool"):
        static_with("chain", {"mmc_unfinished": "n_step"})


# ---------------------------------------------------------------------------------- the count probe


def random_codes(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, size=(count, 3), dtype=np.uint32)


def visit(probe, sketch, codes, actions):
    update = jax.jit(lambda p, s, c, a: (counts.probe_update(p, c, a),
                                         counts.update(s, counts.sketch_columns(c, s.shape[1], s.shape[2]), a)))
    for code, action in zip(codes, actions):
        probe, sketch = update(probe, sketch, jnp.asarray(code), jnp.int32(action))
    return probe, sketch


def test_the_probe_counts_exactly_the_codes_it_owns():
    """Each owned slot holds one code whose counts equal a dictionary recount of every visit of that code."""
    pool = random_codes(40)
    rng = np.random.default_rng(1)
    picks = rng.integers(0, len(pool), 300)
    actions = rng.integers(0, 3, 300)
    probe, _ = visit(counts.init_probe(16, 3, 3), counts.init_sketch(3, 4, 1 << 10), pool[picks], actions)
    exact = Counter((tuple(pool[p]), int(a)) for p, a in zip(picks, actions))
    owned = np.asarray(probe.owned)
    assert 0 < owned.sum() <= 16
    for slot in np.flatnonzero(owned):
        code = tuple(np.asarray(probe.codes[slot]).tolist())
        np.testing.assert_array_equal(np.asarray(probe.counts[slot]), [exact[(code, a)] for a in range(3)])
        # the slot is the code's own, and the code was first seen after no other code had claimed it
        assert int(counts.probe_slot(jnp.asarray(np.array(code, np.uint32)), 16)) == slot


def test_the_probe_reads_no_overcount_on_a_wide_sketch_and_the_collisions_of_a_narrow_one():
    pool = random_codes(30, seed=2)
    rng = np.random.default_rng(3)
    picks, actions = rng.integers(0, len(pool), 200), rng.integers(0, 2, 200)
    probe, wide = visit(counts.init_probe(64, 3, 2), counts.init_sketch(2, 4, 1 << 16), pool[picks], actions)
    read = counts.probe_overcount(probe, wide)
    assert float(read["overcount"]) == 0.0 and float(read["false_visits"]) == 0.0
    # one row of width 2: every code's count is the visits of its column, recounted by hand
    probe, narrow = visit(counts.init_probe(64, 3, 2), counts.init_sketch(2, 1, 2), pool[picks], actions)
    read = jax.device_get(counts.probe_overcount(probe, narrow))
    column = {tuple(c): int(counts.sketch_columns(jnp.asarray(np.array(c, np.uint32)), 1, 2)[0]) for c in pool.tolist()}
    per_column = Counter((column[tuple(pool[p].tolist())], int(a)) for p, a in zip(picks, actions))
    exact = Counter((tuple(pool[p].tolist()), int(a)) for p, a in zip(picks, actions))
    overs, untaken, false = [], 0, 0
    for slot in np.flatnonzero(np.asarray(probe.owned)):
        code = tuple(np.asarray(probe.codes[slot]).tolist())
        for a in range(2):
            over = per_column[(column[code], a)] - exact[(code, a)]
            overs.append(over)
            if exact[(code, a)] == 0:
                untaken += 1
                false += per_column[(column[code], a)] > 0
    assert float(read["overcount"]) == pytest.approx(np.mean(overs)) and np.mean(overs) > 0
    assert float(read["codes"]) == np.asarray(probe.owned).sum()
    if untaken:
        assert float(read["false_visits"]) == pytest.approx(false / untaken)


def test_the_pool_paths_probe_agrees_with_its_sketch_on_the_fake_pool(untrained_chunk):
    """The fake pool's few codes never collide in a 4 x 512 sketch: no over-count, and the probe holds codes."""
    _, _, metrics = untrained_chunk
    assert float(metrics["probe_codes"][0]) > 0
    assert float(metrics["sketch_overcount"][0]) == 0.0 and float(metrics["sketch_false_visits"][0]) == 0.0
