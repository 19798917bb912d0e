"""How many distinct SimHash codes the chain's states and the maze's cells get, per number of bits k.

Each state's observation (the chain's thermometer code; the maze image with the player on an open cell) is
hashed with ``opiq_jax.primitives.counts.simhash_code`` under ``--matrices`` random projections per k, drawn as the
trainer draws them (i.i.d. N(0, 1)). Fewer distinct codes than states means that some states share a code
and so share their counts: aliasing in the features, before any count-min sketch.

``python -m experiments.studies.simhash_aliasing --out docs/results/simhash-aliasing`` writes ``aliasing.json``,
``aliasing.md`` and ``run_info.json``. CPU only, seconds.

Reaches inside: opiq_jax.primitives.counts, to hash with the very SimHash functions that training counts with.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from envs.chain import thermometer
from envs.maze import Maze, load_maze_grid
from opiq_jax.primitives.counts import simhash_code, simhash_matrix
from opiq_jax.reporting import source_revision


def chain_observations(length: int) -> jax.Array:
    """float32[length, length]: the thermometer code of every chain state."""
    return jax.vmap(lambda s: thermometer(s, length))(jnp.arange(length))


def maze_observations() -> jax.Array:
    """float32[open cells, 576]: the maze image with the player on each non-wall cell."""
    maze, grid = Maze(), load_maze_grid()
    cells = jnp.asarray(np.argwhere(grid != 1), jnp.int32)
    return jax.vmap(lambda c: jnp.reshape(maze.obs_from_compact(c, None), (-1,)))(cells)


def codes(key: jax.Array, observations: jax.Array, num_bits: int) -> np.ndarray:
    """uint32[states, words]: every observation's SimHash code under one random projection."""
    matrix = simhash_matrix(key, num_bits, observations.shape[1])
    return np.asarray(jax.vmap(lambda o: simhash_code(matrix, o))(observations))


def distinct(code_rows: np.ndarray) -> int:
    """The number of distinct codes."""
    return len({tuple(c) for c in code_rows})


def same_as_previous(code_rows: np.ndarray) -> int:
    """How many states have the same code as the state listed before them (the chain's left neighbour)."""
    return int(np.all(code_rows[1:] == code_rows[:-1], axis=1).sum())


def summary(counts: list[int], states: int) -> dict:
    """Min, median and max of the distinct codes over projections."""
    return {"states": states, "distinct_codes": counts, "min": min(counts), "median": float(np.median(counts)),
            "max": max(counts)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--matrices", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.time()
    envs = {"chain (100 states)": chain_observations(100), "maze (open cells)": maze_observations()}
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.matrices)
    results = {env: {str(k): summary([distinct(codes(key, obs, k)) for key in keys], obs.shape[0])
                     for k in args.bits} for env, obs in envs.items()}
    chain = envs["chain (100 states)"]
    for k in args.bits:  # on the chain: is every state that loses its own code merged with its left neighbour?
        results["chain (100 states)"][str(k)]["same_code_as_left_neighbour"] = [
            same_as_previous(codes(key, chain, k)) for key in keys]
    lines = ["| environment | k | states | distinct codes over projections: min, median, max |", "|---|---|---|---|"]
    lines += [f"| {env} | {k} | {r['states']} | {r['min']}, {r['median']:g}, {r['max']} |"
              for env, per_k in results.items() for k, r in per_k.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"bits": args.bits, "matrices": args.matrices, "seed": args.seed}
    (args.out / "aliasing.json").write_text(json.dumps({"options": options, "results": results}, indent=1) + "\n")
    (args.out / "aliasing.md").write_text("\n".join(lines) + "\n")
    info = {"device": f"{os.cpu_count()}-core {platform.machine()} CPU, no accelerator", "jax": jax.__version__,
            "seconds": round(time.time() - start, 2), **source_revision()}
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
