"""MiniGrid's tasks that xminigrid lacks, through navix (the ``navix`` extra: ``pip install -e '.[navix]'``).

``--env minigrid:NAME`` trains on navix's ``Navix-NAME-v0`` where xminigrid has no ``MiniGrid-NAME``
(:mod:`~opiq_jax.envs.minigrid` chooses). The extra installs navix 0.7.4 on Python 3.11 (its last release there) and
navix 4 on Python 3.12 and later. navix 0.7.4 gives DoorKey-Random, LavaGap, SimpleCrossing, DistShift,
Dynamic-Obstacles and GoToDoor among the tasks xminigrid lacks. Its KeyCorridor cannot be solved, so it is refused
(:func:`check_solvable`): every door is a wall cell of navix's grid, the ball to reach is not walkable and the locked
door starts open (navix fixed all three in 0.9.5). navix 4 adds a solvable KeyCorridor (S3R1 to S6R3),
ObstructedMaze and MultiRoom. The observation is navix's default for the task, on KeyCorridor the whole grid as three
``uint8`` channels (tile, colour, state; 3x7 on S3R1), fully observed where MiniGrid gives a 7x7 view; its 7
actions are MiniGrid's.

:class:`NavixGymnax` puts gymnax's API on a navix environment: ``step`` returns 6 values and does not reset (navix
would reset lazily, on the call after the episode ended; the adapter resets first, with its own key). An episode
ends at the goal (navix's termination, with its reward) or after navix's ``max_steps`` (a truncation).

``--count-features exact`` counts one id per agent state, as for xminigrid's tasks (:func:`exact_cell`): the
player's cell and direction, what its pocket holds (nothing, or one of the task's keys, balls and boxes) and which
doors are open. A navix door has two states, not MiniGrid's three: opening a locked door unlocks it in the same step,
and no action closes a door. The id leaves out where a dropped or pushed object lies and what moves on its own
(Dynamic-Obstacles' balls), as xminigrid's does. A task whose ids would pass 2**24 counts a 16-bit hash of the view.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from .gymnax_adapter import MAX_STATE_CELLS

EXTRA = "pip install -e '.[navix]'"
PREFIX, SUFFIX = "Navix-", "-v0"
TERMINATION, TRUNCATION = 2, 1
"""navix's step types that end an episode (``navix.environments.environment.StepType``)."""
SOLVABLE_KEYCORRIDOR = (0, 9, 5)
"""The first navix release whose KeyCorridor can be solved (module docstring)."""


def navix_tasks() -> tuple[str, ...]:
    """navix's tasks as ``minigrid:NAME`` names them (without ``Navix-`` and ``-v0``); empty without navix."""
    try:
        import navix
    except ModuleNotFoundError:
        return ()
    return tuple(name.removeprefix(PREFIX).removesuffix(SUFFIX) for name in navix.registry()
                 if name.startswith(PREFIX) and name.endswith(SUFFIX))


def navix_version() -> tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(part) for part in version("navix").split(".")[:3] if part.isdigit())


def check_solvable(task: str) -> None:
    """A one-line ``ValueError`` for a task the installed navix cannot solve (module docstring)."""
    if task.startswith("KeyCorridor") and navix_version() < SOLVABLE_KEYCORRIDOR:
        raise ValueError(f"minigrid:{task}: navix {'.'.join(map(str, navix_version()))}'s KeyCorridor cannot be "
                         "solved (its doors are wall cells of the grid); navix 0.9.5 or later fixes it and needs "
                         f"Python 3.12: {EXTRA} there")


def pocket_ids(entities: dict) -> list:
    """The ids of everything a pocket can hold (keys, balls, boxes: the entities with an ``id``), in one order, one
    array (or shape) per kind."""
    return [entities[kind].id for kind in sorted(entities) if hasattr(entities[kind], "id")]


def task_layout(env: Any) -> tuple[int, int, int, int]:
    """The task's grid height and width, its number of doors and of things a pocket can hold, from shapes alone
    (static: navix batches each kind of entity in an array of fixed length)."""
    state = jax.eval_shape(env.reset, jax.random.key(0)).state
    doors = state.entities["door"].position.shape[0] if "door" in state.entities else 0
    return (*state.grid.shape, doors, sum(ids.size for ids in pocket_ids(state.entities)))


def exact_cell(state: Any, width: int, num_doors: int, num_items: int) -> jax.Array:
    """int32: the player's cell and direction, its pocket and the doors' open flags, as one id in
    ``[0, height * width * 4 * (num_items + 1) * 2**num_doors)`` (module docstring)."""
    player = state.entities["player"]
    row, col = player.position[0, 0].astype(jnp.int32), player.position[0, 1].astype(jnp.int32)
    pocket = jnp.int32(0)
    if num_items:  # the pocket is -1 or the id of what it holds
        holds = jnp.concatenate([ids.reshape(-1) for ids in pocket_ids(state.entities)]) == player.pocket[0]
        pocket = jnp.where(jnp.any(holds), 1 + jnp.argmax(holds), 0)
    doors = jnp.int32(0)
    if num_doors:  # any non-zero value is open, as navix's Door.walkable reads it (0.7.4 stores a 2)
        is_open = (state.entities["door"].open != 0).astype(jnp.int32)
        doors = jnp.sum(is_open << jnp.arange(num_doors, dtype=jnp.int32))
    place = (row * width + col) * 4 + player.direction[0].astype(jnp.int32)
    return (place * (num_items + 1) + pocket) * (1 << num_doors) + doors


@struct.dataclass
class NavixParams:
    """The episode's step limit under the name the trainer reads (navix keeps its settings in the environment)."""

    max_steps_in_episode: int = struct.field(pytree_node=False)


class NavixGymnax:
    """A navix environment with gymnax's API (module docstring)."""

    def __init__(self, task: str):
        import navix

        self.env = navix.make(PREFIX + task + SUFFIX)
        self.task = task
        self.default_params = NavixParams(int(self.env.max_steps))
        height, width, num_doors, num_items = task_layout(self.env)
        cells = height * width * 4 * (num_items + 1) * 2**num_doors
        if cells <= MAX_STATE_CELLS:  # else no state_cell: the adapter hashes the view
            self.num_cells = cells
            self.state_cell = lambda timestep: exact_cell(timestep.state, width, num_doors, num_items)

    def reset(self, key: jax.Array, params: NavixParams):
        timestep = self.env.reset(key)
        return timestep.observation, timestep

    def step(self, key: jax.Array, timestep: Any, action: jax.Array, params: NavixParams):
        del key, params  # navix's steps draw from the key in its state; its settings live in the environment
        timestep = self.env.step(timestep, action)
        terminated = timestep.step_type == TERMINATION
        truncated = timestep.step_type == TRUNCATION
        return timestep.observation, timestep, timestep.reward, terminated, truncated, {}

    def action_space(self, params: NavixParams | None = None):
        from gymnax.environments import spaces

        return spaces.Discrete(int(self.env.action_space.maximum) + 1)

    def observation_space(self, params: NavixParams):
        from gymnax.environments import spaces

        return spaces.Box(0, 255, tuple(self.env.observation_space.shape), jnp.uint8)
