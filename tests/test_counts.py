"""The hashed visit counts: exact on the chain and the maze, never under-counting, and the
Montezuma feature on frames with known answers."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from opiq_jax.envs import Maze, RandomisedChain, load_maze_grid
from opiq_jax.primitives import counts

STEPS = 20_000


def random_walk_codes(env, key, steps):
    """Compact states, actions and SimHash codes of a uniform random walk (auto-reset included)."""
    k_params, k_hash, k_reset, k_walk = jax.random.split(key, 4)
    params = env.sample_params(k_params)
    obs_dim = int(np.prod(env.observation_space(params).shape))
    bits = 32 if isinstance(env, RandomisedChain) else 128
    matrix = counts.simhash_matrix(k_hash, bits, obs_dim)
    _, state = env.reset(k_reset, params)

    def body(state, k):
        k_act, k_step = jax.random.split(k)
        action = jax.random.randint(k_act, (), 0, env.num_actions)
        compact = env.compact_state(state)
        code = counts.simhash_code(matrix, env.obs_from_compact(compact, params))
        _, state, *_ = env.step(k_step, state, action, params)
        return state, (compact, action, code)

    _, (compact, actions, codes) = jax.lax.scan(body, state, jax.random.split(k_walk, steps))
    return compact, actions, codes


@jax.jit
def sketch_counts(codes, actions):
    """Feeds the walk through the sketch; returns N(s_t, a_t) and N(s_t, .) read at the end."""
    columns = jax.vmap(lambda c: counts.sketch_columns(c, counts.DEFAULT_ROWS, counts.DEFAULT_WIDTH))(codes)
    sketch = counts.init_sketch(4, counts.DEFAULT_ROWS, counts.DEFAULT_WIDTH)
    sketch = jax.lax.fori_loop(0, codes.shape[0], lambda i, s: counts.update(s, columns[i], actions[i]), sketch)
    pair = jax.vmap(lambda c, a: counts.query(sketch, c, a))(columns, actions)
    per_action = jax.vmap(lambda c: counts.query_all_actions(sketch, c))(columns)
    return pair, per_action


@pytest.fixture(scope="module", params=["chain", "maze"])
def walk(request):
    env = RandomisedChain() if request.param == "chain" else Maze()
    compact, actions, codes = random_walk_codes(env, jax.random.key(3), STEPS)
    pair, per_action = sketch_counts(codes, actions)
    return (request.param, np.asarray(compact), np.asarray(actions), np.asarray(codes), np.asarray(pair),
            np.asarray(per_action))


def test_sketch_equals_exact_dictionary_counts(walk):
    name, _, actions, codes, pair, per_action = walk
    exact = Counter((tuple(c), int(a)) for c, a in zip(codes, actions))
    expected = np.array([exact[(tuple(c), int(a))] for c, a in zip(codes, actions)])
    over = pair - expected
    assert np.all(over >= 0), "a count-min sketch must never under-count"
    collision_rate = float(np.mean(over > 0))
    # With the default width these state spaces (<= 340 codes per action) collide essentially never.
    assert collision_rate == 0.0, f"{name}: {collision_rate:.4%} of queries over-counted"
    for a in range(per_action.shape[1]):
        exact_a = np.array([exact[(tuple(c), a)] for c in codes])
        np.testing.assert_array_equal(per_action[:, a], exact_a)


def test_walk_covers_many_states(walk):
    name, compact, *_ = walk
    distinct = len({tuple(c) for c in compact})
    assert distinct >= (25 if name == "chain" else 50), f"{name} walk saw only {distinct} states"


@pytest.mark.parametrize("name", ["chain", "maze"])
def test_every_state_counted_exactly(name):
    """Every state of the environment (not only those a random walk reaches) with random visit
    numbers per action: the sketch at its default width returns the exact counts (collision rate 0)."""
    env = RandomisedChain() if name == "chain" else Maze()
    params = env.default_params
    if name == "chain":
        compact = np.arange(100)[:, None]
    else:
        compact = np.argwhere(load_maze_grid() != 1)
    compact = jnp.asarray(compact, jnp.int32)
    bits = 32 if name == "chain" else 128
    matrix = counts.simhash_matrix(jax.random.key(9), bits, int(np.prod(env.observation_space(params).shape)))
    codes = np.asarray(jax.vmap(lambda c: counts.simhash_code(matrix, env.obs_from_compact(c, params)))(compact))
    rng = np.random.default_rng(2)
    visits = rng.integers(0, 5, size=(len(codes), env.num_actions))
    seq_codes = np.repeat(np.repeat(codes, env.num_actions, axis=0), visits.reshape(-1), axis=0)
    seq_actions = np.repeat(np.tile(np.arange(env.num_actions), len(codes)), visits.reshape(-1))
    _, per_action = sketch_counts(jnp.asarray(seq_codes), jnp.asarray(seq_actions, jnp.int32))
    exact = Counter((tuple(c), int(a)) for c, a in zip(seq_codes, seq_actions))
    expected = np.array([[exact[(tuple(c), a)] for a in range(env.num_actions)] for c in seq_codes])
    np.testing.assert_array_equal(np.asarray(per_action)[:, : env.num_actions], expected)


def test_sketch_overcounts_but_never_undercounts_when_tiny():
    """A deliberately tiny sketch collides, and still never under-counts."""
    rng = np.random.default_rng(0)
    codes = jnp.asarray(rng.integers(0, 2**31, size=(3000, 1)), jnp.uint32)
    actions = jnp.asarray(rng.integers(0, 2, size=3000), jnp.int32)

    @jax.jit
    def run(codes, actions):
        cols = jax.vmap(lambda c: counts.sketch_columns(c, 2, 64))(codes)
        sketch = jax.lax.fori_loop(0, 3000, lambda i, s: counts.update(s, cols[i], actions[i]),
                                   counts.init_sketch(2, 2, 64))
        return jax.vmap(lambda c, a: counts.query(sketch, c, a))(cols, actions)

    got = np.asarray(run(codes, actions))
    exact = Counter((int(c[0]), int(a)) for c, a in zip(np.asarray(codes), np.asarray(actions)))
    expected = np.array([exact[(int(c[0]), int(a))] for c, a in zip(np.asarray(codes), np.asarray(actions))])
    assert np.all(got >= expected)
    assert np.any(got > expected)


def test_update_respects_valid_flag_and_action():
    sketch = counts.init_sketch(3, 4, 128)
    cols = counts.sketch_columns(jnp.array([7], jnp.uint32), 4, 128)
    sketch = counts.update(sketch, cols, 1)
    sketch = counts.update(sketch, cols, 1, valid=False)
    np.testing.assert_array_equal(counts.query_all_actions(sketch, cols), [0, 1, 0])


def test_simhash_bits_are_signs_of_projection():
    matrix = jnp.array([[1.0, -1.0], [-2.0, 0.5], [0.0, 1.0]])
    bits = counts.simhash_bits(matrix, jnp.array([1.0, 3.0]))
    np.testing.assert_array_equal(bits, [False, False, True])  # 1-3 < 0, -2+1.5 < 0, 3 > 0
    np.testing.assert_array_equal(counts.pack_bits(bits), [0b100])


def test_pack_bits_spans_words():
    bits = jnp.zeros(40, bool).at[0].set(True).at[33].set(True)
    np.testing.assert_array_equal(counts.pack_bits(bits), [1, 2])


def test_simhash_matrices_differ_per_key():
    a = counts.simhash_matrix(jax.random.key(0), 8, 5)
    b = counts.simhash_matrix(jax.random.key(1), 8, 5)
    assert a.shape == (8, 5) and not np.allclose(a, b)


def test_simhash_separates_all_maze_cells_with_128_bits():
    """The paper's k = 128 gives (almost) one code per maze cell; this is feature aliasing, not sketch collision."""
    env = Maze()
    params = env.default_params
    open_cells = np.argwhere(load_maze_grid() != 1)
    matrix = counts.simhash_matrix(jax.random.key(5), 128, 576)
    obs = jax.vmap(lambda rc: env.obs_from_compact(rc, params))(jnp.asarray(open_cells, jnp.int32))
    codes = np.asarray(jax.vmap(lambda o: counts.simhash_code(matrix, o))(obs))
    assert len({tuple(c) for c in codes}) >= 335


# ---------------------------------------------------------------------------------- Montezuma


def test_montezuma_feature_of_constant_frames():
    for value, level in [(0, 0), (31, 0), (32, 1), (64, 2), (200, 6), (255, 7)]:
        frame = jnp.full((84, 84), value, jnp.uint8)
        feature = counts.montezuma_feature(frame)
        assert feature.shape == (8, 11)
        np.testing.assert_array_equal(feature, np.full((8, 11), level))


def test_montezuma_feature_of_block_frame_matches_area_average():
    """A bright block covering whole output cells maps to level 7 there and 0 elsewhere; a cell the
    block half covers gets the area average."""
    frame = np.zeros((84, 84), np.uint8)
    frame[:21, :] = 255  # rows 0..20: output rows 0 and 1 fully (84 / 8 = 10.5 rows each)
    feature = np.asarray(counts.montezuma_feature(jnp.asarray(frame)))
    np.testing.assert_array_equal(feature[:2], 7)
    np.testing.assert_array_equal(feature[2:], 0)
    frame = np.zeros((84, 84), np.uint8)
    frame[:, :4] = 255  # 4 of the first output column's 84 / 11 = 7.64 pixel columns
    feature = np.asarray(counts.montezuma_feature(jnp.asarray(frame)))
    np.testing.assert_array_equal(feature[:, 0], int(255 * 4 / (84 / 11) / 32))
    np.testing.assert_array_equal(feature[:, 1:], 0)


def test_montezuma_feature_matches_numpy_area_resize():
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (84, 84)).astype(np.uint8)
    rows = np.repeat(np.arange(8), 21)[:, None]  # 84 * 2 = 168 half-rows: 21 per output row
    cols = np.repeat(np.arange(11), 84)[:, None]  # 84 * 11 = 924 sub-columns: 84 per output column
    upsampled = frame.astype(np.float64).repeat(2, axis=0).repeat(11, axis=1)  # [168, 924]
    expected = np.zeros((8, 11))
    for r in range(8):
        for c in range(11):
            expected[r, c] = upsampled[(rows[:, 0] == r)][:, (cols[:, 0] == c)].mean()
    np.testing.assert_array_equal(counts.montezuma_feature(jnp.asarray(frame)),
                                  np.floor(expected / 32 + 1e-4).astype(int))


def test_montezuma_code_distinguishes_frames():
    a = counts.montezuma_code(jnp.zeros((84, 84), jnp.uint8))
    b = counts.montezuma_code(jnp.full((84, 84), 255, jnp.uint8))
    assert a.shape == (9,) and not np.array_equal(a, b)
