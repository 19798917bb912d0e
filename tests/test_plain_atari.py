"""The plain baseline's Atari form (``opiq_jax.benchmark.plain_atari``) on a stand-in pool: it learns, counts the
hashed frame feature of every real step (never EnvPool's reset step), stores whole transitions and samples them
uniformly, adds ``beta / sqrt(N)``, bootstraps from the target network's Q+ and copies that network on schedule.

The pool is ``tests/fake_pool.FakePool`` (EnvPool's conventions in pure JAX, no emulator): two runs, 30-step
episodes paying 5 (clipped to 1) every 7 steps, 48 steps, an update of 4 windows of 3 steps every 4 steps and a
target copy every 8. ``tests/test_throughput_table.py`` times it on EnvPool's Montezuma.
The replay sampling and the n-step walk tested here are :mod:`opiq_jax.benchmark.plain`'s, which the chain and maze
baseline runs too. Run: ``JAX_PLATFORMS=cpu pytest tests/test_plain_atari.py``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.benchmark import plain_atari as pa
from opiq_jax.benchmark.plain import intrinsic_reward, ring_positions, sample_ages
from opiq_jax.common.config import make_hparams, stack_hparams
from opiq_jax.envs.atari import StepOutput
from opiq_jax.registry.environments import static_for_env
from opiq_jax.registry.methods import get_method, method_hparams
from tests.fake_pool import FakePool
from tests.hand_targets import hand_targets

RUNS, STEPS, EPISODE = 2, 48, 30
STATIC = static_for_env("montezuma", buffer_size=64, batch_size=4, target_update=8)  # n = 3, an update per 4 steps
STORED = STEPS - 1  # the step after the episode's end (step 31) is EnvPool's reset step: no transition


def head_bias(params) -> np.ndarray:
    return np.array(params["params"]["head"]["bias"])


@pytest.fixture(scope="module")
def trained():
    """The plain baseline after each of ``STEPS`` steps (its schedule's snapshots) and its final state."""
    pool = FakePool(RUNS, max_episode_steps=EPISODE, reward_every=7, reward=5.0)
    plain = pa.make_plain_atari(STATIC, pool, count_slots=4096)
    hp = make_hparams(get_method("opiq").options(), method_hparams("montezuma", "opiq"))
    state = plain.init(jax.random.split(jax.random.key(0), RUNS), stack_hparams([hp] * RUNS), pool.reset())
    snapshots = [dict(step=0, updates=0, params=head_bias(state.runs.params),
                      target=head_bias(state.runs.target_params))]
    for _ in range(STEPS):
        state = plain.step(state)
        snapshots.append(dict(step=int(state.step), updates=int(state.runs.updates[0]),
                              params=head_bias(state.runs.params), target=head_bias(state.runs.target_params)))
    return plain, state, snapshots


def one_run(state: pa.PlainAtariState, index: int = 0) -> pa.PlainAtariRun:
    return jax.tree.map(lambda x: x[index], state.runs)


def test_it_learns_and_keeps_episode_statistics(trained):
    _, state, snapshots = trained
    runs = state.runs
    assert int(state.step) == STEPS
    np.testing.assert_array_equal(runs.updates, [len(range(8, STEPS + 1, 4))] * RUNS)
    assert np.isfinite(runs.loss).all()
    assert not np.array_equal(snapshots[-1]["params"], snapshots[0]["params"])  # the updates moved the network
    np.testing.assert_array_equal(runs.episodes, [1] * RUNS)  # one 30-step episode, truncated
    np.testing.assert_array_equal(runs.last_return, [20.0] * RUNS)  # 5 at steps 7, 14, 21, 28, unclipped


def test_counts_are_the_stored_transitions_by_slot_and_action(trained):
    plain, state, _ = trained
    replay = state.runs.replay
    np.testing.assert_array_equal(replay.size, [STORED] * RUNS)
    for r in range(RUNS):
        expected = np.zeros((plain.count_slots, 18), np.int32)
        np.add.at(expected, (np.asarray(replay.slot[r, :STORED]), np.asarray(replay.action[r, :STORED])), 1)
        np.testing.assert_array_equal(state.runs.counts[r], expected)
    slot_of_stack = jax.vmap(jax.vmap(lambda stack: pa.frame_slot(stack[-1], plain.count_slots)))
    np.testing.assert_array_equal(replay.slot[:, :STORED], slot_of_stack(replay.obs[:, :STORED]))
    np.testing.assert_array_equal(replay.next_slot[:, :STORED], slot_of_stack(replay.next_obs[:, :STORED]))


def test_whole_transitions_are_stored_and_the_reset_step_is_not(trained):
    _, state, _ = trained
    replay = jax.tree.map(lambda x: np.asarray(x[0]), state.runs.replay)
    pool = FakePool(1)
    assert replay.obs.dtype == np.uint8 and replay.obs.shape[1:] == (4, 84, 84)
    np.testing.assert_array_equal(replay.next_obs[:EPISODE - 1], replay.obs[1:EPISODE])  # consecutive stacks
    np.testing.assert_array_equal(np.flatnonzero(replay.done[:STORED]), [EPISODE - 1])  # the truncation only
    assert not replay.terminated[:STORED].any()
    np.testing.assert_array_equal(np.flatnonzero(replay.reward[:STORED]), [6, 13, 20, 27, 36, 43])  # reaching 7k
    np.testing.assert_array_equal(replay.reward[6], 1.0)  # clipped
    # the transition after the episode's end starts from the new episode's first stack (its first frame four times)
    fresh = np.asarray(pool.frame(jnp.int32(0), jnp.int32(0)))
    np.testing.assert_array_equal(replay.obs[EPISODE], np.broadcast_to(fresh, (4, 84, 84)))


def test_the_count_of_a_frame_feature_increments_on_real_steps_only(trained):
    plain, state, _ = trained
    run = one_run(state)
    frame = jnp.zeros((84, 84), jnp.uint8).at[40:60, 10:30].set(200)
    out = StepOutput(obs=jnp.broadcast_to(frame, (4, 84, 84)), reward=jnp.float32(0), terminated=jnp.bool_(False),
                     truncated=jnp.bool_(False), first=jnp.bool_(False), room=jnp.int32(1), lives=jnp.int32(5))
    slot, action = pa.frame_slot(run.obs[-1], plain.count_slots), jnp.int32(3)
    after = plain.record(run, slot, action, out)
    assert int(after.counts[slot, action]) == int(run.counts[slot, action]) + 1
    assert int(after.counts.sum()) == int(run.counts.sum()) + 1
    assert int(after.replay.size) == STORED + 1 and int(after.replay.slot[STORED]) == int(slot)
    reset = plain.record(run, slot, action, out._replace(first=jnp.bool_(True)))
    np.testing.assert_array_equal(reset.counts, run.counts)
    assert int(reset.replay.size) == STORED and int(reset.replay.position) == int(run.replay.position)
    np.testing.assert_array_equal(reset.replay.obs, run.replay.obs)
    np.testing.assert_array_equal(reset.obs, out.obs)  # the run acts on from the new episode's stack


def test_frame_slot_hashes_the_8_by_11_feature():
    blank = jnp.zeros((84, 84), jnp.uint8)
    faint = blank.at[0, 0].set(20)  # moves one 8x11 pixel's mean by far less than a level
    block = blank.at[:20, :20].set(255)
    slots = [int(pa.frame_slot(f, 1 << 16)) for f in (blank, faint, block)]
    assert slots[0] == slots[1] != slots[2]
    assert all(0 <= s < 1 << 16 for s in slots)
    assert int(pa.frame_slot(block, 7)) < 7


def test_the_bonus_is_beta_over_the_square_root_of_the_count():
    np.testing.assert_allclose(intrinsic_reward(jnp.array([1, 4, 9, 100]), jnp.float32(0.5)),
                               [0.5, 0.25, 0.5 / 3, 0.05], rtol=1e-6)


def test_replay_is_sampled_uniformly_over_the_stored_transitions():
    ring = pa.empty_transitions(16).replace(position=jnp.int32(3), size=jnp.int32(10))  # wrapped: slots 9..15, 0..2
    draws = 20_000
    ages = np.asarray(sample_ages(ring, jax.random.key(1), draws))
    assert ages.min() == 0 and ages.max() == 9
    frequencies = np.bincount(ages, minlength=10) / draws
    np.testing.assert_allclose(frequencies, 0.1, atol=0.012)  # about 5 standard deviations
    assert set(np.asarray(ring_positions(ring, jnp.arange(10)))) == {9, 10, 11, 12, 13, 14, 15, 0, 1, 2}


@pytest.mark.parametrize("terminal", [False, True], ids=["truncated", "terminated"])
def test_targets_sum_n_rewards_with_bonuses_and_bootstrap_from_q_plus(trained, terminal):
    plain, state, _ = trained
    run = one_run(state)
    run = run.replace(
        hparams={**run.hparams, "beta": jnp.float32(0.5), "c_bootstrap": jnp.float32(0.3), "m": jnp.float32(2.0)},
        target_params=jax.tree.map(jnp.zeros_like, run.target_params),  # Q_target = 0: the bootstrap is the bonus
        replay=run.replay.replace(terminated=run.replay.terminated.at[EPISODE - 1].set(terminal)),
    )
    ages = jnp.array([0, 10, EPISODE - 3, EPISODE - 2, EPISODE - 1, EPISODE, STORED - 2, STORED - 1])
    got = pa.td_targets(STATIC, plain.network, run, ages)
    expected = hand_targets(run, np.asarray(ages), 0.5, 0.3, 2.0, STATIC.gamma, STATIC.n_step, "slot", "next_slot")
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_targets_read_windows_across_the_end_of_the_ring(trained):
    """The same transitions stored from ring slot 40 on (so windows run over slot 63 into slot 0) give the same
    targets as stored from slot 0."""
    plain, state, _ = trained
    run = one_run(state)
    capacity, start = run.replay.obs.shape[0], 40
    assert int(run.replay.position) == int(run.replay.size) == STORED  # stored from slot 0, not wrapped yet
    rolled = jax.tree.map(lambda x: jnp.roll(x, start, axis=0) if x.ndim else x, run.replay)
    rolled = rolled.replace(position=jnp.int32((STORED + start) % capacity))
    ages = jnp.arange(STORED)
    assert int(ring_positions(rolled, jnp.int32(capacity - start - 1))) == capacity - 1  # a window that wraps
    np.testing.assert_allclose(pa.td_targets(STATIC, plain.network, run.replace(replay=rolled), ages),
                               pa.td_targets(STATIC, plain.network, run, ages), rtol=1e-6)


def test_updates_and_target_copies_follow_the_schedule(trained):
    _, _, snapshots = trained
    for snap in snapshots:
        step = snap["step"]
        assert snap["updates"] == sum(1 for s in range(1, step + 1) if s >= STATIC.batch_size + 1 and s % 4 == 0)
        last_copy = snapshots[step - step % STATIC.target_update]
        np.testing.assert_array_equal(snap["target"], last_copy["params"])
    assert not np.array_equal(snapshots[44]["target"], snapshots[44]["params"])  # updated at 44, copied at 40


def test_actions_are_epsilon_greedy_on_q_plus(trained):
    plain, state, _ = trained
    run = one_run(state)
    head = run.params["params"]["head"]
    flat_q = {"params": {**run.params["params"], "head": jax.tree.map(jnp.zeros_like, head)}}  # Q = 0 everywhere
    slot = pa.frame_slot(run.obs[-1], plain.count_slots)
    counts = run.counts.at[slot].set(3).at[slot, 5].set(0)  # every action tried but 5: Q+ prefers 5
    greedy = {**run.hparams, "epsilon_start": jnp.float32(0), "epsilon_end": jnp.float32(0)}
    run = run.replace(params=flat_q, counts=counts, hparams=greedy)
    moved, action, acted_slot = plain.act(jnp.int32(0), run)
    assert int(action) == 5 and int(acted_slot) == int(slot)
    assert not np.array_equal(jax.random.key_data(moved.key), jax.random.key_data(run.key))
    explore = run.replace(hparams={**greedy, "epsilon_start": jnp.float32(1), "epsilon_end": jnp.float32(1)})
    actions = {int(plain.act(jnp.int32(0), explore.replace(key=k))[1]) for k in jax.random.split(jax.random.key(2), 20)}
    assert len(actions) > 5  # uniformly random actions


def test_repeated_updates_on_one_batch_reduce_its_td_loss(trained):
    plain, state, _ = trained
    run = one_run(state)
    run = run.replace(hparams={**run.hparams, "lr": jnp.float32(1e-5)})  # small steps: RMSProp's first ones are large
    learn, key, losses = jax.jit(plain.learn), jax.random.key(5), []
    for _ in range(5):
        params, opt_state, loss = learn(run, key)  # the same key: the same windows
        run = run.replace(params=params, opt_state=opt_state)
        losses.append(float(loss))
    assert np.all(np.diff(losses) < 0), losses
