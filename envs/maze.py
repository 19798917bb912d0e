"""The OPIQ 24x24 maze as a gymnax environment.

The grid file holds 0 empty, 1 wall, 2 goal and 3 player start. The agent
starts at (1, 1); reaching the goal at (16, 5) pays +10 and terminates the
episode (a true terminal). Otherwise the reward is 0 and the episode is
truncated at the horizon (250 steps by default). Moving into a wall leaves the
agent in place.

Each cell has its own fixed permutation of the four base moves (left, down,
right, up): action ``a`` in cell ``(r, c)`` performs base move
``action_map[r, c, a]``. The observation is the grid with the start marker
cleared and the player drawn in as 3, divided by 3, shape (24, 24, 1).
"""

from importlib import resources
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from .base import CompactEnvironment

MAZE_SIZE = 24
MAZE_START = (1, 1)
MAZE_GOAL = (16, 5)
GOAL_REWARD = 10.0

EMPTY, WALL, GOAL, PLAYER = 0, 1, 2, 3

# Base moves as (row, col) deltas: 0 left, 1 down, 2 right, 3 up.
MOVES = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], dtype=np.int32)


def load_maze_grid() -> np.ndarray:
    """The raw maze file as int32[24, 24] (0 empty, 1 wall, 2 goal, 3 start)."""
    text = resources.files(__package__).joinpath("data/maze_24x24.txt").read_text()
    rows = [line.strip() for line in text.splitlines() if line.strip()]
    grid = np.array([[int(ch) for ch in row] for row in rows], dtype=np.int32)
    if grid.shape != (MAZE_SIZE, MAZE_SIZE):
        raise ValueError(f"maze grid has shape {grid.shape}, expected (24, 24)")
    return grid


@struct.dataclass(kw_only=True)
class MazeState(environment.EnvState):
    """Player cell and steps taken in the current episode (int32 scalars)."""

    row: jax.Array
    col: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class MazeParams(environment.EnvParams):
    """Per-cell action permutations int32[24, 24, 4] and the horizon."""

    action_map: jax.Array
    max_steps_in_episode: int = 250


class Maze(CompactEnvironment):
    """The OPIQ maze with per-cell randomised actions."""

    compact_dim = 2
    has_cell_table = True

    def __init__(self, horizon: int = 250):
        super().__init__()
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"maze horizon must be an integer >= 1, got {horizon!r}")
        self.horizon = int(horizon)
        raw = load_maze_grid()
        if raw[MAZE_START] != PLAYER or raw[MAZE_GOAL] != GOAL:
            raise ValueError("maze file disagrees with MAZE_START / MAZE_GOAL")
        # Static background: the start marker is cleared, the player is drawn
        # in at its current cell by get_obs.
        self.grid = np.where(raw == PLAYER, EMPTY, raw).astype(np.int32)
        self.walls = self.grid == WALL
        # Every move from an open cell stays inside the grid only if the
        # border is all wall; step_env relies on that instead of clipping.
        border = np.concatenate(
            [self.walls[0], self.walls[-1], self.walls[:, 0], self.walls[:, -1]]
        )
        if not border.all():
            raise ValueError("maze border must be all walls")
        self._background = self.grid.astype(np.float32) / np.float32(PLAYER)

    # ------------------------------------------------------------------ sizes
    @property
    def name(self) -> str:
        return "Maze"

    @property
    def num_actions(self) -> int:
        return 4

    @property
    def num_cells(self) -> int:
        """Size of the integer cell-id space (row * 24 + col)."""
        return MAZE_SIZE * MAZE_SIZE

    @property
    def num_open_cells(self) -> int:
        """Number of non-wall cells (340)."""
        return int((~self.walls).sum())

    # ----------------------------------------------------------------- params
    @property
    def default_params(self) -> MazeParams:
        """Identity permutation in every cell."""
        identity = jnp.broadcast_to(
            jnp.arange(4, dtype=jnp.int32), (MAZE_SIZE, MAZE_SIZE, 4)
        )
        return MazeParams(action_map=identity, max_steps_in_episode=self.horizon)

    def sample_params(self, key: jax.Array) -> MazeParams:
        """An independent uniformly random permutation of the moves per cell."""
        noise = jax.random.uniform(key, (MAZE_SIZE, MAZE_SIZE, 4))
        action_map = jnp.argsort(noise, axis=-1).astype(jnp.int32)
        return MazeParams(action_map=action_map, max_steps_in_episode=self.horizon)

    # ---------------------------------------------------------------- dynamics
    def step_env(
        self,
        key: jax.Array,
        state: MazeState,
        action: int | float | jax.Array,
        params: MazeParams,
    ) -> tuple[jax.Array, MazeState, jax.Array, jax.Array, dict[Any, Any]]:
        """One transition. ``info`` carries the (pre-reset) compact state."""
        del key
        action = jnp.asarray(action, jnp.int32)
        chex.assert_shape(action, ())
        chex.assert_shape(params.action_map, (MAZE_SIZE, MAZE_SIZE, 4))
        delta = jnp.asarray(MOVES)[params.action_map[state.row, state.col, action]]
        row, col = state.row + delta[0], state.col + delta[1]
        blocked = jnp.asarray(self.walls)[row, col]
        row = jnp.where(blocked, state.row, row).astype(jnp.int32)
        col = jnp.where(blocked, state.col, col).astype(jnp.int32)
        state = MazeState(row=row, col=col, time=state.time + 1)
        terminated = self.is_terminated(state, params)
        reward = jnp.where(terminated, GOAL_REWARD, 0.0).astype(jnp.float32)
        compact = self.compact_state(state)
        info = {"compact": compact, "cell_id": self.cell_id(compact)}
        return self.get_obs(state, params), state, reward, terminated, info

    def reset_env(
        self, key: jax.Array, params: MazeParams
    ) -> tuple[jax.Array, MazeState]:
        """Deterministic start at (1, 1)."""
        del key
        state = MazeState(
            row=jnp.asarray(MAZE_START[0], jnp.int32),
            col=jnp.asarray(MAZE_START[1], jnp.int32),
            time=jnp.asarray(0, jnp.int32),
        )
        return self.get_obs(state, params), state

    def _render(self, row: jax.Array, col: jax.Array) -> jax.Array:
        # A select, not a scatter into a broadcast background: batched, XLA fuses it into what
        # reads the observations (the trainer's cast to bfloat16) instead of writing them out twice.
        rows = jnp.arange(MAZE_SIZE, dtype=jnp.int32)[:, None]
        cols = jnp.arange(MAZE_SIZE, dtype=jnp.int32)[None, :]
        player = (rows == row) & (cols == col)
        obs = jnp.where(player, jnp.float32(1.0), jnp.asarray(self._background))  # PLAYER / 3
        return obs[..., None]

    def get_obs(self, state: MazeState, params=None, key=None) -> jax.Array:
        """float32[24, 24, 1]: grid with the player drawn in, divided by 3."""
        del params, key
        return self._render(state.row, state.col)

    def is_terminated(self, state: MazeState, params: MazeParams) -> jax.Array:
        """True at the goal cell."""
        del params
        return (state.row == MAZE_GOAL[0]) & (state.col == MAZE_GOAL[1])

    # ---------------------------------------------------------- compact state
    def compact_state(self, state: MazeState) -> jax.Array:
        """int32[2]: (row, col)."""
        return jnp.stack([state.row, state.col]).astype(jnp.int32)

    def obs_from_compact(self, compact: jax.Array, params: MazeParams) -> jax.Array:
        """The observation ``step``/``reset`` return at this cell."""
        del params
        chex.assert_shape(compact, (self.compact_dim,))
        return self._render(compact[0], compact[1])

    def cell_id(self, compact: jax.Array) -> jax.Array:
        """int32 scalar in [0, 576): row * 24 + col."""
        chex.assert_shape(compact, (self.compact_dim,))
        return (compact[0] * MAZE_SIZE + compact[1]).astype(jnp.int32)

    def all_compacts(self) -> jax.Array:
        """int32[num_cells, 2]: (row, col) of every cell id (walls included), in cell-id order."""
        ids = jnp.arange(MAZE_SIZE * MAZE_SIZE, dtype=jnp.int32)
        return jnp.stack([ids // MAZE_SIZE, ids % MAZE_SIZE], axis=1)

    def start_compact(self, params: MazeParams) -> jax.Array:
        """Compact state of the start cell."""
        del params
        return jnp.array(MAZE_START, jnp.int32)

    # ----------------------------------------------------------------- spaces
    def action_space(self, params: MazeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params: MazeParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (MAZE_SIZE, MAZE_SIZE, 1), jnp.float32)
