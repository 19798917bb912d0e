"""Exploration parts: what an exploration method adds to the DQN agent, one module per idea.

A part is an object with a name, the hyperparameters it brings (:class:`~opiq_jax.common.config.Option`)
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
every environment step (DORA keeps a ring of recent steps); ``resolved`` says what its ``auto`` options
chose. Every hook has a default that does nothing, so a part defines only what it changes.

Every hook gets the ``agent`` (:class:`AgentView`, which the trainer's ``Agent`` is: the static configuration, the
networks, the optimiser, the stepping) and the run's state ``run``: ``run.hparams`` holds
the run's numbers, ``run.parts[part.name]`` the part's own state. Hooks run per run, under the
trainer's ``vmap`` over runs.

A method is a named composition of parts plus its paper settings (:mod:`opiq_jax.registry.methods`). Parts
that keep no state and declare the numbers that switch them off (``shares_program`` and ``off``) let
methods with and without them share one compiled program: a run of a method that does not name such a
part gets its ``off`` values, whatever its defaults. The others (networks of their own) compile into a
program of their own. Register a new part with :func:`register_part` (a method's registration does it
for its parts).

What every hook returns is checked against its shape when the program is traced
(:func:`checked_output`, :func:`checked_state`): a wrong one stops with one line naming the part and the
hook (:class:`~opiq_jax.common.errors.PartError`) instead of broadcasting silently.
"""

from . import bsp, dora, optimism, pseudocounts, rnd
from .base import (
    PARTS, AgentView, Example, Part, canonical_order, check_part, checked_metrics, checked_output, checked_state,
    definition, get_part, register_part, switched_off,
)

BUILTIN_PARTS = ("pseudocounts", "optimism", "dora", "rnd", "bsp")
"""The paper's parts, in the order the trainer calls them (registered first, when this package is imported)."""

for _module in (pseudocounts, optimism, dora, rnd, bsp):
    register_part(_module.PART)

__all__ = ["BUILTIN_PARTS", "AgentView", "Example", "PARTS", "Part", "canonical_order", "check_part", "checked_metrics",
           "checked_output", "checked_state", "definition", "get_part", "register_part", "switched_off"]
