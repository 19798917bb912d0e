"""Montezuma's Revenge: the frame replay (always) and the EnvPool adapter (when EnvPool is installed).

The frame-replay tests build small hand-made episodes whose frames encode the global step that
produced them, and compare everything the ring returns with a plain-Python reference of the same
stream. The EnvPool tests step a tiny pool (``max_episode_steps=30`` to force truncations) through
the XLA interface inside ``jax.jit``/``lax.scan`` and through EnvPool's Python API from the same
seed and actions.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.primitives import frame_replay

FRAME_SHAPE = (4, 5)
STACK = 4
# Few distinct shapes keep the number of compilations (most of this file's runtime) small.
BIG = 64  # a ring that does not wrap
SMALL = 16  # a ring that wraps
BATCH = 1024
N_STEP = 3


# ----------------------------------------------------------------------------------------------
# A plain-Python stream of steps, as the trainer would add them, and its reference answers.
# ----------------------------------------------------------------------------------------------


def make_stream(episodes, seed=0):
    """Steps of consecutive episodes. ``episodes``: list of (num_transitions, end) with end in
    {"terminated", "truncated", None} (None: the episode is still running at the end).

    Returns a list of dicts, one per stored step, with the fields ``add`` takes plus ``episode``.
    Frame values encode the global step (so a frame identifies its step).
    """
    rng = np.random.default_rng(seed)
    steps = []
    for e, (length, end) in enumerate(episodes):
        steps.append(dict(action=0, reward=0.0, terminated=False, truncated=False, first=True, episode=e))
        for i in range(length):
            last = i == length - 1
            steps.append(
                dict(
                    action=int(rng.integers(0, 18)),
                    reward=float(rng.choice([-1.0, 0.0, 0.5, 1.0])),
                    terminated=last and end == "terminated",
                    truncated=last and end == "truncated",
                    first=False,
                    episode=e,
                )
            )
    for g, s in enumerate(steps):
        s["frame"] = np.full(FRAME_SHAPE, g % 251 + 1, np.uint8)
        s["frame"][0, 0] = g // 251  # keep frames distinct beyond 251 steps
    return steps


def reference_stack(steps, g, stack=STACK):
    """EnvPool's stack at step g: the last ``stack`` frames, the episode's first frame repeated
    in place of frames from before the episode."""
    start = g
    while not steps[start]["first"]:
        start -= 1
    return np.stack([steps[max(g - d, start)]["frame"] for d in range(stack - 1, -1, -1)])


def reference_returns(steps, gamma):
    """mc_return of every step once its episode has ended (0 for unfinished episodes)."""
    out = np.zeros(len(steps), np.float64)
    g = len(steps) - 1
    while g >= 0:
        if steps[g]["terminated"] or steps[g]["truncated"]:
            G = 0.0
            k = g
            while not steps[k]["first"]:
                G = steps[k]["reward"] + gamma * G
                out[k] = G
                k -= 1
            g = k - 1
        else:
            g -= 1
    return out


_add = jax.jit(frame_replay.add)
_fill = jax.jit(frame_replay.fill_episode_returns, static_argnums=2)
_sample = jax.jit(frame_replay.sample, static_argnums=(2, 3))
_stack_at = jax.jit(frame_replay.stack_at)


def sample_np(buffer, seed, batch_size=BATCH, n_step=N_STEP):
    """A jitted sample, as numpy arrays (indexing numpy rows is cheap in the checks below)."""
    return jax.tree.map(np.asarray, _sample(buffer, jax.random.key(seed), batch_size, n_step))


def fill_buffer(steps, capacity, gamma=0.9, max_episode_steps=100):
    buffer = frame_replay.init(capacity, FRAME_SHAPE)
    for s in steps:
        buffer = _add(buffer, s["frame"], s["action"], s["reward"], s["terminated"], s["truncated"], s["first"])
        if s["terminated"] or s["truncated"]:
            buffer = _fill(buffer, gamma, max_episode_steps)
    return buffer


def slot_to_step(buffer, num_steps):
    """Global step index stored in every slot (-1 where empty)."""
    capacity = buffer.capacity
    out = np.full(capacity, -1)
    for g in range(max(0, num_steps - capacity), num_steps):
        out[g % capacity] = g
    return out


def reference_window(steps, g, n):
    """Reference n-step window starting at state g: (actions, rewards, terminated, included, L)."""
    actions, rewards, terms, included = [], [], [], []
    alive = True
    for i in range(n):
        k = g + 1 + i
        ok = alive and k < len(steps) and not steps[k]["first"]
        included.append(ok)
        if k < len(steps):
            actions.append(steps[k]["action"])
            rewards.append(steps[k]["reward"] if ok else 0.0)
            terms.append(steps[k]["terminated"] and ok)
            if ok and (steps[k]["terminated"] or steps[k]["truncated"]):
                alive = False
        else:
            actions.append(None)
            rewards.append(0.0)
            terms.append(False)
        alive = alive and ok
    return actions, rewards, terms, included, sum(included)


def valid_starts(steps, stored):
    """Global steps g that are valid start states among the stored step indices."""
    stored = sorted(stored)
    oldest = stored[0]
    out = []
    for g in stored[:-1]:
        if steps[g + 1]["first"] or steps[g]["terminated"] or steps[g]["truncated"]:
            continue
        start = g
        while not steps[start]["first"] and start > g - (STACK - 1):
            start -= 1
        if max(g - (STACK - 1), start) < oldest:  # stack needs an overwritten frame
            continue
        out.append(g)
    return out


EPISODES = [(3, "truncated"), (1, "terminated"), (6, "truncated"), (2, "terminated"), (4, None)]


# ----------------------------------------------------------------------------------------------
# Frame replay (no EnvPool needed)
# ----------------------------------------------------------------------------------------------


def test_stack_rebuild_never_crosses_episodes():
    steps = make_stream(EPISODES)
    buffer = fill_buffer(steps, capacity=BIG)
    slots = jnp.arange(len(steps))
    stacks, complete = _stack_at(buffer, slots)
    assert bool(complete.all())
    for g in range(len(steps)):
        np.testing.assert_array_equal(np.asarray(stacks[g]), reference_stack(steps, g), err_msg=f"step {g}")
        # no frame from an earlier episode
        ep_frames = {int(s["frame"][1, 1]) for s in steps if s["episode"] == steps[g]["episode"]}
        assert {int(v) for v in np.asarray(stacks[g])[:, 1, 1]} <= ep_frames


def test_stack_rebuild_with_wraparound():
    steps = make_stream(EPISODES * 3, seed=1)  # 63 steps into 16 slots
    capacity = SMALL
    buffer = fill_buffer(steps, capacity)
    s2g = slot_to_step(buffer, len(steps))
    stacks, complete = _stack_at(buffer, jnp.arange(capacity))
    oldest = len(steps) - capacity
    for slot, g in enumerate(s2g):
        start = g
        while not steps[start]["first"]:
            start -= 1
        needs_overwritten = max(g - (STACK - 1), start) < oldest
        assert bool(complete[slot]) == (not needs_overwritten)
        if not needs_overwritten:
            np.testing.assert_array_equal(np.asarray(stacks[slot]), reference_stack(steps, g))


@pytest.mark.parametrize("capacity", [BIG, SMALL])
def test_sample_matches_reference(capacity):
    steps = make_stream(EPISODES * 3, seed=2)
    gamma = 0.9
    buffer = fill_buffer(steps, capacity, gamma=gamma)
    n = N_STEP
    batch = sample_np(buffer, 0)
    s2g = slot_to_step(buffer, len(steps))
    returns = reference_returns(steps, gamma)
    assert bool(batch.valid.all())
    allowed = set(valid_starts(steps, [g for g in s2g if g >= 0]))
    for b in range(256):
        g = int(s2g[int(batch.slots[b])])
        assert g in allowed
        np.testing.assert_array_equal(batch.obs[b], reference_stack(steps, g))
        actions, rewards, terms, included, L = reference_window(steps, g, n)
        np.testing.assert_array_equal(batch.included[b], included)
        assert included[0]
        np.testing.assert_allclose(batch.rewards[b], rewards)
        np.testing.assert_array_equal(batch.terminated[b], terms)
        for i in range(L):
            assert int(batch.actions[b, i]) == actions[i]
            np.testing.assert_array_equal(batch.count_frames[b, i], steps[g + i]["frame"])
        np.testing.assert_array_equal(batch.next_obs[b], reference_stack(steps, g + L))
        assert steps[g + L]["episode"] == steps[g]["episode"]
        np.testing.assert_allclose(float(batch.mc_return[b]), returns[g + 1], rtol=1e-5, atol=1e-6)


def test_first_slots_never_sampled_and_starts_uniform():
    steps = make_stream([(2, "truncated"), (1, "terminated"), (3, "truncated"), (2, None)], seed=3)
    buffer = fill_buffer(steps, capacity=BIG)
    batch = sample_np(buffer, 1)
    assert bool(batch.valid.all())
    starts = batch.slots
    allowed = valid_starts(steps, list(range(len(steps))))
    # the transition of a start slot leads to slot + 1, which must not be an episode's first
    assert not any(steps[g + 1]["first"] for g in starts)
    counts = np.bincount(starts, minlength=len(steps))
    assert set(np.nonzero(counts)[0]) == set(allowed)
    expected = BATCH / len(allowed)
    assert np.all(np.abs(counts[allowed] - expected) < 5 * np.sqrt(expected))


def test_window_stops_at_done_and_masks_reset_step():
    # episode 0: 4 transitions ending in a truncation; slot 5 is EnvPool's reset step (first).
    steps = make_stream([(4, "truncated"), (4, None)], seed=4)
    buffer = fill_buffer(steps, capacity=SMALL)
    # Sample many rows and check the windows starting at steps 2 and 3.
    batch = sample_np(buffer, 2)
    starts = batch.slots
    for g, expected_included in [(2, [True, True, False]), (3, [True, False, False])]:
        rows = np.nonzero(starts == g)[0]
        assert rows.size > 0
        for b in rows:
            np.testing.assert_array_equal(batch.included[b], expected_included)
            L = sum(expected_included)
            # bootstrap state is the final observation of the truncated episode, not the reset frame
            np.testing.assert_array_equal(batch.next_obs[b], reference_stack(steps, 4))
            assert g + L == 4
            assert not bool(batch.terminated[b].any())
    assert not np.any(starts == 4)  # the final observation has no transition
    # Windows inside the unfinished episode stop at the newest slot (step 9).
    rows = np.nonzero(starts == 8)[0]
    assert rows.size > 0
    for b in rows:
        np.testing.assert_array_equal(batch.included[b], [True, False, False])


def test_terminal_in_window_sets_terminated():
    steps = make_stream([(3, "terminated"), (3, None)], seed=5)
    buffer = fill_buffer(steps, capacity=SMALL)
    batch = sample_np(buffer, 3)
    rows = np.nonzero(batch.slots == 1)[0]
    assert rows.size > 0
    for b in rows:
        np.testing.assert_array_equal(batch.included[b], [True, True, False])
        np.testing.assert_array_equal(batch.terminated[b], [False, True, False])


def test_window_stops_at_done_even_without_a_following_first_slot():
    """Defensive: a window stops after a terminated/truncated step by itself, not only because
    EnvPool's reset step (a ``first`` slot) follows it."""
    steps = make_stream([(2, "truncated"), (4, None)], seed=9)
    steps[3]["first"] = False  # as if the new episode's first observation were not flagged
    buffer = fill_buffer(steps, capacity=SMALL)
    batch = sample_np(buffer, 4)
    rows = np.nonzero(batch.slots == 1)[0]
    assert rows.size > 0
    for b in rows:
        np.testing.assert_array_equal(batch.included[b], [True, False, False])
    assert not np.any(batch.slots == 2)  # slot 2 ended its episode: no transition starts there


def test_empty_and_single_slot_buffers_give_invalid_rows():
    buffer = frame_replay.init(SMALL, FRAME_SHAPE)
    assert not sample_np(buffer, 0).valid.any()
    buffer = _add(buffer, np.ones(FRAME_SHAPE, np.uint8), 0, 0.0, False, False, True)
    assert not sample_np(buffer, 0).valid.any()
    buffer = _add(buffer, np.ones(FRAME_SHAPE, np.uint8), 3, 1.0, False, False, False)
    batch = sample_np(buffer, 0)
    assert bool(batch.valid.all())
    np.testing.assert_array_equal(batch.included, [[True, False, False]] * BATCH)


def test_fill_episode_returns_by_hand():
    gamma = 0.5
    buffer = frame_replay.init(SMALL, FRAME_SHAPE)
    frame = np.zeros(FRAME_SHAPE, np.uint8)
    # episode A: first, then rewards 1, 0, 2 (terminated); episode B: first, rewards 1, 1 (running)
    for r, term, first in [(0, False, True), (1, False, False), (0, False, False), (2, True, False)]:
        buffer = _add(buffer, frame, 0, r, term, False, first)
    buffer = _fill(buffer, gamma, 100)
    for r, first in [(0, True), (1, False), (1, False)]:
        buffer = _add(buffer, frame, 0, r, False, False, first)
    # G3 = 2, G2 = 0 + 0.5 * 2 = 1, G1 = 1 + 0.5 * 1 = 1.5
    np.testing.assert_allclose(np.asarray(buffer.mc_return[:7]), [0, 1.5, 1.0, 2.0, 0, 0, 0])


def test_fill_episode_returns_wraps_around_ring_end():
    gamma = 0.9
    capacity = SMALL
    buffer = frame_replay.init(capacity, FRAME_SHAPE)
    frame = np.zeros(FRAME_SHAPE, np.uint8)
    # 13 filler steps (an unfinished episode), then an episode of 6 transitions across the end.
    for i in range(capacity - 3):
        buffer = _add(buffer, frame, 0, 1.0, False, False, i == 0)
    rewards = [0.5, -1.0, 0.0, 1.0, 0.25, 1.0]
    buffer = _add(buffer, frame, 0, 0.0, False, False, True)  # slot 13
    for i, r in enumerate(rewards):  # slots 14, 15, 0, 1, 2, 3
        buffer = _add(buffer, frame, 0, r, False, i == len(rewards) - 1, False)
    buffer = _fill(buffer, gamma, 100)
    G, expected = 0.0, []
    for r in reversed(rewards):
        G = r + gamma * G
        expected.append(G)
    expected = expected[::-1]
    got = np.asarray(buffer.mc_return)[[14, 15, 0, 1, 2, 3]]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(buffer.mc_return)[4:14], 0.0)
    # a window shorter than the episode only fills its last max_episode_steps transitions
    short = _fill(buffer.replace(mc_return=jnp.zeros(capacity)), gamma, 4)
    G, tail = 0.0, []
    for r in reversed(rewards[-4:]):
        G = r + gamma * G
        tail.append(G)
    np.testing.assert_allclose(np.asarray(short.mc_return)[[0, 1, 2, 3]], tail[::-1], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(short.mc_return)[4:], 0.0)


def test_fill_episode_returns_long_episode_and_whole_stream():
    steps = make_stream([(40, "truncated"), (7, "terminated"), (55, "truncated"), (5, None)], seed=6)
    gamma = 0.99
    buffer = fill_buffer(steps, capacity=BIG, gamma=gamma)  # 115 steps: wraps
    s2g = slot_to_step(buffer, len(steps))
    ref = reference_returns(steps, gamma)
    np.testing.assert_allclose(np.asarray(buffer.mc_return), ref[s2g], rtol=1e-5, atol=1e-6)


def test_fill_and_sample_under_vmap_with_select():
    """Two runs: run 0 ends an episode on its last add, run 1 does not; select per run."""
    gamma = 0.9
    streams = [make_stream([(3, "truncated")], seed=7), make_stream([(3, None)], seed=8)]
    buffers = [fill_buffer(s[:-1], SMALL) for s in streams]
    buffers = [
        _add(b, s[-1]["frame"], s[-1]["action"], s[-1]["reward"], s[-1]["terminated"], s[-1]["truncated"], False)
        for b, s in zip(buffers, streams)
    ]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *buffers)
    ended = jnp.array([True, False])

    def with_where(buffer, ended):
        new = frame_replay.fill_episode_returns(buffer, gamma, 100)
        return jax.tree.map(lambda a, b: jnp.where(ended, a, b), new, buffer)

    def with_arg(buffer, ended):
        return frame_replay.fill_episode_returns(buffer, gamma, 100, ended=ended)

    both = jax.jit(jax.vmap(lambda b, e: (with_where(b, e), with_arg(b, e))))(stacked, ended)
    for out in both:
        ref0 = reference_returns(streams[0], gamma)
        np.testing.assert_allclose(np.asarray(out.mc_return[0, :4]), ref0, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(out.mc_return[1]), 0.0)
    batch = jax.jit(jax.vmap(lambda b, k: frame_replay.sample(b, k, 16, 3)))(stacked,
                                                                            jax.random.split(jax.random.key(0), 2))
    assert batch.obs.shape == (2, 16, STACK, *FRAME_SHAPE)
    assert bool(batch.valid.all())


# ----------------------------------------------------------------------------------------------
# The adapter's import and its one-line error (no EnvPool needed)
# ----------------------------------------------------------------------------------------------


def test_adapter_imports_and_missing_envpool_is_one_line(monkeypatch):
    from opiq_jax.envs import montezuma

    assert montezuma.PAPER_SETTINGS["noop_max"] == 1
    monkeypatch.setitem(sys.modules, "envpool", None)  # makes `import envpool` raise ImportError
    with pytest.raises(ImportError) as info:
        montezuma.MontezumaPool(2, seed=0)
    assert str(info.value) == "--env montezuma needs EnvPool: pip install -e '.[atari]'"
    assert "\n" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_pure_helpers():
    from opiq_jax.envs import montezuma

    ram = np.zeros((2, 128), np.uint8)
    ram[:, 3] = [1, 7]
    np.testing.assert_array_equal(montezuma.room_from_ram(ram), [1, 7])
    assert montezuma.room_from_ram(ram).dtype == jnp.int32
    np.testing.assert_array_equal(montezuma.is_reset_step(np.array([0, 1, 30])), [True, False, False])
    obs = np.arange(2 * 4 * 3 * 3, dtype=np.uint8).reshape(2, 4, 3, 3)
    np.testing.assert_array_equal(montezuma.newest_frame(obs), obs[:, 3])
    np.testing.assert_allclose(montezuma.clip_reward(np.array([-5.0, -0.5, 0.0, 100.0])), [-1, -0.5, 0, 1])


# ----------------------------------------------------------------------------------------------
# EnvPool (skipped cleanly when it is not installed)
# ----------------------------------------------------------------------------------------------

NUM_ENVS = 2
NUM_STEPS = 150
MAX_EPISODE_STEPS = 30
SEED = 7


@pytest.fixture(scope="module")
def rollouts():
    """The same seed and actions through the adapter (jit + scan) and EnvPool's Python API."""
    pytest.importorskip("envpool")
    from opiq_jax.envs.montezuma import MontezumaPool, make_envpool

    actions = np.random.default_rng(0).integers(0, 18, (NUM_STEPS, NUM_ENVS)).astype(np.int32)

    pool = MontezumaPool(NUM_ENVS, SEED, max_episode_steps=MAX_EPISODE_STEPS, num_threads=1)
    handle, first = pool.reset()

    @jax.jit
    def run(handle, actions):
        return jax.lax.scan(pool.step, handle, actions)

    handle, outs = run(handle, jnp.asarray(actions))
    # The handle keeps working after the scan (a second compiled chunk continues the episode).
    handle, more = run(handle, jnp.asarray(actions[:5]))

    env = make_envpool(NUM_ENVS, SEED, max_episode_steps=MAX_EPISODE_STEPS, num_threads=1)
    obs, info = env.reset()
    zeros = np.zeros(NUM_ENVS, bool)
    records = [(obs, np.zeros(NUM_ENVS, np.float32), zeros, zeros, info)]
    for t in range(NUM_STEPS + 5):
        records.append(env.step(actions[t % NUM_STEPS]))
    py = {
        "obs": np.stack([r[0] for r in records]),
        "reward": np.stack([r[1] for r in records]),
        "terminated": np.stack([r[2] for r in records]),
        "truncated": np.stack([r[3] for r in records]),
    }
    for key, name in [("elapsed", "elapsed_step"), ("ram", "ram"), ("lives", "lives"), ("env_id", "env_id"),
                      ("game_over", "terminated")]:
        py[key] = np.stack([r[4][name] for r in records])
    # adapter outputs with the reset prepended: index t = after t steps
    ad = jax.tree.map(lambda f, o, m: np.concatenate([np.asarray(f)[None], np.asarray(o), np.asarray(m)]),
                      first, outs, more)
    return pool, ad, py


def test_adapter_matches_python_api_inside_jit_scan(rollouts):
    pool, ad, py = rollouts
    assert pool.num_actions == 18 and pool.obs_shape == (4, 84, 84) and pool.num_envs == NUM_ENVS
    assert ad.obs.dtype == np.uint8 and ad.obs.shape == (NUM_STEPS + 6, NUM_ENVS, 4, 84, 84)
    np.testing.assert_array_equal(py["env_id"], np.broadcast_to(np.arange(NUM_ENVS), py["env_id"].shape))
    np.testing.assert_array_equal(ad.obs, py["obs"])
    np.testing.assert_array_equal(ad.reward, py["reward"].astype(np.float32))
    game_over = py["game_over"].astype(bool) & (py["elapsed"] != 0)
    np.testing.assert_array_equal(ad.terminated, py["terminated"] | game_over)
    np.testing.assert_array_equal(ad.truncated, py["truncated"] & ~game_over)
    np.testing.assert_array_equal(ad.first, py["elapsed"] == 0)
    np.testing.assert_array_equal(ad.lives, py["lives"])
    # episodes ended (by the tiny cap) several times in both environments
    assert ad.truncated.sum(0).min() >= 4


def test_reset_step_is_flagged_first_with_zero_reward(rollouts):
    _, ad, py = rollouts
    ended = ad.terminated | ad.truncated
    # the step after every episode end is EnvPool's reset step, and only those (and t = 0) are first
    expected_first = np.concatenate([np.ones((1, NUM_ENVS), bool), ended[:-1]])
    np.testing.assert_array_equal(ad.first, expected_first)
    assert np.all(ad.reward[ad.first] == 0.0)
    assert not np.any(ad.terminated[ad.first] | ad.truncated[ad.first])
    # truncation after exactly MAX_EPISODE_STEPS agent steps
    assert np.all(py["elapsed"][ad.truncated] == MAX_EPISODE_STEPS)
    # EnvPool repeats the first frame in every stack slot after a reset (no zero fill)
    first_obs = ad.obs[ad.first]
    assert np.all(first_obs == first_obs[:, -1:])
    assert first_obs.max() > 0


def test_ring_rebuilds_envpool_stacks_across_episodes(rollouts):
    from opiq_jax.envs.montezuma import clip_reward, newest_frame

    _, ad, _ = rollouts
    capacity = 64  # smaller than the stream: wraps around
    T = ad.obs.shape[0]

    @jax.jit
    def store(obs, reward, terminated, truncated, first):
        def body(buffer, x):
            o, r, te, tr, f = x
            buffer = frame_replay.add(buffer, newest_frame(o), 0, clip_reward(r), te, tr, f)
            rebuilt, complete = frame_replay.stack_at(buffer, (buffer.position - 1) % capacity)
            return buffer, (rebuilt, complete)

        return jax.lax.scan(body, frame_replay.init(capacity), (obs, reward, terminated, truncated, first))

    for e in range(NUM_ENVS):
        buffer, (rebuilt, complete) = store(ad.obs[:, e], ad.reward[:, e], ad.terminated[:, e], ad.truncated[:, e],
                                            ad.first[:, e])
        assert bool(complete.all())
        np.testing.assert_array_equal(np.asarray(rebuilt), ad.obs[:, e])  # every stored step
        # every complete slot of the final (wrapped) ring, and sampled windows
        stacks, ok = jax.tree.map(np.asarray, jax.jit(frame_replay.stack_at)(buffer, jnp.arange(capacity)))
        s2g = slot_to_step(buffer, T)
        assert ok.sum() >= capacity - (STACK - 1)
        for slot in range(capacity):
            if ok[slot]:
                np.testing.assert_array_equal(stacks[slot], ad.obs[s2g[slot], e])
        batch = sample_np(buffer, e, 64, 3)
        assert bool(batch.valid.all())
        for b in range(64):
            g = s2g[int(batch.slots[b])]
            L = int(batch.included[b].sum())
            np.testing.assert_array_equal(batch.obs[b], ad.obs[g, e])
            np.testing.assert_array_equal(batch.next_obs[b], ad.obs[g + L, e])
            assert not ad.first[g + 1 : g + L + 1, e].any()


def test_room_is_ram_byte_3_and_starts_at_1(rollouts):
    _, ad, py = rollouts
    np.testing.assert_array_equal(ad.room, py["ram"][..., 3].astype(np.int32))
    assert ad.room.dtype == np.int32
    assert np.all(ad.room[ad.first] == 1)
    assert np.all(ad.room[0] == 1)


# ------------------------------------------------------------------------------------ the Atari trainer


@pytest.fixture(scope="module", params=[1, 2], ids=["one-env-per-run", "two-envs-per-run"])
def atari_run(request, tmp_path_factory):
    """Two OPIQ runs of the one trainer on Montezuma, 80 environment steps per run in 30-step episodes,
    with one or two pool environments per run (EnvPool needed)."""
    pytest.importorskip("envpool")
    from opiq_jax.registry.environments import static_for_env
    from opiq_jax.registry.methods import method_hparams
    from opiq_jax.host.host_loop import run_experiment
    from opiq_jax.runs.results_folder import read_metrics
    from opiq_jax.runs.experiment import Experiment, RunSpec
    from opiq_jax.agent.trainer import make_train
    from opiq_jax.contracts.pool import PoolShapes

    envs = request.param
    static = static_for_env("montezuma", total_steps=80, log_every=40, buffer_size=200, sketch_width=1024,
                            envs_per_run=envs)
    runs = tuple(RunSpec("opiq", "paper", s, method_hparams("montezuma", "opiq")) for s in range(2))
    out = tmp_path_factory.mktemp("montezuma")
    experiment = Experiment(static, runs)
    state = run_experiment(experiment, out, progress=False, max_episode_steps=30)
    names = make_train(experiment.static, PoolShapes(max_episode_steps=30)).metric_names
    return envs, jax.device_get(state), read_metrics(out), names


def test_atari_trainer_counts_real_steps_and_stores_every_frame(atari_run):
    envs, state, rows, metrics = atari_run
    buffer = state.runs.memory  # [runs, envs, ...]: one ring per environment
    per_env = 80 // envs
    assert int(state.step) == per_env and buffer.size.shape == (2, envs) and np.all(buffer.size == per_env + 1)
    firsts = buffer.first[..., : per_env + 1].sum(axis=-1)  # [runs, envs]: the start plus every auto-reset
    resets = (firsts - 1).sum(axis=1)
    assert np.all(resets >= 2 // envs)
    # one sketch per run: each real step of any of its environments is counted once per row; resets are not
    counted = state.runs.counts.sketch.sum(axis=(1, 3))[:, 0]
    np.testing.assert_array_equal(counted, 80 - resets)
    assert {r["metric"] for r in rows} == set(metrics)
    assert {"train_return", "max_return", "rooms_visited", "q_start", "loss", "env_restarts"} <= set(metrics)
    episodes = sum(r["value"] for r in rows if r["metric"] == "episodes")
    assert episodes == resets.sum()
    assert all(r["value"] >= 1 for r in rows if r["metric"] == "rooms_visited")
    assert all(np.isfinite(r["value"]) for r in rows if r["metric"] in ("loss", "intrinsic_reward"))
    assert [r["step"] for r in rows if r["run"] == 0 and r["metric"] == "epsilon"] == [40, 80]


def test_atari_trainer_learns_and_keeps_returns_unclipped(atari_run):
    from opiq_jax.agent.weights import master_params
    from opiq_jax.registry.environments import static_for_env

    envs, state, rows, _ = atari_run
    assert np.all(np.isfinite(state.runs.stats.chunk.loss_sum))
    first = jax.tree.map(lambda x: x[0], master_params(static_for_env("montezuma"), state.runs))
    target = jax.tree.map(lambda x: x[0], state.runs.target_params)
    # trained since the copy
    assert any(np.any(a != b) for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(target)))
    assert np.all(np.abs(state.runs.memory.reward) <= 1.0)  # training rewards clipped


def test_cli_montezuma_without_envpool_stops_with_the_install_command(monkeypatch, capsys):
    from opiq_jax.cli import main

    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool now raises ImportError
    with pytest.raises(SystemExit) as stop:
        main(["train", "--env", "montezuma", "--steps", "100"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "opiq-jax: error: --env montezuma needs EnvPool: pip install -e '.[atari]'"
