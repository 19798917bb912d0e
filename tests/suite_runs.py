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


SUITE_OPTIONS = dict(seeds=1, steps=200, log_every=100, buffer_size=400)
"""How :func:`train_methods` runs, as the API takes it: a test that trains the same experiment through the API
shares its compiled program."""

SUITE_RUN = (*(arg for name, value in SUITE_OPTIONS.items() for arg in (f"--{name.replace('_', '-')}", str(value))),
             "--no-progress")
""":data:`SUITE_OPTIONS` on the command line: what another command repeats to find the same experiment in its
folder."""


def train_methods(env: str, methods: tuple[str, ...], out: Path, *extra: str) -> set[str]:
    """Trains ``methods`` (one seed each, 200 steps) on ``env`` into ``out``; the methods its configs hold."""
    main(["train", "--env", env, "--method", *methods, *SUITE_RUN, "--out", str(out), *extra])
    assert list(out.glob("plot_test_return.png"))  # the figures of every program together
    return {run["method"] for config in out.rglob("config.json") for run in json.loads(config.read_text())["runs"]}


def random_actions(key: jax.Array, steps: int, num_actions: int) -> np.ndarray:
    return np.asarray(jax.random.randint(key, (steps,), 0, num_actions))
