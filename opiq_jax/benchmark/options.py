"""The options of ``opiq-jax bench``: how it measures (its own fields), and the static options it measures with,
generated from their one declaration (:data:`opiq_jax.common.config.STATIC_OPTIONS`): the same names, types, choices,
checks and documentation as ``opiq-jax train``'s. Where the bench's default differs from the trainer's, it is
declared once below (:data:`BENCH_DEFAULTS`), with the reason."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from ..common.config import STATIC_OPTIONS, StaticConfig
from ..common.errors import UsageError, option_name
from ..registry.environments import environment_spec
from ..registry.methods import METHODS, program_parts
from ..host.plan import static_with


BENCH_DEFAULTS: dict[str, tuple[Any, str | None]] = {
    "count_features": ("exact", "exact (the same counts as the plain baseline's dense table: the two are compared)"),
    "chain_length": (STATIC_OPTIONS["chain_length"].default, None),
    "precision": (STATIC_OPTIONS["precision"].default, "float32; the plain baseline is always float32"),
    "weight_storage": (STATIC_OPTIONS["weight_storage"].default, None),
    "mlp_backward": (STATIC_OPTIONS["mlp_backward"].default, None),
    "maze_torso": (STATIC_OPTIONS["maze_torso"].default, None),
    "target_values": (STATIC_OPTIONS["target_values"].default, None),
    "buffer_size": (None, "the environment's"),
    "hidden": (None, "the environment's"),
}
"""The static options the bench measures with: its default for each (None: the environment's) and how its help
states that default (None: as the declaration does)."""


def static_field(name: str) -> tuple[str, Any, Any]:
    """The bench's field for the static option ``name``: the declaration's type, choices and help."""
    option, (default, shown) = STATIC_OPTIONS[name], BENCH_DEFAULTS[name]
    kind = option.value_type | None if default is None else option.value_type
    return name, Annotated[kind, tyro.conf.arg(help=option.help(shown))], dataclasses.field(default=default)


BenchStatic = dataclasses.make_dataclass("BenchStatic", [static_field(name) for name in BENCH_DEFAULTS])
"""The static options of :class:`Bench`, generated from their declarations."""


def runs_schedule(max_runs: int, min_runs: int = 1) -> list[int]:
    """The powers of two from ``min_runs`` (rounded up) to ``max_runs``: 1, 2, 4, ..."""
    if min_runs < 1:
        raise ValueError(f"min_runs must be >= 1, got {min_runs}")
    return [1 << i for i in range(max_runs.bit_length()) if min_runs <= 1 << i <= max_runs]


@dataclass
class Bench(BenchStatic):
    """Throughput of the compiled trainer for 1, 2, 4, ... runs, side by side with a plain baseline."""

    envs: tuple[Literal["chain", "maze"], ...] = ("chain", "maze")
    """Environments to measure, in this order."""
    min_runs: int = 1
    """First number of runs tried (rounded up to a power of two)."""
    max_runs: int = 16384
    """Largest number of runs tried; doubling stops earlier when the rate grows by less than --growth
    or memory runs out."""
    steps_per_measure: int = 1000
    """Environment steps per run in one timed chunk of the trainer (the chunk length)."""
    repeats: int = 2
    """Timed intervals per configuration; the fastest counts."""
    growth: float = 0.10
    """Stop doubling when the aggregate rate grows by less than this fraction over the previous R."""
    baseline: bool = True
    """Also time the plain baseline (a straightforward per-step jitted DQN + counts) at every R."""
    baseline_steps: int = 200
    """Environment steps per run (one Python dispatch each) in one timed interval of the plain baseline."""
    method: Annotated[str, tyro.conf.arg(help=(
        "Method whose paper setting every run uses: " + ", ".join(METHODS) + ". Default: opiq."))] = "opiq"
    probe_bytes: int | None = None
    """Bytes of the bandwidth probe array (default 2 GiB on an accelerator, 256 MiB on CPU)."""
    matmul_size: int | None = None
    """Side of the square matmul of the compute probe (default 8192 on an accelerator, 1024 on CPU)."""
    out: Path = Path("results/bench")
    """Folder for bench.json and bench.md."""
    progress: bool = True
    """Print a line per measurement to stderr."""

    def validate(self) -> None:
        """Raises :class:`UsageError` (a ``ValueError``) with a one-line message for a bad option."""
        name = {f.name: option_name(f.name) for f in dataclasses.fields(self)}
        checks = [
            (len(self.envs) >= 1, f"{name['envs']} needs at least one of chain, maze"),
            (self.min_runs >= 1, f"{name['min_runs']} must be >= 1, got {self.min_runs}"),
            (self.max_runs >= self.min_runs,
             f"{name['max_runs']} ({self.max_runs}) must be >= {name['min_runs']} ({self.min_runs})"),
            (self.steps_per_measure >= 1, f"{name['steps_per_measure']} must be >= 1, got {self.steps_per_measure}"),
            (self.min_runs < 1 or bool(runs_schedule(self.max_runs, self.min_runs)),
             f"no power of two lies between {name['min_runs']} {self.min_runs} and {name['max_runs']} {self.max_runs}"),
            (self.repeats >= 1, f"{name['repeats']} must be >= 1, got {self.repeats}"),
            (self.growth >= 0, f"{name['growth']} must be >= 0, got {self.growth}"),
            (self.baseline_steps >= 1, f"{name['baseline_steps']} must be >= 1, got {self.baseline_steps}"),
            (self.method in METHODS, f"unknown {name['method']} {self.method!r}: use one of {', '.join(METHODS)}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        for env in self.envs:
            self.static_for(env)

    def static_for(self, env: str) -> StaticConfig:
        """The static configuration measured on ``env``: the paper's, with this bench's overrides."""
        overrides: dict[str, Any] = dict(
            log_every=self.steps_per_measure, total_steps=self.steps_per_measure, count_features=self.count_features,
            precision=self.precision, weight_storage=self.weight_storage, mlp_backward=self.mlp_backward,
            maze_torso=self.maze_torso,
            target_values=self.target_values,
            parts=program_parts([self.method]),
        )
        if environment_spec(env).declares("chain_length"):  # the chain: its length, and its MLP's widths
            overrides["chain_length"] = self.chain_length
            if self.hidden is not None:
                overrides["hidden"] = tuple(self.hidden)
        if self.buffer_size is not None:
            overrides["buffer_size"] = self.buffer_size

        return static_with(env, overrides)
