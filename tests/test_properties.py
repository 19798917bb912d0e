"""Properties of the algorithms that a one-line slip breaks while every learning result still looks plausible.

Each test checks one property directly, by a hand-computed value, a counted schedule or a round trip, never by a
learning threshold: the TD loss's action, where the target values come from, the share of exploratory actions,
the Atari pool's settings, the frames RND reads, BSP's head per episode, the sweep's labels, the frame segments of
several rings, a resumed pool's seeds, the tabular log term and the plain benchmark baseline.
"""

import dataclasses
import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.agent.trainer import action_values, choose_actions, env_step, td_loss_per_head
from opiq_jax.common.config import stack_hparams
from opiq_jax.contracts.compact import Transition
from opiq_jax.primitives import frame_replay
from opiq_jax.registry.environments import ENVIRONMENTS, environment_spec, register_environment, static_for_env
from opiq_jax.registry.methods import method_hparams, program_parts
from opiq_jax.host.host_loop import start_pool
from opiq_jax.host.plan import plan_experiment, setting_label
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import Experiment, RunSpec, run_keys_for
from opiq_jax.store import frames as frame_store
from tests.fake_pool import FakePool
from tests.training import batch_of, compiled_targets

CHAIN = dict(chain_length=6, total_steps=100, log_every=100, buffer_size=100, hidden=(8,), n_step=3,
             count_features="exact")


def one_run(method="opiq", runs=1, **overrides):
    """``(trainer, initial state, first run)`` of ``method`` on a short chain."""
    static = static_for_env("chain", **{**CHAIN, "parts": program_parts([method]), **overrides})
    trainer, init, _ = compiled_trainer(static)
    specs = tuple(RunSpec(method, "x", s, method_hparams("chain", method)) for s in range(runs))
    experiment = Experiment(static, specs)
    state = init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    return trainer, state, jax.tree.map(lambda x: x[0], state.runs)


WINDOWS = Transition(  # two 3-step windows whose actions differ along the window
    compact=jnp.array([[[1], [2], [3]], [[4], [3], [2]]], jnp.int32),
    action=jnp.array([[1, 0, 0], [0, 1, 1]], jnp.int32),
    reward=jnp.zeros((2, 3)), terminated=jnp.zeros((2, 3), bool), done=jnp.zeros((2, 3), bool),
    next_compact=jnp.array([[[2], [3], [4]], [[3], [2], [1]]], jnp.int32),
)


def test_the_td_loss_regresses_q_at_the_first_action_of_the_window():
    trainer, _, run = one_run()
    agent = trainer.agent
    targets = jnp.array([[0.7], [-0.4]])
    loss = jax.jit(lambda r, w, t: td_loss_per_head(
        agent.forward_params(r), agent, r, batch_of(trainer, r, w, jnp.ones((2, 3), bool)), t))(run, WINDOWS, targets)
    env = trainer.stepping.env
    obs = jax.vmap(env.obs_from_compact, in_axes=(0, None))(WINDOWS.compact[:, 0], run.env.params)
    q = np.asarray(jax.jit(trainer.network.apply)(agent.forward_params(run), obs))
    expected = ((q[0, 1] - 0.7) ** 2 + (q[1, 0] + 0.4) ** 2) / 2  # Q(s_t, a_t) of each window's first step
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert q[0, 1] != pytest.approx(q[0, 0]) and q[1, 0] != pytest.approx(q[1, 1])  # another action would differ


def shifted(params, by):
    return jax.tree.map(lambda x: x + by, params)


def test_the_targets_read_the_target_network_never_the_online_one():
    """Online and target networks made to differ: moving the online weights leaves the targets alone, moving the
    target weights moves them."""
    trainer, _, run = one_run("dqn")
    targets = compiled_targets(trainer)
    exists = jnp.ones((2, 3), bool)
    base, _ = targets(run, WINDOWS, exists)
    online = trainer.agent.weights.master(run)
    online_moved, _ = targets(trainer.agent.weights.initial(run, shifted(online, 0.3), run.key), WINDOWS, exists)
    target_moved, _ = targets(run.replace(target_params=shifted(run.target_params, 0.3)), WINDOWS, exists)
    np.testing.assert_array_equal(np.asarray(online_moved), np.asarray(base))
    assert np.all(np.abs(np.asarray(target_moved) - np.asarray(base)) > 1e-3)


EPSILON_SCHEDULE = ((0, 1.0), (250, 0.75), (500, 0.5), (1000, 0.0), (3000, 0.0))  # (step, epsilon) by hand


def test_the_share_of_exploratory_actions_follows_the_epsilon_schedule():
    """Counted in the actions themselves: with two actions, a uniformly random one differs from the greedy one half
    of the time, so a share epsilon / 2 of the actions is not greedy at every step of the schedule (one compiled
    choice, called at each step: the step is an argument of the program)."""
    trainer, _, run = one_run("dqn")
    run = run.replace(hparams={**run.hparams, "epsilon_start": jnp.float32(1.0), "epsilon_end": jnp.float32(0.0),
                               "epsilon_decay_steps": jnp.float32(1000.0)})
    agent = trainer.agent
    def values(r):
        columns = jax.vmap(functools.partial(agent.count_columns, r))(agent.stepping.count_keys(r.env))
        return action_values(agent, r, agent.stepping.observations(r.env), columns)

    greedy = int(jnp.argmax(jax.jit(values)(run)[0]))
    draws = 4000
    runs = jax.vmap(lambda k: run.replace(key=k))(jax.random.split(jax.random.key(7), draws))
    choose = jax.jit(jax.vmap(functools.partial(choose_actions, agent), in_axes=(0, None)))
    shares = {}
    for step, _ in EPSILON_SCHEDULE:
        _, decision = choose(runs, jnp.int32(step))
        shares[step] = float(np.mean(np.asarray(decision.actions)[:, 0] != greedy))
    assert shares == pytest.approx({step: epsilon / 2 for step, epsilon in EPSILON_SCHEDULE}, abs=0.03)


PAPER_ATARI = {  # Machado et al. (2018), as the paper runs Montezuma: a written copy, not the module's table
    "repeat_action_probability": 0.25, "frame_skip": 4, "img_height": 84, "img_width": 84, "gray_scale": True,
    "stack_num": 4, "episodic_life": False, "full_action_space": True, "max_episode_steps": 4500,
    "noop_max": 1, "reward_clip": False, "use_fire_reset": False,
}


@pytest.mark.parametrize("env", ["montezuma", "atari:Venture"])
def test_atari_pools_are_built_with_sticky_actions_and_the_papers_settings(env):
    """The options of the EnvPool pool the trainer builds, read back from EnvPool itself."""
    pytest.importorskip("envpool")
    static = static_for_env(env, envs_per_run=2)
    pool = environment_spec(env).make(static, 2, 0)
    config = pool.env.config
    assert {k: config[k] for k in PAPER_ATARI} == PAPER_ATARI


def hand_ring(capacity=8, written=11, frame=(2, 3)):
    """A frame ring after ``written`` frames, frame ``i`` filled with ``i + 1`` (the ring wrapped once)."""
    buffer = frame_replay.init(capacity, frame)
    frames = jnp.zeros((capacity, *frame), jnp.uint8)
    for i in range(written):
        frames = frames.at[i % capacity].set(i + 1)
    return buffer.replace(frames=frames, position=jnp.int32(written % capacity), size=jnp.int32(min(written, capacity)))


def test_rnds_recent_states_are_the_newest_frames_newest_first():
    ring = hand_ring()
    frames, stored = frame_replay.newest_frames(ring, 5)
    np.testing.assert_array_equal(np.asarray(frames)[:, 0, 0], [11, 10, 9, 8, 7])
    assert np.asarray(stored).all()
    young = hand_ring(written=3)
    frames, stored = frame_replay.newest_frames(young, 5)
    np.testing.assert_array_equal(np.asarray(frames)[:3, 0, 0], [3, 2, 1])
    np.testing.assert_array_equal(np.asarray(stored), [True, True, True, False, False])


def test_rnds_reached_frames_are_the_frames_each_step_reached():
    """The frame after slot k's observation is the one written next: what the step from slot k reached."""
    ring = hand_ring()
    slots = jnp.array([3, 6], jnp.int32)
    reached = np.asarray(frame_replay.frames_after(ring, slots, 2))
    # slot 3 holds frame 12 - 8 = 4 (written 4th); the steps from it reached frames 5 and 6
    np.testing.assert_array_equal(reached[:, :, 0, 0], [[5, 6], [8, 9]])


def test_bsp_draws_its_acting_head_once_per_episode():
    """Stepped one environment step at a time: a run's head changes only where an episode ended (the chain's
    episodes all last ``chain_length + 9`` steps), and it does change over several episodes."""
    trainer, state, _ = one_run("bsp", runs=3, bsp_heads=10, total_steps=200, log_every=200, buffer_size=200)
    step = jax.jit(lambda s: env_step(trainer.agent, s, None)[0])
    horizon, heads = CHAIN["chain_length"] + 9, [np.asarray(state.runs.active_head)]
    for _ in range(6 * horizon):
        state = step(state)
        heads.append(np.asarray(state.runs.active_head))
    heads = np.stack(heads)  # [steps + 1, runs, envs]
    changed = np.flatnonzero((heads[1:] != heads[:-1]).any(axis=(1, 2))) + 1
    assert changed.size >= 3 and np.all(changed % horizon == 0), changed


def test_setting_labels_tell_apart_values_beyond_two_significant_digits():
    assert setting_label({"m": 0.125}) != setting_label({"m": 0.12})
    assert setting_label({"beta": 0.1234567}) != setting_label({"beta": 0.1234568})
    labels = {r.setting for r in plan_experiment("chain", ["opiq"], 1, grid={"m": [0.12, 0.125, 0.1251]}).runs}
    assert len(labels) == 3


def test_a_segment_of_several_rings_reads_each_ring_back_at_its_own_offset(tmp_path):
    rng = np.random.default_rng(0)
    rings = rng.integers(0, 255, (3, 8, 2, 2), dtype=np.uint8)  # three rings (several environments per run)
    starts, counts = np.array([1, 6, 0]), np.array([3, 4, 2])
    data = b"".join(frame_store.segment_chunks(jnp.asarray(rings), starts, counts, threads=2))
    path = tmp_path / "seg.bin"
    path.write_bytes(data)
    segment = frame_store.Segment("seg.bin", starts.tolist(), counts.tolist(), data[-32:].hex())
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    back = frame_store.read_segment(path, segment, (2, 2), np.dtype(np.uint8))
    for ring, (start, count) in enumerate(zip(starts, counts)):
        np.testing.assert_array_equal(back[ring], rings[ring, frame_store.slots(start, count, 8)])


def test_a_resumed_pool_is_not_seeded_as_at_step_zero():
    seeds = []

    def make(static, num_envs, seed, **kw):
        seeds.append(seed)
        return FakePool(num_envs, seed, 20, **kw)

    register_environment(dataclasses.replace(environment_spec("atari:FakeGame"), name="fake_seeded", make=make))
    try:
        static = static_for_env("fake_seeded", envs_per_run=2, total_steps=80, log_every=40, buffer_size=64,
                                batch_size=8)
        experiment = Experiment(static, (RunSpec("dqn", "paper", 0, method_hparams("fake_seeded", "dqn")),), seed=5)
        for resumed_at in (0, 0, 40, 80):
            start_pool(experiment, resumed_at)
    finally:
        ENVIRONMENTS.pop("fake_seeded")
    assert seeds[0] == seeds[1] == 5  # a fresh start is reproducible
    assert len(set(seeds[1:])) == 3  # each resume point draws other episodes than the start and than each other


def test_the_tabular_log_term_counts_steps_not_episodes():
    from experiments.paper import tabular as T

    P = np.zeros((3, 2, 2, 2), np.float32)
    P[..., 0] = 1.0
    mdp = T.make_mdp(P, np.zeros((3, 2, 2), np.float32))
    hp = T.Hyperparams.create(M=2.0, p=0.1, bonus_scale=2.0)
    for algorithm in ("opiq", "ucb_h"):
        consts = T.run_constants(T.TabularConfig(num_episodes=50, algorithm=algorithm), mdp, hp)
        H, S, A, K = 3, 2, 2, 50
        expected = 2.0 * np.sqrt(H**3 * np.log(S * A * (K * H) / 0.1))  # T = K H steps
        assert float(consts.bonus_coefficient) == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------------------------ the plain baseline


@pytest.fixture(scope="module")
def plain_run():
    from opiq_jax.benchmark.plain import make_plain

    static = static_for_env("chain", chain_length=6, total_steps=64, log_every=64, buffer_size=64, hidden=(8,),
                            batch_size=4, target_update=10, train_every=2, count_features="exact")
    plain = make_plain(static)
    experiment = Experiment(static, (RunSpec("opiq", "paper", 0, method_hparams("chain", "opiq")),))
    state = plain.init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))
    return plain, jax.tree.map(lambda x: x[0], state)


def test_the_plain_baseline_acts_on_c_action_not_c_bootstrap(plain_run):
    """No exploration; in the start cell action 0 is unvisited and action 1 visited 3 times. C_action = 100 makes
    action 0 the greedy one; C_bootstrap = -100 (were it read instead) would make it action 1."""
    plain, run = plain_run
    cell = int(plain.env.cell_id(plain.env.compact_state(run.env_state)))
    run = run.replace(counts=run.counts.at[cell, 1].set(3), hparams={
        **run.hparams, "c_action": jnp.float32(100.0), "c_bootstrap": jnp.float32(-100.0),
        "epsilon_start": jnp.float32(0.0), "epsilon_end": jnp.float32(0.0)})
    after = jax.jit(plain.run_step)(run)
    assert int(after.replay.action[0]) == 0


def test_the_plain_baselines_target_is_copied_every_target_update_environment_steps(plain_run):
    plain, run = plain_run
    step = jax.jit(plain.run_step)
    copies = []
    for _ in range(40):
        before = run.target_params
        run = step(run)
        same_as_online = all(jax.tree.leaves(jax.tree.map(np.array_equal, run.target_params, run.params)))
        unchanged = all(jax.tree.leaves(jax.tree.map(np.array_equal, run.target_params, before)))
        if not unchanged or int(run.step) % 10 == 0:
            assert same_as_online, int(run.step)
            copies.append(int(run.step))
    assert copies == [10, 20, 30, 40]  # and never in between (training began at step 5, every 2 steps)
