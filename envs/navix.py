"""MiniGrid's tasks that xminigrid lacks, through navix (the ``navix`` extra: ``pip install -e '.[navix]'``).

``--env minigrid:NAME`` trains on navix's ``Navix-NAME-v0`` where xminigrid has no ``MiniGrid-NAME``
(:mod:`~opiq_jax.envs.minigrid` chooses). navix 0.7.4, the last release that installs on Python 3.11 (4.0 needs
3.12), gives KeyCorridor S3R1 to S6R3, LavaGap, SimpleCrossing, DistShift, Dynamic-Obstacles and GoToDoor among
the tasks xminigrid lacks; it has no MultiRoom or ObstructedMaze. Its
observation is navix's default for the task, on KeyCorridor the whole grid as three ``uint8`` channels (tile, colour,
state; 3x7 on S3R1, 7x7 on S3R3), fully observed where MiniGrid gives a 7x7 view; its 7 actions are MiniGrid's.

:class:`NavixGymnax` puts gymnax's API on a navix environment: ``step`` returns 6 values and does not reset (navix
would reset lazily, on the call after the episode ended; the adapter resets first, with its own key). An episode
ends at the goal (navix's termination, with its reward) or after navix's ``max_steps`` (a truncation). Counts hash
the view (SimHash); navix's state gives no small exact id here, so ``--count-features exact`` counts a 16-bit hash
of the view, as for any gymnax environment.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

EXTRA = "pip install -e '.[navix]'"
PREFIX, SUFFIX = "Navix-", "-v0"
TERMINATION, TRUNCATION = 2, 1
"""navix's step types that end an episode (``navix.environments.environment.StepType``)."""


def navix_tasks() -> tuple[str, ...]:
    """navix's tasks as ``minigrid:NAME`` names them (without ``Navix-`` and ``-v0``); empty without navix."""
    try:
        import navix
    except ModuleNotFoundError:
        return ()
    return tuple(name.removeprefix(PREFIX).removesuffix(SUFFIX) for name in navix.registry()
                 if name.startswith(PREFIX) and name.endswith(SUFFIX))


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
