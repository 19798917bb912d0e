"""MiniGrid's tasks in JAX, through xminigrid (the ``minigrid`` extra: ``pip install -e '.[minigrid]'``).

``--env minigrid:NAME`` trains on xminigrid's ``MiniGrid-NAME`` (``minigrid:DoorKey-16x16``, ``minigrid:FourRooms``,
...; :func:`minigrid_tasks` lists them). xminigrid 0.9.3, which installs on Python 3.11 and 3.12, gives DoorKey (5x5
to 16x16), Empty, EmptyRandom, FourRooms, LockedRoom, Memory, Playground, Unlock, UnlockPickUp and
BlockedUnlockPickUp; it has no KeyCorridor, MultiRoom or ObstructedMaze. A task xminigrid lacks comes from navix
where it has it (the ``navix`` extra, :mod:`~opiq_jax.envs.navix`: DoorKey-Random, LavaGap, ..., and with navix 4 on
Python 3.12 KeyCorridor, ObstructedMaze and MultiRoom); a task both give is xminigrid's.

:class:`MiniGridGymnax` puts gymnax's API on an xminigrid environment, and the gymnax adapter does the rest: the
observation is the agent's 7x7 view, two channels (tile and colour ids) of ``uint8``; ``step`` returns 6 values and
does not reset (xminigrid never does), so the adapter resets the episode that ended. An episode ends at the goal,
with xminigrid's reward ``1 - 0.9 * steps / max_steps`` (a termination), or after ``max_steps`` steps (a
truncation).

Counts hash the view (SimHash) by default. The state's exact cell id (``--count-features exact``, and the "distinct
states visited" metric) is what the issue of a MiniGrid task turns on: the agent's position and direction, what it
carries (tile and colour) and the state of each door (locked, closed or open, the doors taken in row-major order),
:func:`exact_cell`. It is small where the task has few doors (DoorKey-16x16: 256 x 4 x 156 x 3 = 479,232 ids) and
unique per state of a layout; it does not tell layouts apart (DoorKey draws its wall and door per episode) nor where
a ball or box was moved. A task whose ids would pass 2**24 (LockedRoom's six doors on 19x19) counts a 16-bit hash of
the view instead, as before.
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from . import navix
from .gymnax_adapter import MAX_STATE_CELLS

PREFIX = "MiniGrid-"
EXTRA = "pip install -e '.[minigrid]'"


def import_xminigrid() -> Any:
    """The xminigrid module, or a one-line ``ImportError`` naming the extra."""
    try:
        import xminigrid
    except ModuleNotFoundError:
        raise ImportError(f"--env minigrid:NAME needs xminigrid: {EXTRA}") from None
    return xminigrid


def minigrid_tasks() -> tuple[str, ...]:
    """xminigrid's MiniGrid tasks, as ``minigrid:NAME`` names them (without ``MiniGrid-``)."""
    names = import_xminigrid().registered_environments()
    return tuple(name.removeprefix(PREFIX) for name in names if name.startswith(PREFIX))


def installed_minigrid_tasks() -> tuple[str, ...] | None:
    """:func:`minigrid_tasks`, or ``None`` where xminigrid is not installed."""
    try:
        return minigrid_tasks()
    except ImportError:
        return None


def task_sources() -> dict[str, str]:
    """Every task ``minigrid:NAME`` names, with the library that gives it: xminigrid's, then navix's for the tasks
    xminigrid lacks (KeyCorridor), of those installed; a one-line ``ImportError`` naming the extras if neither is."""
    sources = dict.fromkeys(navix.navix_tasks(), "navix")
    tasks = installed_minigrid_tasks()
    if tasks is None and not sources:
        raise ImportError(f"--env minigrid:NAME needs xminigrid: {EXTRA} (KeyCorridor: {navix.EXTRA})")
    sources.update(dict.fromkeys(tasks or (), "xminigrid"))
    return sources


def check_task(task: str) -> str:
    """The library that gives ``task`` ('xminigrid' or 'navix'); a one-line ``ValueError`` for a task no installed
    library gives, with the closest names and the extra of a library not installed, or for a task the installed navix
    cannot solve."""
    if task in (installed_minigrid_tasks() or ()):  # xminigrid's come first: found without importing navix (seconds)
        return "xminigrid"
    sources = task_sources()
    if task in sources:
        if sources[task] == "navix":
            navix.check_solvable(task)
        return sources[task]
    close = difflib.get_close_matches(task, list(sources), n=3)
    hint = f"did you mean {', '.join(f'minigrid:{c}' for c in close)}?" if close else f"tasks: {', '.join(sources)}"
    missing = [f"xminigrid's need {EXTRA}"] if "xminigrid" not in sources.values() else []
    missing += [f"navix's (KeyCorridor) need {navix.EXTRA}"] if "navix" not in sources.values() else []
    raise ValueError(f"unknown MiniGrid task {task!r}; {hint}" + (f" ({'; '.join(missing)})" if missing else ""))


DOOR_STATES = 3
"""A door is locked, closed or open: its tile is one of three consecutive ids from xminigrid's ``DOOR_LOCKED``."""


def door_tiles(grid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Which of the grid's cells (row-major) hold a door, and each door's state: 0 locked, 1 closed, 2 open."""
    from xminigrid.core.constants import Tiles

    tiles = grid[..., 0].reshape(-1).astype(jnp.int32)
    state = tiles - Tiles.DOOR_LOCKED
    return (state >= 0) & (state < DOOR_STATES), state


def exact_cell(state: Any, width: int, num_doors: int) -> jax.Array:
    """int32: the agent's position, direction and pocket, and the first ``num_doors`` doors' states, as one id in
    ``[0, width * height * 4 * NUM_TILES * NUM_COLORS * 3**num_doors)`` (module docstring)."""
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES

    agent = state.agent
    row, col = agent.position[0].astype(jnp.int32), agent.position[1].astype(jnp.int32)
    pocket = agent.pocket[0].astype(jnp.int32) * NUM_COLORS + agent.pocket[1].astype(jnp.int32)
    is_door, door_state = door_tiles(state.grid)
    order = jnp.cumsum(is_door) - 1  # each door's index among the doors
    weight = jnp.int32(DOOR_STATES) ** jnp.clip(order, 0, max(num_doors - 1, 0))
    doors = jnp.sum(jnp.where(is_door & (order < num_doors), door_state * weight, 0))
    place = ((row * width + col) * 4 + agent.direction.astype(jnp.int32)) * (NUM_TILES * NUM_COLORS) + pocket
    return place * DOOR_STATES ** num_doors + doors


def exact_cells_of(env: Any, env_params: Any) -> tuple[int, int]:
    """The number of doors in the task's first layout (the tasks here keep it in every layout) and the number of
    ids :func:`exact_cell` then takes."""
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES

    from .gymnax_adapter import START_STATE_SEED

    grid = env.reset(env_params, jax.random.key(START_STATE_SEED)).state.grid
    num_doors = int(door_tiles(grid)[0].sum())
    height, width = grid.shape[:2]
    return num_doors, height * width * 4 * NUM_TILES * NUM_COLORS * DOOR_STATES ** num_doors


@struct.dataclass
class MiniGridParams:
    """xminigrid's parameters (static: the grid's size, the view, ``max_steps``) and the episode's step limit under
    the name the trainer reads."""

    env_params: Any = struct.field(pytree_node=False)
    max_steps_in_episode: int = struct.field(pytree_node=False)


class MiniGridGymnax:
    """An xminigrid environment with gymnax's API (module docstring)."""

    def __init__(self, task: str):
        check_task(task)
        self.env, env_params = import_xminigrid().make(PREFIX + task)
        from xminigrid.types import StepType

        self.last = StepType.LAST
        self.task = task
        self.default_params = MiniGridParams(env_params, int(env_params.max_steps))
        self.width = int(env_params.width)
        self.num_doors, cells = exact_cells_of(self.env, env_params)
        if cells <= MAX_STATE_CELLS:  # else no state_cell: the adapter hashes the view
            self.num_cells = cells
            self.state_cell = lambda timestep: exact_cell(timestep.state, self.width, self.num_doors)

    def reset(self, key: jax.Array, params: MiniGridParams):
        timestep = self.env.reset(params.env_params, key)
        return timestep.observation, timestep

    def step(self, key: jax.Array, timestep: Any, action: jax.Array, params: MiniGridParams):
        del key  # xminigrid's steps are deterministic; its randomness is in the reset
        timestep = self.env.step(params.env_params, timestep, action)
        terminated = timestep.discount == 0.0  # xminigrid's discount is 0 at the goal alone
        truncated = (timestep.step_type == self.last) & ~terminated  # the last step without the goal: the limit
        return timestep.observation, timestep, timestep.reward, terminated, truncated, {}

    def action_space(self, params: MiniGridParams | None = None):
        from gymnax.environments import spaces

        return spaces.Discrete(self.env.num_actions((params or self.default_params).env_params))

    def observation_space(self, params: MiniGridParams):
        from gymnax.environments import spaces

        return spaces.Box(0, 255, tuple(self.env.observation_shape(params.env_params)), jnp.uint8)


def make_minigrid(task: str):
    """``minigrid:TASK`` as the trainer's environment: xminigrid's task, else navix's, behind the gymnax adapter."""
    from .gymnax_adapter import GymnaxAdapter

    if check_task(task) == "navix":  # lists the installed libraries' tasks once
        env = navix.NavixGymnax(task)
        return GymnaxAdapter(env, env.default_params, name=f"{navix.PREFIX}{task}")
    env = MiniGridGymnax(task)
    return GymnaxAdapter(env, env.default_params, name=f"MiniGrid-{task}")
