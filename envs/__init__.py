"""Environments for opiq-jax, installed as ``opiq_jax.envs`` (never as a top-level ``envs``, which any
``envs/`` folder in a user's working directory would shadow).

The randomised chain and the maze are pure-JAX (gymnax) environments; ``gymnax_adapter`` wraps any
gymnax environment and ``montezuma`` steps Montezuma's Revenge through EnvPool. ``base`` states what
the trainer needs of an environment (:class:`CompactEnvironment`). This package imports nothing of
the rest of opiq-jax.
"""

from .base import CompactEnvironment
from .chain import ChainParams, ChainState, RandomisedChain
from .maze import MAZE_GOAL, MAZE_START, Maze, MazeParams, MazeState, load_maze_grid

__all__ = [
    "MAZE_GOAL",
    "MAZE_START",
    "ChainParams",
    "ChainState",
    "CompactEnvironment",
    "Maze",
    "MazeParams",
    "MazeState",
    "RandomisedChain",
    "load_maze_grid",
]
