"""Exploration parts: what an exploration method adds to the DQN agent, one module per idea.

A part is an object with a name, the hyperparameters it brings (:class:`~opiq_jax.config.Option`)
and a few pure functions over its own per-run state. The trainer calls every part of its program at
the same six places and never names a method:

==================  ===========================================================================
``init``            its per-run state (networks, optimiser, a buffer of its own); ``None`` if none
``action_bonus``    added to the action values when acting (``[E, A]``; OPIQ's C_action/(N+1)^M)
``intrinsic_reward`` added to every sampled step's reward (``[B, n]``; beta/sqrt(N), RND's error)
``bootstrap_bonus`` added to the target network's values at the bootstrap state (``[B, A]``)
``update``          its own learning step on the minibatch the Q-network learns from
``metrics``         numbers it reports once per chunk (named in ``metric_names``)
==================  ===========================================================================

and, for the rarer parts that change the Q-network itself (BSP): ``heads`` (how many Q-heads),
``head_values`` (what each head acts and bootstraps on) and ``scale_gradients``; ``after_step`` sees
every environment step (DORA keeps a ring of recent steps). Every hook has a default that does
nothing, so a part defines only what it changes.

Every hook gets the ``agent`` (:class:`~opiq_jax.trainer.Agent`: the static configuration, the
networks, the optimiser, the observation path) and the run's state ``run``: ``run.hparams`` holds
the run's numbers, ``run.parts[part.name]`` the part's own state. Hooks run per run, under the
trainer's ``vmap`` over runs.

A method is a named composition of parts plus its paper settings (:mod:`opiq_jax.methods`). Parts
whose numbers switch them off at their defaults and that keep no state (``shares_program``) let
methods with and without them share one compiled program; the others (networks of their own)
compile into a program of their own. Register a new part with :func:`register_part` (a method's
registration does it for its parts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax

from ..config import Option, StaticConfig

if TYPE_CHECKING:  # the trainer imports the parts, not the other way round
    from ..paths import Batch, StepRecord
    from ..trainer import Agent, RunState


class Example(NamedTuple):
    """What a part's ``init`` may shape its state after: one observation and one replay item of the run."""

    obs: jax.Array  # [*obs_shape]: an observation as the Q-network reads it
    item: Any  # one item of the observation path's replay (the compact path's Transition), or None


class Part:
    """The interface of an exploration part (see the module docstring); every hook defaults to no effect."""

    name: ClassVar[str] = ""
    """Its name in methods, results folders and ``run.parts``."""
    hparams: ClassVar[tuple[Option, ...]] = ()
    """The hyperparameters it brings; each default must switch the part off where ``shares_program`` is set."""
    uses_counts: ClassVar[bool] = False
    """Whether it reads the agent's visit counts (the trainer then keeps the count-min sketch)."""
    shares_program: ClassVar[bool] = False
    """No state of its own and switched off by its defaults: methods without it can run in its program."""
    paths: ClassVar[tuple[str, ...]] = ("compact", "pool")
    """The observation paths it works with (``compact``: in-program environments; ``pool``: EnvPool frames)."""
    metric_names: ClassVar[tuple[str, ...]] = ()
    """The metrics its :meth:`metrics` returns, in the order they are written."""

    def heads(self, static: StaticConfig) -> int:
        """How many Q-heads the network needs (1: a plain Q-network)."""
        del static
        return 1

    def init(self, agent: Agent, run_key: jax.Array, example: Example) -> Any:
        """The part's per-run state (draw keys with ``agent.init_key(run_key, name)``); ``None`` if it has none."""
        del agent, run_key, example
        return None

    def head_values(self, agent: Agent, run: RunState, q: jax.Array, obs: jax.Array) -> jax.Array:
        """``[B, K, A]``: what each head acts and bootstraps on, from the network's ``q`` on ``obs``."""
        del agent, run, obs
        return q

    def action_bonus(self, agent: Agent, run: RunState, obs: jax.Array, counts: jax.Array | None) -> jax.Array | None:
        """``[E, A]`` added to the action values when acting in ``obs`` (``[E, *obs_shape]``); ``counts`` is
        ``N(s, .)`` (``[E, A]``, when a part of the program uses counts)."""
        del agent, run, obs, counts
        return None

    def after_step(self, agent: Agent, run: RunState, step: StepRecord) -> Any:
        """The part's state after an environment step of the run (default: unchanged)."""
        del agent, step
        return run.parts.get(self.name)

    def intrinsic_reward(self, agent: Agent, run: RunState, batch: Batch) -> jax.Array | None:
        """``[B, n]`` added to the reward of every sampled step, recomputed at training time."""
        del agent, run, batch
        return None

    def bootstrap_bonus(self, agent: Agent, run: RunState, batch: Batch) -> jax.Array | None:
        """``[B, A]`` added to the target network's values at the bootstrap state before the max."""
        del agent, run, batch
        return None

    def scale_gradients(self, agent: Agent, grads: Any) -> Any:
        """The Q-network's gradients as the part wants them applied."""
        del agent
        return grads

    def update(self, agent: Agent, run: RunState, batch: Batch, key: jax.Array) -> Any:
        """The part's state after one learning step on ``batch`` (default: unchanged)."""
        del agent, batch, key
        return run.parts.get(self.name)

    def metrics(self, agent: Agent, run: RunState) -> dict[str, jax.Array]:
        """Scalars named by ``metric_names``, once per chunk."""
        del agent, run
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


PARTS: dict[str, Part] = {}
"""Every registered part by name, in registration order (the order of the trainer's calls)."""


def register_part(part: Part) -> Part:
    """Adds ``part`` to :data:`PARTS` (again with the same object is a no-op; another object of that name is refused)."""
    if not part.name or not part.name.isidentifier():
        raise ValueError(f"a part needs a name that is a Python identifier, got {part.name!r}")
    if part.name in PARTS and PARTS[part.name] is not part:
        raise ValueError(f"another part is already registered as {part.name!r}")
    PARTS[part.name] = part
    return part


def get_part(name: str) -> Part:
    """The registered part ``name``, or a one-line error listing the registered ones."""
    _register_builtin_parts()
    if name not in PARTS:
        raise ValueError(f"unknown exploration part {name!r}; registered: {', '.join(PARTS)}")
    return PARTS[name]


def canonical_order(names: set[str] | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``names`` in registration order (the order in which the trainer calls the parts)."""
    _register_builtin_parts()
    for name in names:
        get_part(name)
    return tuple(name for name in PARTS if name in set(names))


def _register_builtin_parts() -> None:
    """The paper's parts, registered on first use (their modules import this one)."""
    if "pseudocounts" in PARTS:
        return
    from . import bsp, dora, optimism, pseudocounts, rnd

    for module in (pseudocounts, optimism, dora, rnd, bsp):
        register_part(module.PART)


__all__ = ["Example", "PARTS", "Part", "canonical_order", "get_part", "register_part"]
