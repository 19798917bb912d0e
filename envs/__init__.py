"""Pure-JAX (gymnax) environments for opiq-jax: the randomised chain and the maze."""

from envs.chain import ChainParams, ChainState, RandomisedChain
from envs.maze import MAZE_GOAL, MAZE_START, Maze, MazeParams, MazeState, load_maze_grid

__all__ = [
    "MAZE_GOAL",
    "MAZE_START",
    "ChainParams",
    "ChainState",
    "Maze",
    "MazeParams",
    "MazeState",
    "RandomisedChain",
    "load_maze_grid",
]
