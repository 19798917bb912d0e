"""Craftax in JAX, symbolic observations (the ``craftax`` extra: ``pip install -e '.[craftax]'``).

``--env craftax:Classic`` trains on ``Craftax-Classic-Symbolic-v1`` (Crafter's rules, a 1,345-long vector of
one-hot map cells and inventory, 17 actions) and ``--env craftax:Craftax`` on ``Craftax-Symbolic-v1`` (the full
game, 8,268 long, 43 actions); :data:`TASKS` maps the names. craftax 1.6.1 installs on Python 3.11 and 3.12.

:class:`CraftaxGymnax` puts the trainer's reading of gymnax's API on craftax's environment without auto-reset: its
``step`` returns 6 values and never resets, so the gymnax adapter resets the episode that ended, as it does
MiniGrid's. An episode ends when the player dies (a termination) or at craftax's ``max_timesteps`` (10,000;
``--craftax-episode-steps`` sets another): a truncation, bootstrapped. The reward is craftax's: +1 for each
achievement the first time in an episode, and a tenth of the change in health, so an episode's return is about its
achievements (22 in Craftax-Classic). Counts hash the observation (SimHash); "distinct states visited" counts
distinct observations (a 16-bit hash).
"""

from __future__ import annotations

import difflib
from typing import Any

import jax
from flax import struct

EXTRA = "pip install -e '.[craftax]'"
EPISODE_STEPS = 10_000
"""craftax's own step limit of an episode (``max_timesteps``): ``--craftax-episode-steps`` sets another."""
TASKS = {"Classic": "Craftax-Classic-Symbolic-v1", "Craftax": "Craftax-Symbolic-v1"}
"""``craftax:NAME``'s names and craftax's own: the symbolic games (pixels would need a conv net and 8x the memory)."""


def import_craftax_env() -> Any:
    """craftax's ``craftax_env`` module, or a one-line ``ImportError`` naming the extra."""
    try:
        from craftax import craftax_env
    except ModuleNotFoundError:
        raise ImportError(f"--env craftax:NAME needs craftax: {EXTRA}") from None
    return craftax_env


def check_task(task: str) -> None:
    """A one-line ``ValueError`` for a name that is not one of :data:`TASKS`, with the closest."""
    if task not in TASKS:
        close = difflib.get_close_matches(task, TASKS, n=2, cutoff=0.4)
        hint = f"did you mean {', '.join(f'craftax:{c}' for c in close)}?" if close else ""
        raise ValueError(f"unknown Craftax game {task!r}; choose craftax:{' or craftax:'.join(TASKS)}"
                         + (f"; {hint}" if hint else ""))


@struct.dataclass
class CraftaxParams:
    """craftax's parameters (static: sizes and rules) and the episode's step limit under the name the trainer
    reads."""

    env_params: Any = struct.field(pytree_node=False)
    max_steps_in_episode: int = struct.field(pytree_node=False)


class CraftaxGymnax:
    """A craftax game without auto-reset, with the step of 6 values the gymnax adapter reads (module docstring)."""

    def __init__(self, task: str, episode_steps: int = EPISODE_STEPS):
        check_task(task)
        self.env = import_craftax_env().make_craftax_env_from_name(TASKS[task], auto_reset=False)
        self.task = task
        self.default_params = CraftaxParams(self.env.default_params.replace(max_timesteps=episode_steps),
                                            episode_steps)

    def reset(self, key: jax.Array, params: CraftaxParams):
        return self.env.reset(key, params.env_params)

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: CraftaxParams):
        obs, state, reward, done, _ = self.env.step(key, state, action, params.env_params)
        out_of_time = state.timestep >= params.max_steps_in_episode
        truncated = done & out_of_time & (state.player_health > 0)  # alive at the limit: cut short, not ended
        return obs, state, reward, done & ~truncated, truncated, {}

    def action_space(self, params: CraftaxParams | None = None):
        return self.env.action_space((params or self.default_params).env_params)

    def observation_space(self, params: CraftaxParams):
        return self.env.observation_space(params.env_params)


def make_craftax(task: str, episode_steps: int = EPISODE_STEPS):
    """``craftax:TASK`` as the trainer's environment: craftax's game, episodes cut at ``episode_steps``, behind the
    gymnax adapter."""
    from .gymnax_adapter import GymnaxAdapter

    env = CraftaxGymnax(task, episode_steps)
    return GymnaxAdapter(env, env.default_params, name=TASKS[task])
