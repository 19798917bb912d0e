"""The MinAtar games (Young and Tian, 2019) in JAX, from gymnax.

``--env minatar:NAME`` is gymnax's ``NAME-MinAtar`` (``minatar:Breakout``, ``minatar:SpaceInvaders``, ...;
:func:`minatar_games` lists those gymnax has: gymnax 1.0.1 gives all five, Asterix, Breakout, Freeway, Seaquest and
SpaceInvaders, each with its minimal action set of 3 to 6 actions), through the gymnax adapter unchanged, as
``--env gymnax:Breakout-MinAtar``. The name earns its own spec for its settings: Young and Tian's network and DQN
settings instead of the chain's (see the registry). The observation is a 10x10 grid of 0/1 channels (4 to 10 by
game); counts hash it (SimHash), and "distinct states visited" counts distinct grids (a 16-bit hash).
"""

from __future__ import annotations

import difflib

SUFFIX = "-MinAtar"


def minatar_games() -> tuple[str, ...]:
    """gymnax's MinAtar games, as ``minatar:NAME`` names them (without ``-MinAtar``)."""
    import gymnax  # the core dependency; imported here so that naming the module costs nothing

    return tuple(name.removesuffix(SUFFIX) for name in gymnax.registered_envs if name.endswith(SUFFIX))


def check_game(game: str) -> None:
    """A one-line ``ValueError`` for a game gymnax lacks, with the closest names."""
    games = minatar_games()
    if game not in games:
        close = difflib.get_close_matches(game, games, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(f'minatar:{c}' for c in close)}?" if close else f"games: {', '.join(games)}"
        raise ValueError(f"unknown MinAtar game {game!r} in gymnax; {hint}")


def make_minatar(game: str):
    """``minatar:GAME`` as the trainer's environment: gymnax's ``GAME-MinAtar`` behind the gymnax adapter."""
    from .gymnax_adapter import make_gymnax

    check_game(game)
    return make_gymnax(game + SUFFIX)
