"""A few hundred steps of many methods on one suite's environment, through the command line (the suites' tests)."""

import json
from pathlib import Path

import jax
import numpy as np

from opiq_jax.cli import main
from opiq_jax.registry.methods import METHODS, program_name, program_parts

EVERY_METHOD = tuple(METHODS)
ONE_PROGRAM = tuple(m for m in METHODS if program_name(program_parts([m])) == "plain")
"""The methods that differ only in numbers: one compiled program (DORA, RND and BSP add one each)."""


SUITE_RUN = ("--seeds", "1", "--steps", "200", "--log-every", "100", "--buffer-size", "400", "--no-progress")
"""How :func:`train_methods` runs: what another command repeats to find the same experiment in its folder."""


def train_methods(env: str, methods: tuple[str, ...], out: Path, *extra: str) -> set[str]:
    """Trains ``methods`` (one seed each, 200 steps) on ``env`` into ``out``; the methods its configs hold."""
    main(["train", "--env", env, "--method", *methods, *SUITE_RUN, "--out", str(out), *extra])
    assert list(out.glob("plot_test_return.png"))  # the figures of every program together
    return {run["method"] for config in out.rglob("config.json") for run in json.loads(config.read_text())["runs"]}


def random_actions(key: jax.Array, steps: int, num_actions: int) -> np.ndarray:
    return np.asarray(jax.random.randint(key, (steps,), 0, num_actions))
