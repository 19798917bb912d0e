"""The interface of an exploration part and its registry: what the trainer calls, what it checks, where parts live.

:mod:`opiq_jax.parts` documents the hooks; the paper's parts are its other modules. This module imports nothing
above the configuration: a part sees the agent through :class:`AgentView` (what the trainer's ``Agent`` offers
it) and the run's state as plain data (:mod:`opiq_jax.primitives.state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import jax
import numpy as np

from ..common.config import CORE_HPARAMS, Option, Owner, StaticConfig, register_static_options, static_options_problem
from ..common.errors import PartError

if TYPE_CHECKING:  # types only: a part reads the run's state and the stepping's records, never the trainer
    from ..contracts import Batch, Stepping, Replay, StepRecord
    from ..primitives.state import RunState


class AgentView(Protocol):
    """What a part's hooks read of the agent they are given (the trainer's ``Agent`` is one): the configuration,
    the Q-network and its optimiser, the stepping and its replay, and helpers to build and apply networks
    like the Q-network's. A part that needs more than this reaches past its interface."""

    static: StaticConfig
    stepping: Stepping
    replay: Replay
    num_actions: int
    num_heads: int
    network_name: str
    q_network: Any  # a flax module
    optimiser: Any  # an optax GradientTransformation

    def make_network(self, num_outputs: int) -> Any:
        """A network of the Q-network's architecture with ``num_outputs`` outputs."""

    def apply_flat(self, network: Any, params: Any, obs: jax.Array, lead_ndim: int) -> jax.Array:
        """``network`` on observations with ``lead_ndim`` leading axes."""

    def sgd_step(self, params: Any, opt_state: Any, grads: Any, lr: jax.Array) -> tuple[Any, Any]:
        """One clipped RMSProp step of ``params`` with the run's learning rate."""

    def init_key(self, run_key: jax.Array, name: str) -> jax.Array:
        """A key of its own for the part state ``name`` of a run."""


class Example(NamedTuple):
    """What a part's ``init`` may shape its state after: one observation and one replay item of the run and, on a
    stepping with a cell table, every cell's observation (BSP tabulates its prior over them)."""

    obs: jax.Array  # [*obs_shape]: an observation as the Q-network reads it
    item: Any  # one item of the replay (the compact replay's Transition), or None
    cell_obs: jax.Array | None = None  # [num_cells, *obs_shape]: every cell's observation, where the stepping has a
    # cell table (chain, maze), else None


class Part:
    """The interface of an exploration part (see the module docstring); every hook defaults to no effect."""

    name: ClassVar[str] = ""
    """Its name in methods, results folders and ``run.parts``."""
    hparams: ClassVar[tuple[Option, ...]] = ()
    """The hyperparameters it brings (numbers, traced: a sweep varies them inside one program)."""
    static_options: ClassVar[tuple[Option, ...]] = ()
    """The static options it brings (shapes and structure: changing one compiles again). Registering the part adds
    them to the command line and the API by their names (``--rnd-outputs``, ``rnd_outputs=``); they read as the
    part's group, without its prefix: ``agent.static.part("rnd").outputs``
    (:func:`~opiq_jax.common.config.short_name`)."""
    random_streams: ClassVar[Mapping[str, int | None]] = {}
    """The keys its ``init`` draws (``agent.init_key(run_key, name)``), by name. A new part leaves the value None (its
    key is derived from the name); the paper's parts give the slot their key had before parts declared their
    streams, so that a run reproduces its earlier results bit for bit."""
    uses_counts: ClassVar[bool] = False
    """Whether it reads the agent's visit counts (the trainer then keeps the count-min sketch)."""
    shares_program: ClassVar[bool] = False
    """No state of its own, and switched off by its ``off`` values: methods without it can run in its program."""
    off: ClassVar[Mapping[str, float]] = {}
    """Where ``shares_program`` is set: values of its hyperparameters that switch it off. A run of a method that
    does not name the part gets them (not the defaults), so the part does nothing there."""
    keeps_steps: ClassVar[bool] = False
    """Whether it keeps replay items of its own (:class:`Example`'s ``item``, ``StepRecord.item``) and reads them
    back through ``agent.replay.steps`` and ``obs_of``: only a replay that keeps whole steps serves it (the compact
    one; the frame ring stores single frames)."""
    metric_names: ClassVar[tuple[str, ...]] = ()
    """The metrics its :meth:`metrics` returns, in the order they are written."""

    def static_problems(self, static: StaticConfig, name: Mapping[str, str]) -> list[str]:
        """What is wrong with its static options given the others (``name``: how messages name each option)."""
        del static, name
        return []

    def heads(self, static: StaticConfig) -> int:
        """How many Q-heads the network needs (1: a plain Q-network)."""
        del static
        return 1

    def init(self, agent: AgentView, run_key: jax.Array, example: Example) -> Any:
        """The part's per-run state (draw keys with ``agent.init_key(run_key, name)``); ``None`` if it has none."""
        del agent, run_key, example
        return None

    def head_values(self, agent: AgentView, run: RunState, q: jax.Array, obs: jax.Array,
                    cells: jax.Array | None) -> jax.Array:
        """``[B, K, A]``: what each head acts and bootstraps on, from the network's ``q`` on ``obs``; ``cells``
        (int32[B]) are the cell ids of ``obs`` where the caller knows them (the loss's and the targets' states on a
        stepping with a cell table), else None."""
        del agent, run, obs, cells
        return q

    def resolved(self, agent: AgentView) -> Mapping[str, str]:
        """What its ``auto`` options chose for ``agent``, in words, for ``config.json``'s ``resolved`` (default:
        none)."""
        del agent
        return {}

    def action_bonus(self, agent: AgentView, run: RunState, obs: jax.Array,
                     counts: jax.Array | None) -> jax.Array | None:
        """``[E, A]`` added to the action values when acting in ``obs`` (``[E, *obs_shape]``); ``counts`` is
        ``N(s, .)`` (``[E, A]``, when a part of the program uses counts)."""
        del agent, run, obs, counts
        return None

    def after_step(self, agent: AgentView, run: RunState, step: StepRecord) -> Any:
        """The part's state after an environment step of the run (default: unchanged)."""
        del agent, step
        return run.parts.get(self.name)

    def intrinsic_reward(self, agent: AgentView, run: RunState, batch: Batch) -> jax.Array | None:
        """``[B, n]`` added to the reward of every sampled step, recomputed at training time."""
        del agent, run, batch
        return None

    def bootstrap_bonus(self, agent: AgentView, run: RunState, batch: Batch) -> jax.Array | None:
        """``[B, A]`` added to the target network's values at the bootstrap state before the max."""
        del agent, run, batch
        return None

    def scale_gradients(self, agent: AgentView, grads: Any) -> Any:
        """The Q-network's gradients as the part wants them applied."""
        del agent
        return grads

    def update(self, agent: AgentView, run: RunState, batch: Batch, key: jax.Array) -> Any:
        """The part's state after one learning step on ``batch`` (default: unchanged)."""
        del agent, batch, key
        return run.parts.get(self.name)

    def metrics(self, agent: AgentView, run: RunState) -> dict[str, jax.Array]:
        """Scalars named by ``metric_names``, once per chunk."""
        del agent, run
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


PARTS: dict[str, Part] = {}
"""Every registered part by name, in registration order (the order of the trainer's calls)."""


def definition(part: Part) -> str:
    """Where a part's class is defined (``module.Class``): two objects of one definition are one part, so a
    notebook cell that registers it again, or a module imported twice, is no conflict."""
    kind = type(part)
    return f"{kind.__module__}.{kind.__qualname__}"


def check_part(part: Part) -> None:
    """A one-line ``ValueError`` when ``part`` cannot be registered: a bad name, a name taken by another
    definition, or a part that shares programs without ``off`` values that switch it off."""
    if not isinstance(part, Part):
        raise ValueError(f"a part is an instance of a subclass of opiq_jax.Part, got {part!r}")
    if not part.name or not part.name.isidentifier():
        raise ValueError(f"a part needs a name that is a Python identifier, got {part.name!r}")
    taken = PARTS.get(part.name)
    if taken is not None and taken is not part and definition(taken) != definition(part):
        raise ValueError(f"another part is already registered as {part.name!r} ({definition(taken)}): choose "
                         "another name")
    if part.shares_program:
        options = {o.name: o for o in part.hparams}
        unknown = sorted(set(part.off) - set(options))
        if not part.off or unknown:
            raise ValueError(
                f"part {part.name!r} shares programs, so it must declare off: the values of its hyperparameters that "
                "switch it off for the methods that do not name it" + (
                    f" (off names {', '.join(unknown)}, which it does not declare)" if unknown else
                    " (or set shares_program = False: it then compiles into a program of its own)"))
        for name, value in part.off.items():
            options[name].check(value, f"part {part.name!r}: off {name}")
    for option_ in part.hparams:
        problem = shadowed_hparam(part, option_)
        if problem:
            raise ValueError(problem)
    for stream in part.random_streams:
        holder = next((p for p in PARTS.values() if stream in p.random_streams and p.name != part.name), None)
        if holder is not None:
            raise ValueError(f"part {part.name!r}: random stream {stream!r} is part {holder.name!r}'s: choose another "
                             "name")
    problem = static_options_problem(Owner("part", part.name), part.static_options)
    if problem:
        raise ValueError(problem)
    for option_ in part.static_options:
        option_.check(option_.default, f"part {part.name!r}: static option {option_.name}")


def shadowed_hparam(part: Part, option_: Option) -> str | None:
    """Why ``part`` may not declare ``option_``: the trainer's own hyperparameter of that name, or another registered
    part's declared differently (every program's hyperparameters share one namespace, the command line's)."""
    core = next((o for o in CORE_HPARAMS if o.name == option_.name), None)
    if core is not None:
        return (f"part {part.name!r} declares hyperparameter {option_.name!r}, which is the trainer's own: choose "
                "another name")
    holder = next((p for p in PARTS.values() if p.name != part.name
                   and any(o.name == option_.name and o != option_ for o in p.hparams)), None)
    if holder is not None:
        return (f"part {part.name!r} declares hyperparameter {option_.name!r}, which part {holder.name!r} declares "
                "differently: choose another name")
    return None


def register_part(part: Part) -> Part:
    """Adds ``part`` to :data:`PARTS` (:func:`check_part` first). Another object of the same definition replaces the
    registered one (a notebook cell run again); a part of another definition under the name is refused."""
    check_part(part)
    overrides = type(part).static_problems is not Part.static_problems
    register_static_options(Owner("part", part.name), part.static_options, part.static_problems if overrides else None)
    PARTS[part.name] = part
    return part


def switched_off(part_names: tuple[str, ...], named: tuple[str, ...]) -> dict[str, float]:
    """The ``off`` values of the parts of a program (``part_names``) that a run's method does not name."""
    return {k: float(v) for name in part_names if name not in named for k, v in get_part(name).off.items()}


# ------------------------------------------------------------------------------------ checking what hooks return


def checked_output(part: Part, hook: str, value: Any, shape: tuple[int, ...], meaning: str) -> Any:
    """``value`` (None passes) if it has ``shape``; else a :class:`PartError` naming the part and the hook. Runs when
    the program is traced: under the trainer's vmap over runs, shapes are one run's."""
    if value is None:
        return None
    got = tuple(np.shape(value))
    if got != tuple(shape):
        raise PartError(f"part {part.name!r}: {hook} returned shape {list(got)}, expected {list(shape)} ({meaning})")
    return value


def checked_state(part: Part, hook: str, before: Any, after: Any) -> Any:
    """``after`` if it has the structure, shapes and dtypes of ``before`` (a part's state must keep them from
    step to step: it is carried through the compiled loop); else a :class:`PartError`."""
    def layout(tree):
        return jax.tree.structure(tree), [(np.shape(x), getattr(x, "dtype", None) or np.asarray(x).dtype)
                                          for x in jax.tree.leaves(tree)]

    if layout(before) != layout(after):
        raise PartError(f"part {part.name!r}: {hook} returned a tree of another structure, shape or dtype than the one "
                        f"it was given: {layout(after)} for {layout(before)}")
    return after


def checked_metrics(part: Part, values: Any) -> dict:
    """``values`` if it maps exactly the part's ``metric_names`` to scalars; else a :class:`PartError`."""
    if not isinstance(values, Mapping) or set(values) != set(part.metric_names):
        names = sorted(values) if isinstance(values, Mapping) else values
        raise PartError(f"part {part.name!r}: metrics returned {names!r}, expected a dict of its metric_names "
                        f"{list(part.metric_names)}")
    for name, value in values.items():
        checked_output(part, f"metrics[{name!r}]", value, (), "one number per run")
    return dict(values)


def get_part(name: str) -> Part:
    """The registered part ``name``, or a one-line error listing the registered ones."""
    if name not in PARTS:
        raise ValueError(f"unknown exploration part {name!r}; registered: {', '.join(PARTS)}")
    return PARTS[name]


def canonical_order(names: set[str] | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``names`` in registration order (the order in which the trainer calls the parts)."""
    for name in names:
        get_part(name)
    return tuple(name for name in PARTS if name in set(names))
