"""Montezuma's Revenge, the paper's Atari game: :mod:`.atari`'s pool with the current room read from RAM byte 3.

Everything but the game is :mod:`.atari`'s, shared with every other Atari game (the paper's settings, EnvPool's
reset and stacking conventions, the XLA interface); this module names the game and keeps the names that
Montezuma's code and tests use.
"""

from __future__ import annotations

from typing import Any

from .atari import (
    PAPER_SETTINGS, AtariPool, StepOutput, atari_game, clip_reward, envpool_missing, is_reset_step, newest_frame,
)
from .atari import make_envpool as make_atari_envpool
from .atari import room_from_ram as room_at

MONTEZUMA = atari_game("MontezumaRevenge")
TASK_ID = MONTEZUMA.task_id
ENVPOOL_MISSING = envpool_missing("montezuma")
ROOM_RAM_INDEX = MONTEZUMA.room_ram_index
START_ROOM = 1
"""The room in which every episode starts."""


def room_from_ram(ram):
    """The current room, int32[...], from the Atari RAM uint8[..., 128] (byte 3)."""
    return room_at(ram, ROOM_RAM_INDEX)


def make_envpool(num_envs: int, seed: int, **overrides: Any):
    """A raw EnvPool pool of Montezuma's Revenge with the paper's settings (:func:`.atari.make_envpool`)."""
    return make_atari_envpool(MONTEZUMA, num_envs, seed, "montezuma", **overrides)


class MontezumaPool(AtariPool):
    """One EnvPool pool of ``num_envs`` Montezuma's Revenge environments (:class:`.atari.AtariPool`)."""

    def __init__(self, num_envs: int, seed: int, **overrides: Any):
        super().__init__(MONTEZUMA, num_envs, seed, "montezuma", **overrides)


__all__ = ["ENVPOOL_MISSING", "MONTEZUMA", "PAPER_SETTINGS", "ROOM_RAM_INDEX", "START_ROOM", "TASK_ID", "MontezumaPool",
           "StepOutput", "clip_reward", "is_reset_step", "make_envpool", "newest_frame", "room_from_ram"]
