"""The options of ``opiq-jax bench``, in a module of their own: the command line parses them without
importing the trainer (which imports gymnax, and gymnax starts JAX's backend, which must wait for
``jax.distributed.initialize`` in ``opiq-jax train --distributed``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..config import StaticConfig
from ..environments import static_for_env
from ..methods import METHODS, program_parts


def runs_schedule(max_runs: int, min_runs: int = 1) -> list[int]:
    """The powers of two from ``min_runs`` (rounded up) to ``max_runs``: 1, 2, 4, ..."""
    if min_runs < 1:
        raise ValueError(f"min_runs must be >= 1, got {min_runs}")
    return [1 << i for i in range(max_runs.bit_length()) if min_runs <= 1 << i <= max_runs]


@dataclass
class Bench:
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
    method: str = "opiq"
    """Method whose paper setting every run uses."""
    count_features: Literal["exact", "simhash"] = "exact"
    """Counting features of the trainer: the exact cell id (the same counts as the plain baseline's dense table)
    or SimHash codes (the paper)."""
    chain_length: int = 100
    """Chain states."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The trainer's Q-network precision (bfloat16: mixed precision, StaticConfig.precision); the plain
    baseline is always float32."""
    maze_torso: Literal["auto", "xla", "pallas"] = "auto"
    """The maze network's convolutions: XLA's patch GEMMs, the Pallas kernels, or auto (Pallas on GPUs in
    bfloat16; see StaticConfig.maze_torso)."""
    target_values: Literal["auto", "table", "network"] = "auto"
    """The bootstrap targets' target-network values: looked up in a table of every cell filled at each target
    copy (chain, maze), the target network on every batch, or auto (the table in bfloat16; see
    StaticConfig.target_values)."""
    buffer_size: int | None = None
    """Replay capacity per run (default: the paper's, 10k chain, 250k maze)."""
    hidden: tuple[int, ...] | None = None
    """Chain MLP hidden widths (default 256 256)."""
    probe_bytes: int | None = None
    """Bytes of the bandwidth probe array (default 2 GiB on an accelerator, 256 MiB on CPU)."""
    matmul_size: int | None = None
    """Side of the square matmul of the compute probe (default 8192 on an accelerator, 1024 on CPU)."""
    out: Path = Path("results/bench")
    """Folder for bench.json and bench.md."""
    progress: bool = True
    """Print a line per measurement to stderr."""

    def validate(self) -> None:
        """Raises ``ValueError`` with a one-line message for a bad option."""
        checks = [
            (len(self.envs) >= 1, "--envs needs at least one of chain, maze"),
            (self.min_runs >= 1, f"--min-runs must be >= 1, got {self.min_runs}"),
            (self.max_runs >= self.min_runs, f"--max-runs ({self.max_runs}) must be >= --min-runs ({self.min_runs})"),
            (self.steps_per_measure >= 1, f"--steps-per-measure must be >= 1, got {self.steps_per_measure}"),
            (bool(runs_schedule(self.max_runs, self.min_runs)),
             f"no power of two lies between --min-runs {self.min_runs} and --max-runs {self.max_runs}"),
            (self.repeats >= 1, f"--repeats must be >= 1, got {self.repeats}"),
            (self.growth >= 0, f"--growth must be >= 0, got {self.growth}"),
            (self.baseline_steps >= 1, f"--baseline-steps must be >= 1, got {self.baseline_steps}"),
            (self.method in METHODS, f"unknown --method {self.method!r}: use one of {', '.join(METHODS)}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def static_for(self, env: str) -> StaticConfig:
        """The static configuration measured on ``env``: the paper's, with this bench's overrides."""
        overrides: dict[str, Any] = dict(
            log_every=self.steps_per_measure, total_steps=self.steps_per_measure, count_features=self.count_features,
            precision=self.precision, maze_torso=self.maze_torso, target_values=self.target_values,
            parts=program_parts([self.method]),
        )
        if env == "chain":
            overrides["chain_length"] = self.chain_length
            if self.hidden is not None:
                overrides["hidden"] = tuple(self.hidden)
        if self.buffer_size is not None:
            overrides["buffer_size"] = self.buffer_size
        return static_for_env(env, **overrides)
