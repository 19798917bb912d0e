"""The environment registry: a name, how to build the environment, and the paper's settings for it.

An environment's spec composes the three contracts of :mod:`opiq_jax.contracts`: its ``stepping`` class, and its
``replay`` and ``counting`` where they are not the stepping's own. Two stepping classes ship:

* :class:`~opiq_jax.contracts.compact.CompactStepping` (the default): a
  :class:`~opiq_jax.envs.base.CompactEnvironment` stepped inside the compiled program, one per run under ``vmap``
  (the chain, the maze, any gymnax environment, one of your own);
* :class:`~opiq_jax.contracts.pool.PoolStepping`: an EnvPool pool of all runs' emulators stepped through EnvPool's XLA
  interface (Montezuma's Revenge, any Atari game), with a replay of single frames; its ``frames`` say what the
  frames mean to the agent (what is counted, the reward learned from, whether the game has rooms).

:func:`register_environment` adds one; ``gymnax:NAME`` names any registered gymnax environment and
``atari:NAME`` any EnvPool Atari game (``atari:Venture``). An environment's ``defaults`` are the paper's static
settings for it (network, steps, buffer, ...), its ``hparams`` the epsilon schedule that every method but
epsilon-greedy DQN uses there, and ``settings`` the family whose per-method best settings apply (a gymnax
environment has none of its own and takes the chain's; an Atari game takes Montezuma's, the paper's only
Atari setting).

An environment declares what is its own, as a part does: its ``static_options`` (the chain's ``chain_length``,
a gymnax environment's ``env_kwargs``: options of the command line and the API, refused on another environment),
its ``label`` (how the plan and the figures name it) and its ``check`` (what the plan verifies before anything
is built: EnvPool installed, the game known, a gymnax environment built once). No module but this one names an
environment to decide something.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .. import parts  # noqa: F401 (registers the parts' static options, which environments may set: RND's outputs)
from ..common.config import STATIC_OPTIONS, EnvKwargs, Option, Owner, StaticConfig, register_static_options
from ..common.errors import UsageError
from ..envs import Maze, RandomisedChain
from ..envs.atari import AtariPool, atari_game, check_game, import_envpool
from ..envs.maze import MAZE_SIZE
from ..envs.minigrid import check_task, make_minigrid
from ..envs import craftax, minatar
from ..envs.montezuma import MontezumaPool
from ..contracts import Counting, Stepping, Replay
from ..contracts.compact import CompactStepping
from ..contracts.pool import ATARI_FRAMES, NUM_ROOMS, FrameFeatures, PoolStepping


DEFAULT_MEMORY_HEADROOM = 3.0
"""A run's device memory as a multiple of its state's bytes, unless its environment declares its own: the
donated state, the chunk's temporaries and a checkpoint copy on the host."""


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """One registered environment (module docstring)."""

    name: str
    description: str
    make: Callable[..., Any]
    """``make(static) -> CompactEnvironment``, or, for a stepping started by the host (a pool),
    ``make(static, num_envs, seed) -> pool``."""
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The paper's :class:`StaticConfig` settings for this environment."""
    hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Defaults of the trainer's hyperparameters here (the epsilon schedule of every method but DQN)."""
    settings: str = "chain"
    """Whose per-method best settings apply (``chain``, ``maze``, ``montezuma``)."""
    stepping: type[Stepping] = CompactStepping
    """How its environments step and what the networks see: a :class:`~opiq_jax.contracts.Stepping` class, built with
    what ``make`` returns (the pool's: :class:`~opiq_jax.contracts.pool.PoolStepping`)."""
    frames: FrameFeatures | None = None
    """A pool: what its frames mean to the agent (default: an Atari game without rooms)."""
    static_options: tuple[Option, ...] = ()
    """Options of this environment alone, read as its group without its prefix (``chain_length`` as
    ``static.environment("chain").length``); set on another environment, they are refused."""
    label: Callable[[Mapping[str, Any]], str] | None = None
    """How the plan and the figures name it, from a configuration's ``static`` section (default: its name)."""
    check: Callable[[StaticConfig], None] | None = None
    """What the plan verifies before anything is built; raises a one-line ``ValueError`` or ``ImportError``."""
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    """Device memory a run needs, as a multiple of its state's bytes: the donated state, the chunk's temporaries
    and a checkpoint's copy (the plan checks every program against it before anything starts)."""
    figures: tuple[str, ...] = ("train_return", "test_return", "states_visited", "max_return")
    """The metrics ``plot`` draws for this environment by default, a figure each (those its runs recorded)."""
    headline_metric: str = "test_return"
    """The metric a sweep ranks its settings by unless its preset names one."""
    replay: type[Replay] | None = None
    """The replay its runs keep: a :class:`~opiq_jax.contracts.Replay` class, built with the environment's stepping
    (default: the stepping's own, the compact ring or the frame rings)."""
    counting: type[Counting] | None = None
    """What counts its states: a :class:`~opiq_jax.contracts.Counting` class, built with the environment's stepping
    (default: the stepping's own count-min sketch of SimHash codes, exact cell ids or the frame feature)."""

    def declares(self, option_name: str) -> bool:
        """Whether ``option_name`` is one of this environment's own static options."""
        return any(o.name == option_name for o in self.static_options)


ENVIRONMENTS: dict[str, EnvironmentSpec] = {}
"""Every registered environment by name (``gymnax:NAME`` is resolved by :func:`environment_spec`)."""

ENVIRONMENT_ORIGINS: dict[str, str] = {}
"""The module that registered each environment that is not the paper's (see ``methods.ORIGINS``)."""

PAPER_ENVIRONMENTS = ("chain", "maze", "montezuma")


def declare_options(spec: EnvironmentSpec) -> None:
    """Registers ``spec``'s own static options beside the trainer's and the parts' (a one-line ``ValueError`` for a
    name another declaration holds differently)."""
    register_static_options(Owner("environment", spec.name), spec.static_options)


def register_environment(spec: Any, origin: str | None = None, *, params: Any = None,
                         name: str | None = None) -> EnvironmentSpec:
    """Adds ``spec`` to :data:`ENVIRONMENTS` (replacing an earlier one of that name, but not the paper's); ``origin``:
    the module registering it (default: the caller's). ``spec`` is an :class:`EnvironmentSpec`, or an environment
    object with gymnax's API (with its ``params``, default its ``default_params``; ``name``, default its class's):
    :func:`adapted_environment` makes the spec."""
    if not isinstance(spec, EnvironmentSpec):
        spec = adapted_environment(spec, params, name=name)
    if not spec.name or ":" in spec.name:
        raise ValueError(f"an environment's name must be non-empty without ':', got {spec.name!r}")
    if spec.name in PAPER_ENVIRONMENTS and ENVIRONMENTS.get(spec.name) not in (None, spec):
        raise ValueError(f"{spec.name} is one of the paper's environments and cannot be replaced: choose another name")
    declare_options(spec)
    unknown = sorted(set(spec.defaults) - set(STATIC_OPTIONS))
    if unknown:
        raise ValueError(f"environment {spec.name}: unknown static settings {', '.join(unknown)}")
    ENVIRONMENTS[spec.name] = spec
    if spec.name not in PAPER_ENVIRONMENTS:
        ENVIRONMENT_ORIGINS[spec.name] = origin or sys._getframe(1).f_globals.get("__name__", "__main__")
    return spec


def adapted_environment(env: Any, params: Any = None, *, name: str | None = None) -> EnvironmentSpec:
    """The spec of an environment object with gymnax's API (``reset``, ``step`` of 5 or 6 values, a discrete
    ``action_space``, ``default_params``), adapted once here (a one-line ``ValueError`` if it does not speak the API),
    with a gymnax environment's settings: the chain's, the network chosen by the observation's shape."""
    from ..envs.gymnax_adapter import GymnaxAdapter  # imports gymnax only when asked

    adapter = GymnaxAdapter(env, params, name=name)
    return dataclasses.replace(
        GYMNAX, name=adapter.name, description=f"{adapter.name}: an environment object with gymnax's API",
        make=lambda static: adapter, static_options=(), label=None, check=None)


def environment_names() -> str:
    """The registered names for messages, with the gymnax pattern."""
    return ", ".join([*ENVIRONMENTS, "gymnax:NAME", "atari:NAME", "minigrid:NAME", "minatar:NAME", "craftax:NAME"])


class UnknownEnvironment(ValueError):
    """No environment of that name is registered, nor is it ``gymnax:NAME`` or ``atari:NAME``."""


def environment_spec(name: str) -> EnvironmentSpec:
    """The spec of ``name`` (``gymnax:NAME`` builds one for that gymnax environment), or a one-line error
    (:class:`UnknownEnvironment`, or an Atari game's own ``ValueError``)."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    if name.startswith("gymnax:") and len(name) > len("gymnax:"):
        return dataclasses.replace(GYMNAX, name=name)
    if name.startswith("atari:") and len(name) > len("atari:"):
        return atari_spec(name)
    family = next((spec for spec in FAMILIES if name.startswith(spec.name.removesuffix("NAME"))), None)
    if family is not None and len(name) > len(family.name) - len("NAME"):
        return dataclasses.replace(family, name=name)
    raise UnknownEnvironment(f"unknown env {name!r}: use {environment_names()}")


def contracts_of(spec: EnvironmentSpec, static: StaticConfig | None = None
                 ) -> tuple[type[Stepping], type[Replay], type[Counting]]:
    """The classes an environment's runs are made of: its spec's stepping, and the replay and the counting its spec
    names, else the stepping's own; with ``static``, the stepping's learned count where ``count_features`` is
    ``cfn``."""
    stepping = spec.stepping
    counting = spec.counting or stepping.counting_class
    if static is not None and static.count_features == "cfn":
        if spec.counting is not None or stepping.learned_counting_class is None:
            raise UsageError(f"count_features cfn: {static.env} counts with {counting.__name__}, which has no "
                             "learned count")
        counting = stepping.learned_counting_class
    return stepping, spec.replay or stepping.replay_class, counting


def started_by_host(env: str) -> bool:
    """Whether ``env``'s environments are started on the host and handed to the program (a pool of emulators:
    Montezuma, ``atari:NAME``), as its stepping declares."""
    return contracts_of(environment_spec(env))[0].started_by_host


def envs_per_run(env: str, chosen: int) -> int:
    """How many environments each run of ``env`` acts in at once when the ``envs_per_run`` option is ``chosen``, as
    its stepping decides (one for a stepping inside the program, whatever the option): the one source of that
    number for the host, the memory check and the sweeps."""
    return contracts_of(environment_spec(env))[0].environments_per_run(chosen)


def contract_options() -> dict[str, str]:
    """Every static option that some contract alone reads (``options``), with where it applies (``serves``): of the
    steppings, replays and counters of every registered environment."""
    specs = (*ENVIRONMENTS.values(), GYMNAX, *FAMILIES, ATARI)
    return {name: contract.serves for spec in specs for contract in contracts_of(spec) for name in contract.options}


def refused_contract_option(env: str, overrides: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first option of ``overrides`` set to another value than its default that a contract reads but none of
    ``env``'s does, with where it applies (None: there is none): it would change nothing there."""
    accepted = {name for contract in contracts_of(environment_spec(env)) for name in contract.options}
    return next(((name, serves) for name, serves in contract_options().items() if name not in accepted
                 and name in overrides and overrides[name] != STATIC_OPTIONS[name].default), None)


def owners_of(option_name: str, env: str) -> tuple[str, ...]:
    """The environments whose own option ``option_name`` is, where ``env`` is not one of them (empty: ``env`` may
    set it, or it is nobody's own), read from the registered specs. ``gymnax:NAME`` stands for every gymnax
    environment, and each family's pattern (``craftax:NAME``) for its own."""
    if environment_spec(env).declares(option_name):
        return ()
    return tuple(spec.name for spec in (*ENVIRONMENTS.values(), GYMNAX, *FAMILIES) if spec.declares(option_name))


def environment_label(static: Mapping[str, Any]) -> str:
    """The environment of a configuration's ``static`` section in words (``chain of 100 states``, ``maze 24x24``,
    ``Montezuma's Revenge``): its spec's label, else its name (an environment no module here registers)."""
    name = str(static.get("env", "?"))
    try:
        spec = environment_spec(name)
    except ValueError:
        return name
    return spec.label(static) if spec.label is not None else name


def check_environment_static(static: StaticConfig) -> None:
    """The environment's own check of ``static`` before anything is built (:attr:`EnvironmentSpec.check`), its
    failure one :class:`UsageError` line."""
    spec = environment_spec(static.env)
    if spec.check is None:
        return
    try:
        spec.check(static)
    except (ValueError, ImportError, TypeError) as e:
        raise UsageError((str(e).splitlines() or [type(e).__name__])[0]) from None


def static_for_env(env: str, **overrides) -> StaticConfig:
    """The paper's static configuration for ``env`` with ``overrides`` applied, validated."""
    spec = environment_spec(env)
    config = StaticConfig(**{**spec.defaults, "env": env, **overrides})
    config.validate()
    return config


def _make_chain(static: StaticConfig):
    return RandomisedChain(length=static.environment("chain").length)


def _make_maze(static: StaticConfig):
    return Maze()


def _make_gymnax(static: StaticConfig):
    from ..envs.gymnax_adapter import make_gymnax  # imports gymnax's registry only when asked

    return make_gymnax(static.env.removeprefix("gymnax:"), **dict(static.environment(static.env).env_kwargs))


def _check_gymnax(static: StaticConfig) -> None:
    """Builds the environment and its stepping once: a missing package or an unknown name fails in the plan."""
    CompactStepping(_make_gymnax(static), static)


def _gymnax_label(static: Mapping[str, Any]) -> str:
    kwargs = ", ".join(f"{k}={v}" for k, v in static.get("env_kwargs") or ())
    name = str(static["env"]).removeprefix("gymnax:")
    return f"{name} ({kwargs})" if kwargs else name


def _check_pool(static: StaticConfig) -> None:
    """EnvPool installed, and (``atari:NAME``) the game among its own."""
    import_envpool(static.env)
    if static.count_features == "exact":  # a frame has no cell id
        raise UsageError(f"count_features exact: {static.env} counts the frame feature (the default) or a learned "
                         "count of the frame (cfn); it has no exact cell ids")
    if static.env.startswith("atari:"):
        check_game(atari_game(static.env.removeprefix("atari:")), static.env)


def _make_montezuma(static: StaticConfig, num_envs: int, seed: int, **overrides):
    return MontezumaPool(num_envs=num_envs, seed=seed, **overrides)


def _make_atari(static: StaticConfig, num_envs: int, seed: int, **overrides):
    return AtariPool(atari_game(static.env.removeprefix("atari:")), num_envs, seed, static.env, **overrides)


def atari_spec(name: str) -> EnvironmentSpec:
    """The spec of ``atari:GAME``: the game through EnvPool with Montezuma's settings (the paper's only Atari ones),
    rooms where :mod:`~opiq_jax.envs.atari` knows where the game keeps them. A one-line error for a bad name."""
    game = atari_game(name.removeprefix("atari:"))
    frames = dataclasses.replace(ATARI_FRAMES, num_rooms=NUM_ROOMS if game.has_rooms else 0)
    return dataclasses.replace(ATARI, name=name, frames=frames)


MAZE_DEFAULTS = dict(network="maze_conv", total_steps=1_000_000, log_every=10_000, buffer_size=250_000, batch_size=64,
                     n_step=3, train_every=1, target_update=1_000, simhash_bits=128)
MAZE_EXPLORATION = dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=50_000.0)
"""The maze's static settings and epsilon schedule (the paper's appendix), which MiniGrid's tasks share."""

# The chain's training settings (1-step targets, replay 10k, ...) with an automatically chosen network and
# 32-bit SimHash codes; override any of them.
GYMNAX = EnvironmentSpec(
    "gymnax:NAME", "any registered gymnax environment with discrete actions (the chain's settings)", _make_gymnax,
    defaults=dict(network="auto", total_steps=100_000, log_every=1_000, buffer_size=10_000, batch_size=64, n_step=1,
                  train_every=1, target_update=200, simhash_bits=32),
    hparams=dict(epsilon_start=0.01, epsilon_end=0.01, epsilon_decay_steps=0.0), settings="chain",
    static_options=(Option("env_kwargs", (), "gymnax only: KEY=VALUE constructor arguments (size=20) or EnvParams "
                           "fields (max_steps_in_episode=500); values are read as Python literals.", cli="env_arg",
                           type=EnvKwargs),),
    label=_gymnax_label,
    check=_check_gymnax,
)
declare_options(GYMNAX)  # every gymnax:NAME is resolved from this one spec, never registered by name


def _make_minigrid(static: StaticConfig):
    return make_minigrid(static.env.removeprefix("minigrid:"))  # imports xminigrid (and gymnax) only now


def _check_minigrid(static: StaticConfig) -> None:
    """xminigrid installed and the task among its own, before anything is built."""
    check_task(static.env.removeprefix("minigrid:"))


# MiniGrid's tasks take the maze's settings, the paper's other gridworld with a sparse reward found by exploring:
# 3-step targets, a 250k replay, epsilon from 1 over 50k steps, 128-bit SimHash codes, 1M steps; the network is
# chosen by the view's shape (the MLP for its 7x7).
MINIGRID = EnvironmentSpec(
    "minigrid:NAME", "MiniGrid's tasks in JAX through xminigrid (pip install -e '.[minigrid]')", _make_minigrid,
    defaults={**MAZE_DEFAULTS, "network": "auto"},
    hparams=MAZE_EXPLORATION, settings="maze",
    label=lambda static: str(static["env"]).removeprefix("minigrid:"), check=_check_minigrid,
)
declare_options(MINIGRID)  # every minigrid:NAME is resolved from this one spec


def _make_minatar(static: StaticConfig):
    return minatar.make_minatar(static.env.removeprefix("minatar:"))


# Young and Tian's (2019) DQN on MinAtar where an option holds it: their network, a 100k replay, batch 32, 1-step
# targets, an update every step, the target copied every 1,000, epsilon from 1 to 0.1 over the first 100k steps.
# 128-bit SimHash codes, as the maze's, for the 10x10 binary grids; the maze's per-method settings (the paper's
# other sparse, discrete world) until a sweep here chooses MinAtar's own.
MINATAR = EnvironmentSpec(
    "minatar:NAME", "the MinAtar games in JAX, from gymnax (minatar:Breakout)", _make_minatar,
    defaults=dict(network="minatar_conv", total_steps=1_000_000, log_every=10_000, buffer_size=100_000, batch_size=32,
                  n_step=1, train_every=1, target_update=1_000, simhash_bits=128),
    hparams=dict(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100_000.0), settings="maze",
    label=lambda static: f"MinAtar {str(static['env']).removeprefix('minatar:')}",
    check=lambda static: minatar.check_game(static.env.removeprefix("minatar:")),
)
declare_options(MINATAR)


def _make_craftax(static: StaticConfig):  # imports craftax only now
    return craftax.make_craftax(static.env.removeprefix("craftax:"), static.environment(static.env).episode_steps)


def _check_craftax(static: StaticConfig) -> None:
    """The game one of craftax's symbolic two and craftax installed, before anything is built."""
    craftax.check_task(static.env.removeprefix("craftax:"))
    craftax.import_craftax_env()


# Craftax takes the maze's settings (3-step targets, epsilon from 1 over 50k steps, 128-bit SimHash codes, 1M steps)
# with a 100k replay: each step stores two float32 observations of 1,345 (Classic) or 8,268 numbers, 1.1 GB or
# 6.6 GB a run at 100k; the MLP reads the vector.
CRAFTAX = EnvironmentSpec(
    "craftax:NAME", "Craftax's symbolic games in JAX (craftax:Classic, craftax:Craftax; pip install -e "
    "'.[craftax]')", _make_craftax,
    defaults={**MAZE_DEFAULTS, "network": "mlp", "buffer_size": 100_000},
    hparams=MAZE_EXPLORATION, settings="maze",
    static_options=(Option("craftax_episode_steps", craftax.EPISODE_STEPS, "craftax only: an episode's step limit "
                           "(craftax's max_timesteps), where it is cut short and bootstrapped; each greedy test "
                           "episode runs this many steps.", minimum=1, type=int),),
    label=lambda static: str(static["env"]).removeprefix("craftax:").replace("Classic", "Craftax-Classic"),
    check=_check_craftax,
)
declare_options(CRAFTAX)

FAMILIES = (MINIGRID, MINATAR, CRAFTAX)
"""The environment families named ``PREFIX:NAME`` and resolved from one spec each (gymnax's and Atari's have
lookups of their own)."""


register_environment(EnvironmentSpec(
    "chain", "the randomised chain (100 states, horizon 109)", _make_chain,
    defaults=dict(network="mlp", total_steps=100_000, log_every=1_000, buffer_size=10_000, batch_size=64, n_step=1,
                  train_every=1, target_update=200, simhash_bits=32),
    hparams=dict(epsilon_start=0.01, epsilon_end=0.01, epsilon_decay_steps=0.0), settings="chain",
    static_options=(Option("chain_length", 100, "Chain states (the chain only; its horizon is chain_length + 9).",
                           minimum=2, type=int),),
    label=lambda static: f"chain of {static.get('chain_length', '?')} states",
))
register_environment(EnvironmentSpec(
    "maze", "the 24x24 maze with randomised actions (horizon 250)", _make_maze,
    defaults=MAZE_DEFAULTS, hparams=MAZE_EXPLORATION, settings="maze",
    label=lambda static: f"maze {MAZE_SIZE}x{MAZE_SIZE}",
))
# The paper's learning rate (5e-4) and the authors' initialisation (their networks keep PyTorch's default draw),
# as every environment has by default. Measured at 5e-4 to 2M steps (docs/results/montezuma-defaults): with the
# authors' initialisation no OPIQ run's |Q| passed the largest return the clipped rewards allow (0 of 4), with flax's
# 1 of 4 did (3 of 8 with the 32-environment runs of docs/results/montezuma-divergence); too few runs to call either
# safer (Fisher p = 0.49), so both follow the paper.
register_environment(EnvironmentSpec(
    "montezuma", "Montezuma's Revenge through EnvPool (pip install -e '.[atari]')", _make_montezuma,
    defaults=dict(network="nature", total_steps=12_500_000, log_every=50_000, buffer_size=1_000_000, batch_size=32,
                  n_step=3, train_every=4, target_update=8_000, rnd_outputs=512),
    hparams=dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=1_000_000.0),
    settings="montezuma",
    stepping=PoolStepping, frames=dataclasses.replace(ATARI_FRAMES, num_rooms=NUM_ROOMS),
    label=lambda static: "Montezuma's Revenge", check=_check_pool,
    # the 1M-frame replay is most of a run's state, and a pool's chunks make few temporaries beside it
    memory_headroom=1.2,
    # no greedy test episodes on a pool (every step is the emulators'), so the training return is the headline
    figures=("train_return", "max_return", "rooms_visited"), headline_metric="train_return",
))

# Any other Atari game: Montezuma's settings (the paper's only Atari ones) around the game's pool.
ATARI = dataclasses.replace(
    ENVIRONMENTS["montezuma"], name="atari:NAME", make=_make_atari, frames=ATARI_FRAMES, label=None,
    description="any EnvPool Atari game with the paper's Montezuma settings (pip install -e '.[atari]')")
declare_options(ATARI)  # every atari:NAME is resolved from this one spec: static.environment("atari:Venture") reads it


__all__ = ["ATARI", "ENVIRONMENTS", "EnvironmentSpec", "adapted_environment", "atari_spec", "environment_label",
           "environment_spec", "register_environment", "static_for_env"]
