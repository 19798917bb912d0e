"""Configuration, split in two as the design asks.

* :class:`StaticConfig` holds shapes and structure (network, buffer size, batch, n-step, counting
  features, the exploration parts of the program, ...). It is closed over at trace time: changing it
  means compiling again.
* Hyperparameters are numbers (M, C_action, C_bootstrap, beta, the epsilon schedule, ...): a dict of
  float32 arrays with a leading runs axis, so one compiled program trains many settings side by side.
  The trainer's own hyperparameters are declared here (:data:`CORE_HPARAMS`); every exploration part
  declares its own (``Part.hparams``), so a part brings its numbers with it.

Each hyperparameter is declared once, as an :class:`Option`: its name, default, allowed range and
one line of documentation; checks and messages come from that declaration.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Option:
    """One option, declared once: name, default, allowed range and a line of documentation."""

    name: str
    default: Any
    doc: str
    minimum: float | None = None
    """Smallest allowed value (inclusive, or exclusive with ``open_minimum``)."""
    maximum: float | None = None
    """Largest allowed value (inclusive)."""
    open_minimum: bool = False
    choices: tuple | None = None
    """The allowed values, when they are a short list."""
    cli: str | None = None
    """How a user writes it on the command line, without the dashes (default: the name with dashes)."""

    @property
    def flag(self) -> str:
        """``--name-with-dashes`` (or the declared command-line name)."""
        return "--" + (self.cli or self.name.replace("_", "-"))

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this option, in one line naming the option as the user writes it."""
        if self.choices is not None:
            return None if value in self.choices else (
                f"{self.flag} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return None
        if isinstance(value, float) and math.isnan(value):
            return f"{self.flag} must be a number, got nan"
        if self.minimum is not None and (value <= self.minimum if self.open_minimum else value < self.minimum):
            return f"{self.flag} must be {'>' if self.open_minimum else '>='} {self.minimum:g}, got {value:g}"
        if self.maximum is not None and value > self.maximum:
            if self.minimum is not None and not self.open_minimum:
                return f"{self.flag} must lie in [{self.minimum:g}, {self.maximum:g}], got {value:g}"
            return f"{self.flag} must be <= {self.maximum:g}, got {value:g}"
        return None

    def check(self, value: Any) -> None:
        """Raises ``ValueError`` with :meth:`problem`'s message when ``value`` is not allowed."""
        message = self.problem(value)
        if message:
            raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class StaticConfig:
    """Shapes and structure of one compiled experiment (everything that is not a traced number)."""

    env: str = "chain"
    """Environment: ``chain`` (randomised chain), ``maze``, ``montezuma`` (EnvPool, the Atari extra),
    ``gymnax:NAME`` (any gymnax environment) or any name registered with ``register_environment``."""
    env_kwargs: tuple[tuple[str, object], ...] = ()
    """Extra (name, value) pairs for a gymnax environment: constructor arguments or EnvParams fields."""
    chain_length: int = 100
    """Number of chain states (the horizon is ``chain_length + 9``)."""
    parts: tuple[str, ...] = ()
    """The exploration parts of this program (``opiq_jax.parts``), in registry order: the union of the
    parts of its methods. The runner sets it from the methods; it is not an option of its own."""
    network: str = "mlp"
    """Q-network: ``mlp`` (chain), ``maze_conv`` (maze), ``nature`` (Atari) or ``auto`` (from the
    observation's shape: ``mlp`` for vectors, ``maze_conv`` for images)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the MLP."""
    total_steps: int = 100_000
    """Environment steps per run."""
    log_every: int = 1_000
    """Steps per compiled chunk; one row of metrics per run per chunk."""
    buffer_size: int = 10_000
    """Replay capacity per run (environment steps)."""
    batch_size: int = 64
    """Minibatch size of every update."""
    n_step: int = 1
    """n of the n-step Q-learning target."""
    train_every: int = 1
    """One update every this many environment steps."""
    target_update: int = 200
    """Copy the online network to the target network every this many environment steps."""
    gamma: float = 0.99
    """Discount."""
    count_features: str = "simhash"
    """What is counted: ``simhash`` (the paper: SimHash bits of the observation) or ``exact`` (the
    environment's cell id, no aliasing). Montezuma always counts the paper's 8x11, 8-level frame feature."""
    simhash_bits: int = 32
    """SimHash code length k (paper: 32 chain, 128 maze)."""
    sketch_rows: int = 4
    """Rows of the count-min sketch."""
    sketch_width: int = 1 << 14
    """Columns per row of the count-min sketch."""
    shared_action_mask: bool = False
    """One action randomisation shared by all runs (the reference code) instead of one per run (the paper)."""
    grad_clip: float = 5.0
    """Global gradient-norm clip."""
    rms_decay: float = 0.99
    """RMSProp decay (PyTorch's alpha)."""
    rms_eps: float = 1e-8
    """RMSProp epsilon, added outside the square root as PyTorch does."""
    bsp_heads: int = 10
    """BSP: the number K of Q-heads on a shared torso (paper: 10)."""
    rnd_outputs: int = 128
    """RND: output size of its target and predictor networks (paper: 128 chain and maze, 512 Atari)."""
    rnd_batch: int = 32
    """RND: its predictor takes one gradient step per update on this many most recent states."""
    dora_buffer_factor: int = 4
    """DORA: its E-network trains on a small ring of the ``dora_buffer_factor * batch_size`` most recent steps."""
    dora_gamma: float = 0.99
    """DORA: discount gamma_E of the E-value SARSA."""
    precision: str = "float32"
    """The Q-network's precision: ``float32`` (the paper) or ``bfloat16``, mixed precision for throughput:
    float32 weights and RMSProp statistics are what the optimiser updates; the target network's and a
    copy of the weights' hidden layers, which acting, the loss and the test episodes read, are bfloat16,
    as are the hidden layers' activations and gradients; the output layer (weights and computation), the
    TD loss and the optimiser's arithmetic stay float32. BSP's prior and DORA's and RND's networks stay
    float32."""
    maze_torso: str = "auto"
    """How the maze network computes its two convolutions: ``xla`` (patch matrices and GEMMs,
    ``networks.PatchConv``), ``pallas`` (the fused kernels of ``opiq_jax.maze_torso``; off GPUs they run
    in Pallas's interpreter, for tests) or ``auto``: ``pallas`` on GPUs in bfloat16, else ``xla``
    (float32 keeps XLA's form, the one the paper's results here were produced with). The Q-network only:
    BSP's shared torso and DORA's and RND's networks keep XLA's form."""
    target_values: str = "auto"
    """How the bootstrap targets get the target network's values: ``network`` (its forward pass on every
    sampled batch), ``table`` (evaluated at every cell when it is copied, ``RunState.target_table``, and
    looked up: the same function, one forward pass over all cells every ``target_update`` steps instead of
    one over ``batch_size`` states every update; only for environments with a cell table, the chain and the
    maze, whose observation is a function of one of a few hundred cells) or ``auto``: ``table`` in bfloat16
    where the environment has a cell table, else ``network`` (float32 keeps the path the paper's results
    here were produced with, bit for bit; a table's GEMM rounds differently in the last bits)."""
    envs_per_run: int = 1
    """Environments each run owns and steps at once (Montezuma: of the EnvPool pool, which holds runs x
    envs_per_run). Step counts (total_steps, log_every, train_every, target_update, the epsilon schedule)
    stay in environment steps per run, so several environments per run keep the paper's replay ratio."""
    overlap: bool = True
    """Pool environments (Montezuma) only: learn while the emulators step (the update sees the replay and
    counts one step late); off: step, count, store, then train, as the in-program environments do."""

    def validate(self) -> None:
        """Raises ``ValueError`` with a one-line message for any inconsistent field."""
        checks = [
            (self.chain_length >= 2, f"chain_length must be >= 2, got {self.chain_length}"),
            (self.network in ("mlp", "maze_conv", "nature", "auto"), f"unknown network {self.network!r}"),
            (self.total_steps > 0, f"total_steps must be positive, got {self.total_steps}"),
            (self.log_every > 0, f"log_every must be positive, got {self.log_every}"),
            (self.total_steps % self.log_every == 0,
             f"total_steps ({self.total_steps}) must be a multiple of log_every ({self.log_every})"),
            (self.batch_size > 0, f"batch_size must be positive, got {self.batch_size}"),
            (self.buffer_size > self.batch_size, f"buffer_size ({self.buffer_size}) must exceed batch_size ({self.batch_size})"),
            (self.n_step >= 1, f"n_step must be >= 1, got {self.n_step}"),
            (self.train_every >= 1, f"train_every must be >= 1, got {self.train_every}"),
            (self.target_update >= 1, f"target_update must be >= 1, got {self.target_update}"),
            (0.0 <= self.gamma <= 1.0, f"gamma must lie in [0, 1], got {self.gamma}"),
            (self.count_features in ("simhash", "exact"), f"unknown count_features {self.count_features!r}: use simhash or exact"),
            (self.simhash_bits >= 1, f"simhash_bits must be >= 1, got {self.simhash_bits}"),
            (self.sketch_rows >= 1 and self.sketch_width >= 2, "sketch_rows must be >= 1 and sketch_width >= 2"),
            (self.bsp_heads >= 2, f"bsp_heads must be >= 2, got {self.bsp_heads}"),
            (self.rnd_outputs >= 1, f"rnd_outputs must be >= 1, got {self.rnd_outputs}"),
            (1 <= self.rnd_batch <= self.buffer_size, f"rnd_batch must lie in [1, buffer_size], got {self.rnd_batch}"),
            (self.dora_buffer_factor >= 1, f"dora_buffer_factor must be >= 1, got {self.dora_buffer_factor}"),
            (0.0 <= self.dora_gamma <= 1.0, f"dora_gamma must lie in [0, 1], got {self.dora_gamma}"),
            (self.precision in ("float32", "bfloat16"), f"unknown precision {self.precision!r}: use float32 or bfloat16"),
            (self.maze_torso in ("auto", "xla", "pallas"), f"unknown maze_torso {self.maze_torso!r}: use auto, xla or pallas"),
            (self.target_values in ("auto", "table", "network"),
             f"unknown target_values {self.target_values!r}: use auto, table or network"),
            (self.envs_per_run >= 1, f"envs_per_run must be >= 1, got {self.envs_per_run}"),
            (self.log_every % self.envs_per_run == 0 and self.target_update % self.envs_per_run == 0
             and self.batch_size % self.envs_per_run == 0 and self.buffer_size % self.envs_per_run == 0,
             f"log_every, target_update, batch_size and buffer_size must be multiples of envs_per_run ({self.envs_per_run})"),
            (self.train_every % self.envs_per_run == 0 or self.envs_per_run % self.train_every == 0,
             f"train_every ({self.train_every}) and envs_per_run ({self.envs_per_run}) must divide one another"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# ------------------------------------------------------------------------------------ hyperparameters

HParams = dict
"""A run's hyperparameters: ``{name: float32 array}`` (with a leading runs axis once stacked)."""

CORE_HPARAMS: tuple[Option, ...] = (
    Option("epsilon_start", 0.01, "Initial epsilon of the linear schedule.", minimum=0.0, maximum=1.0),
    Option("epsilon_end", 0.01, "Final epsilon of the linear schedule.", minimum=0.0, maximum=1.0),
    Option("epsilon_decay_steps", 0.0, "Environment steps of the linear epsilon decay (0: a fixed epsilon_end).",
           minimum=0.0),
    Option("reward_subtract", 0.0, "Constant subtracted from every stored environment reward (DQN R-Subtract)."),
    Option("final_bias", 0.0, "Initial value of the output layer's bias (DQN Bias)."),
    Option("lr", 5e-4, "RMSProp learning rate.", minimum=0.0, open_minimum=True),
    Option("beta_mmc", 0.0, "Weight of the Monte Carlo return in the mixed target (Montezuma's MMC; 0: none).",
           minimum=0.0, maximum=1.0),
)
"""The trainer's own hyperparameters; every program has them."""


def hparam_options(parts: Iterable[Any] = ()) -> dict[str, Option]:
    """Every hyperparameter of a program with ``parts`` (part objects): the core ones, then each part's."""
    options = {o.name: o for o in CORE_HPARAMS}
    for part in parts:
        for option in part.hparams:
            if option.name in options and options[option.name] != option:
                raise ValueError(f"hyperparameter {option.name} is declared twice, differently (part {part.name})")
            options[option.name] = option
    return options


def make_hparams(options: Mapping[str, Option], values: Mapping[str, float] | None = None) -> HParams:
    """One run's hyperparameters: every option's default, updated with ``values`` (checked against the options)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(options))
    if unknown:
        raise ValueError(f"unknown hyperparameters {', '.join(unknown)}; known: {', '.join(options)}")
    for name, value in values.items():
        options[name].check(value)
    return {name: jnp.float32(values.get(name, option.default)) for name, option in options.items()}


def stack_hparams(settings: Sequence[HParams]) -> HParams:
    """Stacks per-run hyperparameters along a new leading runs axis (every run must have the same names)."""
    names = [tuple(sorted(s)) for s in settings]
    if len(set(names)) != 1:
        raise ValueError("runs of one program must have the same hyperparameters")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *settings)


def hparams_to_dict(hparams: HParams) -> dict[str, list[float] | float]:
    """JSON-friendly form of (possibly stacked) hyperparameters."""
    return {k: np.asarray(v).tolist() for k, v in hparams.items()}
