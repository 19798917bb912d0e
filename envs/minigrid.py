"""MiniGrid's tasks in JAX, through xminigrid (the ``minigrid`` extra: ``pip install -e '.[minigrid]'``).

``--env minigrid:NAME`` trains on xminigrid's ``MiniGrid-NAME`` (``minigrid:DoorKey-16x16``, ``minigrid:FourRooms``,
...; :func:`minigrid_tasks` lists them). xminigrid 0.9.3, which installs on Python 3.11 and 3.12, gives DoorKey (5x5
to 16x16), Empty, EmptyRandom, FourRooms, LockedRoom, Memory, Playground, Unlock, UnlockPickUp and
BlockedUnlockPickUp; it has no KeyCorridor, MultiRoom or ObstructedMaze.

:class:`MiniGridGymnax` puts gymnax's API on an xminigrid environment, and the gymnax adapter does the rest: the
observation is the agent's 7x7 view, two channels (tile and colour ids) of ``uint8``; ``step`` returns 6 values and
does not reset (xminigrid never does), so the adapter resets the episode that ended. An episode ends at the goal,
with xminigrid's reward ``1 - 0.9 * steps / max_steps`` (a termination), or after ``max_steps`` steps (a
truncation). Counts hash the view (SimHash), and "distinct states visited" counts distinct views (a 16-bit hash).
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

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


def check_task(task: str) -> None:
    """A one-line ``ValueError`` for a task xminigrid lacks, with the closest names."""
    tasks = minigrid_tasks()
    if task not in tasks:
        close = difflib.get_close_matches(task, tasks, n=3)
        hint = f"did you mean {', '.join(f'minigrid:{c}' for c in close)}?" if close else f"tasks: {', '.join(tasks)}"
        raise ValueError(f"unknown MiniGrid task {task!r} in xminigrid; {hint}")


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
    """``minigrid:TASK`` as the trainer's environment: xminigrid's task behind the gymnax adapter."""
    from .gymnax_adapter import GymnaxAdapter

    env = MiniGridGymnax(task)
    return GymnaxAdapter(env, env.default_params, name=f"MiniGrid-{task}")
