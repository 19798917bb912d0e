"""Configuration, split in two as the design asks.

* :class:`StaticConfig` holds shapes and structure (network, buffer size, batch, n-step, counting
  features, ...). It is closed over at trace time: changing it means compiling again.
* :class:`HParams` holds numbers (M, C_action, C_bootstrap, beta, the epsilon schedule, reward
  offset, final-layer bias, learning rate, MMC beta). It is a pytree of float32 arrays with a
  leading runs axis, so one compiled program trains many settings side by side.

``ENV_DEFAULTS`` are the paper's settings per environment (appendix "Hyperparameters and Network
architectures", completed by ``REFERENCE.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

EnvName = Literal["chain", "maze"]
CountFeatures = Literal["simhash", "exact"]


@dataclasses.dataclass(frozen=True)
class StaticConfig:
    """Shapes and structure of one compiled experiment (everything that is not a traced number)."""

    env: str = "chain"
    """Environment: ``chain`` (randomised chain), ``maze``, ``montezuma`` (EnvPool, the Atari extra) or
    ``gymnax:NAME`` (any gymnax environment)."""
    env_kwargs: tuple[tuple[str, object], ...] = ()
    """Extra (name, value) pairs for a gymnax environment: constructor arguments or EnvParams fields."""
    chain_length: int = 100
    """Number of chain states (the horizon is ``chain_length + 9``)."""
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
    bonus_network: str = "none"
    """A learned bonus source with networks of its own: ``none``, ``dora`` (an E-value network trained by
    SARSA on zero rewards; DQN + DORA and DORA OA) or ``rnd`` (random network distillation; DQN + RND)."""
    bsp_heads: int = 0
    """Bootstrapped DQN with randomised priors (BSP): the number K of Q-heads on a shared torso (0: one plain Q)."""
    rnd_outputs: int = 128
    """Output size of RND's target and predictor networks (paper: 128 chain and maze, 512 Atari)."""
    rnd_batch: int = 32
    """RND's predictor takes one gradient step per update on this many most recent states."""
    dora_buffer_factor: int = 4
    """DORA's E-network trains on a small ring of the ``dora_buffer_factor * batch_size`` most recent steps."""
    dora_gamma: float = 0.99
    """Discount gamma_E of DORA's E-value SARSA."""
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
    """Montezuma only: environments of the EnvPool pool that each run owns (the pool holds runs x envs_per_run).
    Step counts (total_steps, log_every, train_every, target_update, the epsilon schedule) stay in environment
    steps per run, so several environments per run keep the paper's replay ratio."""

    def validate(self) -> None:
        """Raises ``ValueError`` with a one-line message for any inconsistent field."""
        checks = [
            (self.env in ("chain", "maze", "montezuma") or (self.env.startswith("gymnax:") and len(self.env) > 7),
             f"unknown env {self.env!r}: use chain, maze, montezuma or gymnax:NAME"),
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
            (self.bonus_network in ("none", "dora", "rnd"), f"unknown bonus_network {self.bonus_network!r}: use none, dora or rnd"),
            (self.bsp_heads >= 0 and self.bsp_heads != 1, f"bsp_heads must be 0 (no BSP) or >= 2, got {self.bsp_heads}"),
            (self.rnd_outputs >= 1, f"rnd_outputs must be >= 1, got {self.rnd_outputs}"),
            (1 <= self.rnd_batch <= self.buffer_size, f"rnd_batch must lie in [1, buffer_size], got {self.rnd_batch}"),
            (self.dora_buffer_factor >= 1, f"dora_buffer_factor must be >= 1, got {self.dora_buffer_factor}"),
            (0.0 <= self.dora_gamma <= 1.0, f"dora_gamma must lie in [0, 1], got {self.dora_gamma}"),
            (self.precision in ("float32", "bfloat16"), f"unknown precision {self.precision!r}: use float32 or bfloat16"),
            (self.precision == "float32" or self.env != "montezuma", "precision bfloat16 is not implemented for montezuma"),
            (self.maze_torso in ("auto", "xla", "pallas"), f"unknown maze_torso {self.maze_torso!r}: use auto, xla or pallas"),
            (self.target_values in ("auto", "table", "network"),
             f"unknown target_values {self.target_values!r}: use auto, table or network"),
            (self.envs_per_run >= 1, f"envs_per_run must be >= 1, got {self.envs_per_run}"),
            (self.envs_per_run == 1 or self.env == "montezuma", "envs_per_run > 1 is for --env montezuma only"),
            (self.log_every % self.envs_per_run == 0 and self.target_update % self.envs_per_run == 0
             and self.batch_size % self.envs_per_run == 0,
             f"log_every, target_update and batch_size must be multiples of envs_per_run ({self.envs_per_run})"),
            (self.train_every % self.envs_per_run == 0 or self.envs_per_run % self.train_every == 0,
             f"train_every ({self.train_every}) and envs_per_run ({self.envs_per_run}) must divide one another"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@struct.dataclass
class HParams:
    """Numbers that differ between runs of one compiled program (each a float32 array)."""

    m: jax.Array
    """Exponent M of the optimism bonus C / (N + 1)^M."""
    c_action: jax.Array
    """C_action: optimism added to Q for action selection (0: act on plain Q)."""
    c_bootstrap: jax.Array
    """C_bootstrap: optimism added to the target network's values when bootstrapping (0: plain max)."""
    beta: jax.Array
    """Scale of the pseudocount intrinsic reward beta / sqrt(N) (0: none)."""
    epsilon_start: jax.Array
    epsilon_end: jax.Array
    epsilon_decay_steps: jax.Array
    """Linear epsilon schedule; decay_steps 0 means a fixed epsilon_end."""
    reward_subtract: jax.Array
    """Constant subtracted from every stored environment reward (DQN R-Subtract)."""
    final_bias: jax.Array
    """Initial value of the output layer's bias (DQN Bias)."""
    lr: jax.Array
    """RMSProp learning rate."""
    beta_mmc: jax.Array
    """Weight of the Monte Carlo return in the mixed target (0: none)."""
    beta_dora: jax.Array
    """DQN + DORA: scale of the intrinsic reward beta_dora / sqrt(-log E(s, a)) (needs bonus_network=dora)."""
    beta_dora_action: jax.Array
    """DQN + DORA OA: scale of the action-selection bonus beta_dora_action / sqrt(-log E(s, a))."""
    beta_rnd: jax.Array
    """DQN + RND: scale of the intrinsic reward beta_rnd * ||predictor(s') - target(s')||^2 (needs bonus_network=rnd)."""
    beta_bsp: jax.Array
    """BSP: scale of each head's fixed random prior, Q_k + beta_bsp * p_k (needs bsp_heads >= 2)."""


HPARAM_FIELDS = tuple(f.name for f in dataclasses.fields(HParams))

BASE_HPARAMS = dict(
    m=2.0, c_action=0.0, c_bootstrap=0.0, beta=0.0, epsilon_start=0.01, epsilon_end=0.01,
    epsilon_decay_steps=0.0, reward_subtract=0.0, final_bias=0.0, lr=5e-4, beta_mmc=0.0,
    beta_dora=0.0, beta_dora_action=0.0, beta_rnd=0.0, beta_bsp=0.0,
)


def make_hparams(**values: float) -> HParams:
    """One run's hyperparameters: ``BASE_HPARAMS`` updated with ``values``."""
    unknown = set(values) - set(HPARAM_FIELDS)
    if unknown:
        raise ValueError(f"unknown hyperparameters {sorted(unknown)}; known: {', '.join(HPARAM_FIELDS)}")
    merged = {**BASE_HPARAMS, **values}
    return HParams(**{k: jnp.float32(v) for k, v in merged.items()})


def stack_hparams(settings: list[HParams]) -> HParams:
    """Stacks per-run hyperparameters along a new leading runs axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *settings)


def hparams_to_dict(hparams: HParams) -> dict[str, list[float] | float]:
    """JSON-friendly form of (possibly stacked) hyperparameters."""
    return {k: np.asarray(getattr(hparams, k)).tolist() for k in HPARAM_FIELDS}


ENV_DEFAULTS: dict[str, dict] = {
    "chain": dict(
        env="chain", network="mlp", total_steps=100_000, log_every=1_000, buffer_size=10_000,
        batch_size=64, n_step=1, train_every=1, target_update=200, simhash_bits=32,
    ),
    "maze": dict(
        env="maze", network="maze_conv", total_steps=1_000_000, log_every=10_000, buffer_size=250_000,
        batch_size=64, n_step=3, train_every=1, target_update=1_000, simhash_bits=128,
    ),
    "montezuma": dict(
        env="montezuma", network="nature", total_steps=12_500_000, log_every=50_000, buffer_size=1_000_000,
        batch_size=32, n_step=3, train_every=4, target_update=8_000,
    ),
}

# Epsilon of every method except epsilon-greedy DQN (paper appendix).
ENV_EPSILON = {
    "chain": dict(epsilon_start=0.01, epsilon_end=0.01, epsilon_decay_steps=0.0),
    "maze": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=50_000.0),
    "montezuma": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=1_000_000.0),
    "gymnax": dict(epsilon_start=0.01, epsilon_end=0.01, epsilon_decay_steps=0.0),
}


# A gymnax environment gets the chain's training settings (1-step targets, replay 10k, ...), an
# automatically chosen network and 32-bit SimHash codes; override any of them.
GYMNAX_DEFAULTS = dict(
    network="auto", total_steps=100_000, log_every=1_000, buffer_size=10_000, batch_size=64, n_step=1,
    train_every=1, target_update=200, simhash_bits=32,
)


def env_family(env: str) -> str:
    """``chain``, ``maze`` or ``gymnax`` (for ``gymnax:NAME``)."""
    return "gymnax" if env.startswith("gymnax:") else env


def static_for_env(env: str, **overrides) -> StaticConfig:
    """The paper's static configuration for ``env`` with ``overrides`` applied, validated."""
    if env.startswith("gymnax:"):
        defaults = {**GYMNAX_DEFAULTS, "env": env}
    elif env in ENV_DEFAULTS:
        defaults = ENV_DEFAULTS[env]
    else:
        raise ValueError(f"unknown env {env!r}: use chain, maze, montezuma or gymnax:NAME")
    config = StaticConfig(**{**defaults, **overrides})
    config.validate()
    return config
