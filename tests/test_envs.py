"""Tests for the pure-JAX chain and maze environments.

Every jitted function is compiled once per module (module-scoped fixtures);
the rollouts are batched so that one compiled scan serves most tests.
"""

from collections import deque
from importlib import resources

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from opiq_jax.envs import (
    ChainParams,
    ChainState,
    Maze,
    MazeParams,
    MazeState,
    RandomisedChain,
    load_maze_grid,
)
from opiq_jax.envs.maze import MAZE_GOAL, MAZE_START

CHAIN_STEPS = 400  # > 3 chain episodes of 109 steps
MAZE_STEPS = 600  # > 2 maze episodes of 250 steps
NUM_VMAP_ENVS = 1000

# (row, col) deltas of the base moves 0 left, 1 down, 2 right, 3 up.
NP_MOVES = [(0, -1), (1, 0), (0, 1), (-1, 0)]


# --------------------------------------------------------------------------
# Plain NumPy reference implementations (independent of the JAX code).
# --------------------------------------------------------------------------
class NpChain:
    """Reference chain: same rules, written with Python scalars."""

    def __init__(self, flips: np.ndarray, horizon: int):
        self.flips = np.asarray(flips)
        self.n = len(self.flips)
        self.horizon = horizon

    def obs(self, pos: int) -> np.ndarray:
        o = np.zeros(self.n, np.float32)
        o[: pos + 1] = 1.0
        return o

    def reset(self) -> np.ndarray:
        self.pos, self.t = 1, 0
        return self.obs(self.pos)

    def step(self, a: int):
        right = (int(a) + int(self.flips[self.pos])) % 2 == 1
        reward = 0.0
        if not right:
            if self.pos == 0:
                reward = 0.001
            self.pos = max(self.pos - 1, 0)
        else:
            if self.pos == self.n - 1:
                reward = 1.0
            self.pos = min(self.pos + 1, self.n - 1)
        self.t += 1
        terminated, truncated = False, self.t >= self.horizon
        compact, final_obs = np.array([self.pos]), self.obs(self.pos)
        obs = self.reset() if (terminated or truncated) else final_obs
        return obs, np.float32(reward), terminated, truncated, compact, final_obs


def np_maze_grid() -> np.ndarray:
    text = (resources.files("envs") / "data" / "maze_24x24.txt").read_text()
    return np.array([[int(ch) for ch in line] for line in text.split()])


class NpMaze:
    """Reference maze: same rules, written with Python scalars."""

    def __init__(self, action_map: np.ndarray, horizon: int = 250):
        raw = np_maze_grid()
        self.start = tuple(int(v) for v in np.argwhere(raw == 3)[0])
        self.goal = tuple(int(v) for v in np.argwhere(raw == 2)[0])
        self.grid = np.where(raw == 3, 0, raw)
        self.action_map = np.asarray(action_map)
        self.horizon = horizon

    def obs(self, cell) -> np.ndarray:
        g = self.grid.astype(np.float32)
        g[cell] = 3.0
        return (g / np.float32(3.0))[..., None]

    def reset(self) -> np.ndarray:
        self.cell, self.t = self.start, 0
        return self.obs(self.cell)

    def step(self, a: int):
        r, c = self.cell
        dr, dc = NP_MOVES[int(self.action_map[r, c, int(a)])]
        if self.grid[r + dr, c + dc] != 1:
            self.cell = (r + dr, c + dc)
        self.t += 1
        terminated = self.cell == self.goal
        truncated = self.t >= self.horizon
        reward = np.float32(10.0 if terminated else 0.0)
        compact, final_obs = np.array(self.cell), self.obs(self.cell)
        obs = self.reset() if (terminated or truncated) else final_obs
        return obs, reward, terminated, truncated, compact, final_obs


def np_rollout(np_env, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Replays ``actions`` in a reference env, auto-resetting like gymnax."""
    obs0 = np_env.reset()
    keys = ("obs", "reward", "terminated", "truncated", "compact", "final_obs")
    out = {k: [] for k in keys}
    for a in actions:
        for k, v in zip(keys, np_env.step(a)):
            out[k].append(v)
    return {"obs0": obs0, **{k: np.stack(v) for k, v in out.items()}}


def bfs_from_goal(grid: np.ndarray, goal) -> np.ndarray:
    """Steps to the goal from every cell (-1 for walls / unreachable)."""
    dist = np.full(grid.shape, -1, np.int64)
    dist[goal] = 0
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in NP_MOVES:
            nr, nc = r + dr, c + dc
            if grid[nr, nc] != 1 and dist[nr, nc] < 0:
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


def bfs_best_moves(dist: np.ndarray) -> np.ndarray:
    """int[24, 24]: a base move that brings each open cell one step closer."""
    best = np.zeros(dist.shape, np.int64)
    for r, c in np.argwhere(dist > 0):
        for b, (dr, dc) in enumerate(NP_MOVES):
            if dist[r + dr, c + dc] == dist[r, c] - 1:
                best[r, c] = b
                break
    return best


def invert(action_map: np.ndarray, base_moves: np.ndarray) -> np.ndarray:
    """Per cell, the action whose permuted effect is ``base_moves[r, c]``."""
    return np.argmax(action_map == base_moves[..., None], axis=-1)


# --------------------------------------------------------------------------
# Batched JAX rollouts: one compile per environment.
# --------------------------------------------------------------------------
def make_rollout(env, n_steps: int, cell_index):
    """jit(vmap(rollout)). The policy takes ``table[cell]`` with probability
    ``p_table`` and a uniformly random action otherwise."""

    def rollout(key, params, p_table, table):
        def body(state, key):
            k_coin, k_rand, k_step = jax.random.split(key, 3)
            random_action = jax.random.randint(k_rand, (), 0, env.num_actions)
            action = jnp.where(
                jax.random.uniform(k_coin) < p_table,
                table[cell_index(state)],
                random_action,
            ).astype(jnp.int32)
            obs, next_state, reward, term, trunc, info = env.step(
                k_step, state, action, params
            )
            out = {
                "action": action,
                "obs": obs,
                "reward": reward,
                "terminated": term,
                "truncated": trunc,
                "compact": info["compact"],
                "cell_id": info["cell_id"],
                "final_obs": info["final_observation"],
                "time": next_state.time,
                "start_compact": env.start_compact(params),
                # obs_from_compact rebuilds both the pre- and post-reset obs.
                "ofc_final_ok": jnp.all(
                    env.obs_from_compact(info["compact"], params)
                    == info["final_observation"]
                ),
                "ofc_obs_ok": jnp.all(
                    env.obs_from_compact(env.compact_state(next_state), params) == obs
                ),
            }
            return next_state, out

        k_reset, k_steps = jax.random.split(key)
        obs0, state0 = env.reset(k_reset, params)
        _, traj = jax.lax.scan(body, state0, jax.random.split(k_steps, n_steps))
        return obs0, traj

    return jax.jit(jax.vmap(rollout))


def to_numpy(tree):
    return jax.tree.map(np.asarray, tree)


@pytest.fixture(scope="module")
def chain():
    return RandomisedChain()


@pytest.fixture(scope="module")
def maze():
    return Maze()


@pytest.fixture(scope="module")
def maze_bfs():
    grid = np_maze_grid()
    dist = bfs_from_goal(grid, tuple(np.argwhere(grid == 2)[0]))
    return grid, dist, bfs_best_moves(dist)


# Chain rollout rows: 0 right in effect, 1 left in effect, 2-5 random,
# 6-7 right in effect with probability 0.9.
CHAIN_P = np.array([1, 1, 0, 0, 0, 0, 0.9, 0.9], np.float32)
CHAIN_RIGHT = np.array([True, False, True, True, True, True, True, True])


@pytest.fixture(scope="module")
def chain_runs(chain):
    n = len(CHAIN_P)
    keys = jax.random.split(jax.random.key(0), n)
    params = jax.jit(jax.vmap(chain.sample_params))(keys)
    flips = np.asarray(params.flips)
    # Action with effect right is 1 - flip; with effect left it is flip.
    tables = np.where(CHAIN_RIGHT[:, None], 1 - flips, flips).astype(np.int32)
    run = make_rollout(chain, CHAIN_STEPS, lambda s: s.pos)
    obs0, traj = run(jax.random.split(jax.random.key(1), n), params, CHAIN_P, tables)
    return to_numpy(params), to_numpy(obs0), to_numpy(traj)


# Maze rollout rows: 0 BFS-optimal, 1 "up" everywhere (stuck below a wall at
# the start), 2-5 random, 6-7 BFS-optimal with probability 0.8.
MAZE_P = np.array([1, 1, 0, 0, 0, 0, 0.8, 0.8], np.float32)


@pytest.fixture(scope="module")
def maze_runs(maze, maze_bfs):
    _, _, best = maze_bfs
    n = len(MAZE_P)
    keys = jax.random.split(jax.random.key(2), n)
    params = jax.jit(jax.vmap(maze.sample_params))(keys)
    amap = np.asarray(params.action_map)
    tables = np.stack([invert(amap[i], best) for i in range(n)]).astype(np.int32)
    tables[1] = invert(amap[1], np.full((24, 24), 3))
    run = make_rollout(maze, MAZE_STEPS, lambda s: (s.row, s.col))
    obs0, traj = run(jax.random.split(jax.random.key(3), n), params, MAZE_P, tables)
    return to_numpy(params), to_numpy(obs0), to_numpy(traj)


def make_batched(env, seed: int):
    """Reset and a few steps of NUM_VMAP_ENVS envs, each with its own params."""
    keys = jax.random.split(jax.random.key(seed), NUM_VMAP_ENVS)
    params = jax.jit(jax.vmap(env.sample_params))(keys)
    reset = jax.jit(jax.vmap(env.reset))
    step = jax.jit(jax.vmap(env.step))
    obs, state = reset(keys, params)
    steps = []
    for t in range(3):
        k_act, k_step = jax.random.split(jax.random.fold_in(jax.random.key(seed), t))
        actions = jax.random.randint(k_act, (NUM_VMAP_ENVS,), 0, env.num_actions)
        out = step(jax.random.split(k_step, NUM_VMAP_ENVS), state, actions, params)
        steps.append((state, actions, out))
        state = out[1]
    return to_numpy(params), to_numpy(obs), to_numpy(steps)


# --------------------------------------------------------------------------
# Chain
# --------------------------------------------------------------------------
def test_chain_api(chain):
    assert chain.num_actions == 2 and chain.num_cells == 100
    assert chain.num_open_cells == 100 and chain.compact_dim == 1
    assert chain.name == "RandomisedChain"
    assert isinstance(chain.action_space(chain.default_params), spaces.Discrete)
    assert chain.action_space(chain.default_params).n == 2
    assert chain.observation_space(chain.default_params).shape == (100,)
    p = chain.default_params
    assert isinstance(p, ChainParams) and p.max_steps_in_episode == 109
    np.testing.assert_array_equal(p.flips, np.zeros(100, np.int32))
    assert p.flips.dtype == jnp.int32
    np.testing.assert_array_equal(chain.start_compact(p), [1])
    assert RandomisedChain(length=10).default_params.max_steps_in_episode == 19
    assert RandomisedChain(length=10, horizon=5).num_cells == 10


@pytest.mark.parametrize("kwargs", [{"length": 1}, {"horizon": 0}, {"length": 0}])
def test_chain_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        RandomisedChain(**kwargs)


def test_chain_reset(chain, chain_runs):
    params, obs0, traj = chain_runs
    obs, state = chain.reset(jax.random.key(0), chain.default_params)
    assert isinstance(state, ChainState)
    assert int(state.pos) == 1 and int(state.time) == 0
    assert state.pos.dtype == jnp.int32 and state.time.dtype == jnp.int32
    expected = np.zeros(100, np.float32)
    expected[:2] = 1
    np.testing.assert_array_equal(obs, expected)
    np.testing.assert_array_equal(obs0, np.broadcast_to(expected, obs0.shape))
    np.testing.assert_array_equal(traj["start_compact"], np.ones((8, CHAIN_STEPS, 1)))


def test_chain_best_and_left_returns(chain_runs):
    params, _, traj = chain_runs
    for row, expected in ((0, 11.0), (1, 0.108)):
        for ep in range(3):
            rewards = traj["reward"][row, ep * 109 : (ep + 1) * 109]
            assert rewards.sum() == pytest.approx(expected, rel=1e-5)
    # Right in effect: one cell per step until the end, then stay there.
    np.testing.assert_array_equal(
        traj["compact"][0, :109, 0], np.minimum(np.arange(2, 111), 99)
    )
    np.testing.assert_array_equal(traj["compact"][1, :109, 0], np.zeros(109))
    assert params.flips[0].any() and not params.flips[0].all()


def test_chain_horizon_truncates_never_terminates(chain_runs):
    _, _, traj = chain_runs
    assert not traj["terminated"].any()
    for row in range(len(CHAIN_P)):
        np.testing.assert_array_equal(
            np.flatnonzero(traj["truncated"][row]), [108, 217, 326]
        )
    # time counts 1..109 then restarts from 0 after the auto-reset.
    np.testing.assert_array_equal(traj["time"][0, :110], np.r_[1:109, 0, 1])


def test_chain_observation_is_thermometer(chain, chain_runs):
    _, _, traj = chain_runs
    pos = traj["compact"][..., 0]
    expected = (np.arange(100) <= pos[..., None]).astype(np.float32)
    np.testing.assert_array_equal(traj["final_obs"], expected)
    assert traj["obs"].dtype == np.float32
    assert traj["ofc_final_ok"].all() and traj["ofc_obs_ok"].all()
    np.testing.assert_array_equal(traj["cell_id"], pos)


def test_chain_matches_numpy(chain_runs):
    params, obs0, traj = chain_runs
    assert traj["reward"][6:].max() == 1.0  # rows 6-7 reach the right end
    assert (traj["reward"][2:6] == np.float32(0.001)).any()
    for row in range(len(CHAIN_P)):
        ref = np_rollout(NpChain(params.flips[row], 109), traj["action"][row])
        np.testing.assert_array_equal(obs0[row], ref["obs0"])
        for k in ("obs", "reward", "terminated", "truncated", "compact", "final_obs"):
            np.testing.assert_array_equal(traj[k][row], ref[k], err_msg=f"{row} {k}")


def test_chain_sample_params_keys(chain):
    a = chain.sample_params(jax.random.key(7))
    b = chain.sample_params(jax.random.key(7))
    c = chain.sample_params(jax.random.key(8))
    np.testing.assert_array_equal(a.flips, b.flips)
    assert (np.asarray(a.flips) != np.asarray(c.flips)).any()
    assert set(np.unique(a.flips)) == {0, 1} and a.flips.dtype == jnp.int32
    assert a.max_steps_in_episode == 109


def test_chain_vmap_1000(chain):
    params, obs, steps = make_batched(chain, seed=4)
    assert obs.shape == (NUM_VMAP_ENVS, 100)
    assert len({f.tobytes() for f in params.flips}) == NUM_VMAP_ENVS
    for state, actions, (obs, next_state, reward, term, trunc, info) in steps:
        pos = state.pos
        right = (actions + params.flips[np.arange(NUM_VMAP_ENVS), pos]) % 2
        np.testing.assert_array_equal(
            next_state.pos, np.clip(pos + 2 * right - 1, 0, 99)
        )
        assert obs.shape == (NUM_VMAP_ENVS, 100) and reward.shape == (NUM_VMAP_ENVS,)
        assert info["compact"].shape == (NUM_VMAP_ENVS, 1)
        assert not term.any() and not trunc.any()


# --------------------------------------------------------------------------
# Maze
# --------------------------------------------------------------------------
def test_maze_grid_and_api(maze, maze_bfs):
    grid, _, _ = maze_bfs
    raw = load_maze_grid()
    assert raw.shape == (24, 24)
    np.testing.assert_array_equal(raw, grid)
    assert raw[MAZE_START] == 3 and raw[MAZE_GOAL] == 2
    assert MAZE_START == (1, 1) and MAZE_GOAL == (16, 5)
    assert int((grid != 1).sum()) == 340 == maze.num_open_cells
    assert maze.num_actions == 4 and maze.num_cells == 576 and maze.compact_dim == 2
    assert maze.name == "Maze"
    assert maze.action_space(maze.default_params).n == 4
    assert maze.observation_space(maze.default_params).shape == (24, 24, 1)
    p = maze.default_params
    assert isinstance(p, MazeParams) and p.max_steps_in_episode == 250
    identity = np.broadcast_to(np.arange(4), (24, 24, 4))
    np.testing.assert_array_equal(p.action_map, identity)
    np.testing.assert_array_equal(maze.start_compact(p), [1, 1])
    assert int(maze.cell_id(jnp.array([16, 5], jnp.int32))) == 16 * 24 + 5
    with pytest.raises(ValueError):
        Maze(horizon=0)


def test_maze_shortest_path_bfs(maze_bfs):
    _, dist, _ = maze_bfs
    assert dist[MAZE_START] == 125


def test_maze_bfs_path_in_jax(maze_runs, maze_bfs):
    """Row 0 follows the BFS path by inverting each cell's permutation."""
    params, _, traj = maze_runs
    _, dist, best = maze_bfs
    cells = [MAZE_START]
    for _ in range(125):
        r, c = cells[-1]
        dr, dc = NP_MOVES[best[r, c]]
        cells.append((r + dr, c + dc))
    assert cells[-1] == MAZE_GOAL
    np.testing.assert_array_equal(traj["compact"][0, :125], np.array(cells[1:]))
    amap = params.action_map[0]
    for t, (r, c) in enumerate(cells[:-1]):
        assert amap[r, c, traj["action"][0, t]] == best[r, c]
    rewards, term = traj["reward"][0], traj["terminated"][0]
    assert rewards[124] == 10.0 and term[124]
    assert not rewards[:124].any() and not term[:124].any()
    np.testing.assert_array_equal(np.flatnonzero(term), [124, 249, 374, 499])
    assert not traj["truncated"][0].any()
    assert traj["final_obs"][0, 124, 16, 5, 0] == 1.0  # player drawn on the goal
    assert traj["obs"][0, 124, 1, 1, 0] == 1.0  # auto-reset to the start
    assert traj["time"][0, 124] == 0


def test_maze_walls_block(maze, maze_bfs):
    grid, _, _ = maze_bfs
    params = maze.sample_params(jax.random.key(5))
    amap = np.asarray(params.action_map)
    cells = np.argwhere(grid != 1)
    rows, cols = np.repeat(cells[:, 0], 4), np.repeat(cells[:, 1], 4)
    actions = np.tile(np.arange(4), len(cells))
    states = MazeState(
        row=jnp.asarray(rows, jnp.int32),
        col=jnp.asarray(cols, jnp.int32),
        time=jnp.zeros(len(rows), jnp.int32),
    )
    step = jax.jit(jax.vmap(maze.step_env, in_axes=(None, 0, 0, None)))
    _, next_state, _, _, _ = step(jax.random.key(0), states, actions, params)
    moves = np.array(NP_MOVES)[amap[rows, cols, actions]]
    target_r, target_c = rows + moves[:, 0], cols + moves[:, 1]
    blocked = grid[target_r, target_c] == 1
    assert blocked.sum() > 300
    np.testing.assert_array_equal(next_state.row, np.where(blocked, rows, target_r))
    np.testing.assert_array_equal(next_state.col, np.where(blocked, cols, target_c))


def test_maze_action_maps_are_permutations(maze):
    for seed in range(3):
        amap = np.asarray(maze.sample_params(jax.random.key(seed)).action_map)
        assert amap.shape == (24, 24, 4) and amap.dtype == np.int32
        identity = np.broadcast_to(np.arange(4), amap.shape)
        np.testing.assert_array_equal(np.sort(amap, -1), identity)
        # Not the identity and not one shared permutation for all cells.
        assert len({tuple(p) for p in amap.reshape(-1, 4)}) > 15


def test_maze_truncates_at_horizon(maze_runs):
    _, _, traj = maze_runs
    # Row 1 presses "up in effect" at the start, below a wall: it never moves.
    np.testing.assert_array_equal(traj["compact"][1], np.ones((MAZE_STEPS, 2)))
    for row in range(1, 6):
        assert not traj["terminated"][row].any()
        truncated_at = np.flatnonzero(traj["truncated"][row])
        np.testing.assert_array_equal(truncated_at, [249, 499])
        assert not traj["reward"][row].any()


def test_maze_observation(maze, maze_runs, maze_bfs):
    grid, _, _ = maze_bfs
    _, obs0, traj = maze_runs
    obs, state = maze.reset(jax.random.key(0), maze.default_params)
    assert isinstance(state, MazeState)
    assert (int(state.row), int(state.col), int(state.time)) == (1, 1, 0)
    assert obs.shape == (24, 24, 1) and obs.dtype == jnp.float32
    expected = grid.astype(np.float32) / np.float32(3)  # start cell: player
    np.testing.assert_array_equal(obs[..., 0], expected)
    thirds = (np.float32([0, 1, 2, 3]) / np.float32(3)).tolist()
    assert set(np.unique(traj["obs"]).tolist()) == set(thirds)
    # Exactly one player cell; the start shows empty once the player leaves.
    final = traj["final_obs"][..., 0]
    assert ((final == 1.0).sum(axis=(-1, -2)) == 1).all()
    moved = (traj["compact"] != np.array(MAZE_START)).any(-1)
    assert (final[moved][:, 1, 1] == 0).all()
    assert traj["ofc_final_ok"].all() and traj["ofc_obs_ok"].all()
    np.testing.assert_array_equal(
        traj["cell_id"], traj["compact"][..., 0] * 24 + traj["compact"][..., 1]
    )
    np.testing.assert_array_equal(traj["start_compact"][0, 0], [1, 1])


def test_maze_matches_numpy(maze_runs):
    params, obs0, traj = maze_runs
    assert traj["terminated"][6:].any()  # the noisy BFS rows reach the goal
    for row in range(len(MAZE_P)):
        ref = np_rollout(NpMaze(params.action_map[row]), traj["action"][row])
        np.testing.assert_array_equal(obs0[row], ref["obs0"])
        for k in ("obs", "reward", "terminated", "truncated", "compact", "final_obs"):
            np.testing.assert_array_equal(traj[k][row], ref[k], err_msg=f"{row} {k}")


def test_maze_sample_params_keys(maze):
    a = maze.sample_params(jax.random.key(7)).action_map
    b = maze.sample_params(jax.random.key(7)).action_map
    c = maze.sample_params(jax.random.key(8)).action_map
    np.testing.assert_array_equal(a, b)
    assert (np.asarray(a) != np.asarray(c)).any()


def test_maze_vmap_1000(maze):
    params, obs, steps = make_batched(maze, seed=6)
    grid = np_maze_grid()
    assert obs.shape == (NUM_VMAP_ENVS, 24, 24, 1)
    assert len({m.tobytes() for m in params.action_map}) == NUM_VMAP_ENVS
    idx = np.arange(NUM_VMAP_ENVS)
    for state, actions, (obs, next_state, reward, term, trunc, info) in steps:
        r, c = state.row, state.col
        moves = np.array(NP_MOVES)[params.action_map[idx, r, c, actions]]
        tr, tc = r + moves[:, 0], c + moves[:, 1]
        blocked = grid[tr, tc] == 1
        np.testing.assert_array_equal(next_state.row, np.where(blocked, r, tr))
        np.testing.assert_array_equal(next_state.col, np.where(blocked, c, tc))
        assert obs.shape == (NUM_VMAP_ENVS, 24, 24, 1)
        assert reward.shape == (NUM_VMAP_ENVS,)
        assert info["compact"].shape == (NUM_VMAP_ENVS, 2)
        assert not term.any() and not trunc.any()
