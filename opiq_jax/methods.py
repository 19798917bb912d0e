"""The paper's methods: each a named composition of exploration parts plus its best settings per environment.

``METHODS`` is the registry; :func:`register_method` adds one (with any new parts it brings), so a new
method is one module of parts plus one line of registration. A method's settings are the paper's best
hyperparameters (appendix, "The best hyperparameters we found were") per settings family: ``chain``,
``maze`` and ``montezuma`` (a gymnax environment uses the chain's; see :mod:`opiq_jax.environments`).
Where the paper gives no best value for a variant the nearest one it gives is used, and ``notes`` says so.

Methods whose parts all share programs (pseudocounts, optimism, or none) train side by side in one
compiled program, as a vmap over runs; a method with a part of its own (DORA, RND, BSP) compiles into a
program of its own (:func:`program_name`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from .config import Option, hparam_options
from .parts import PARTS, Part, canonical_order, get_part, register_part


@dataclasses.dataclass(frozen=True)
class Method:
    """A named composition of exploration parts and the paper's best settings of their numbers."""

    name: str
    parts: tuple[str | Part, ...]
    """Its exploration parts (names of registered parts, or part objects, which registration registers)."""
    description: str
    settings: Mapping[str, Mapping[str, float]]
    """Per settings family (``chain``, ``maze``, ``montezuma``): the hyperparameters it sets; a family
    missing here means the method is not offered on those environments."""
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Where a setting is a choice of ours rather than the paper's, per family."""

    @property
    def part_names(self) -> tuple[str, ...]:
        return canonical_order([p.name if isinstance(p, Part) else p for p in self.parts])

    def options(self) -> dict[str, Option]:
        """Every hyperparameter a run of this method has: the trainer's and its parts'."""
        return hparam_options(get_part(name) for name in self.part_names)


METHODS: dict[str, Method] = {}
"""Every registered method by name, in registration order."""


def register_method(method: Method) -> Method:
    """Adds ``method`` (and any part objects it holds) to the registries; its settings are checked now."""
    if not method.name.isidentifier():
        raise ValueError(f"a method needs a name that is a Python identifier, got {method.name!r}")
    for part in method.parts:
        if isinstance(part, Part):
            register_part(part)
    options = method.options()
    for family, values in method.settings.items():
        unknown = sorted(set(values) - set(options))
        if unknown:
            raise ValueError(f"method {method.name} sets {', '.join(unknown)} on {family}, which none of its parts "
                             f"({', '.join(method.part_names) or 'none'}) declares")
        for name, value in values.items():
            options[name].check(value)
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    """The registered method ``name``, or a one-line error listing the registered ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}: use one of {', '.join(METHODS)}")
    return METHODS[name]


def method_names() -> tuple[str, ...]:
    """The registered methods, in registration order (for help texts and errors)."""
    return tuple(METHODS)


def program_name(part_names: Iterable[str]) -> str:
    """The name of the program (and results subfolder) that methods with these parts train in: ``plain`` when
    all their parts share programs, else the parts of their own joined (``dora``, ``rnd``, ``bsp``)."""
    own = [name for name in canonical_order(list(part_names)) if not get_part(name).shares_program]
    return "-".join(own) or "plain"


def program_parts(methods: Iterable[str]) -> tuple[str, ...]:
    """The parts of a program training ``methods``, in registry order: the union of theirs, and every part that
    shares programs (pseudocounts, optimism: no state, switched off by their defaults).

    Keeping the count-based parts in every program makes every program count, so any method's runs can be read
    against their counts, and keeps every program on one arithmetic: without them XLA fuses the target's
    ``partial + discount * max(q)`` differently, which moves it by one ulp, and training amplifies that.
    """
    shared = {name for name, part in PARTS.items() if part.shares_program}
    return canonical_order(shared | {part for m in methods for part in get_method(m).part_names})


# The paper's epsilon schedule of every method but epsilon-greedy DQN is the environment's (environments.py).
_PAPER_METHODS = (
    Method("dqn", (), "epsilon-greedy DQN (epsilon decayed linearly from 1 to 0.01)", {
        "chain": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100.0),
        "maze": dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100_000.0),
        "montezuma": dict(),
    }, notes={"montezuma": "the paper gives no epsilon-greedy DQN setting there; it uses the common epsilon "
                           "schedule (1 to 0.01 over 1M steps) without MMC."}),
    Method("dqn_pc", ("pseudocounts",), "DQN + pseudocount intrinsic reward beta/sqrt(N)", {
        "chain": dict(beta=0.1), "maze": dict(beta=0.1), "montezuma": dict(beta=0.01, beta_mmc=0.01),
    }),
    Method("dqn_rsubtract", (), "DQN with a constant subtracted from every environment reward", {
        "chain": dict(reward_subtract=1.0), "maze": dict(reward_subtract=0.1),
    }, notes={"maze": "the paper runs R-Subtract and Bias only with PC; the variants without PC use the same constants."}),
    Method("dqn_rsubtract_pc", ("pseudocounts",), "DQN R-Subtract + pseudocounts", {
        "chain": dict(reward_subtract=1.0, beta=0.1), "maze": dict(reward_subtract=0.1, beta=0.1),
    }, notes={"chain": "the paper's best R-Subtract setting (subtract 1) is without PC; the +PC variant uses the "
                       "same constant with beta 0.1."}),
    Method("dqn_bias", (), "DQN with the output layer's bias initialised optimistically", {
        "chain": dict(final_bias=1.0), "maze": dict(final_bias=1.0),
    }, notes={"chain": "the paper's best Bias setting (bias 1) is with PC; the variant without PC uses bias 1 too."}),
    Method("dqn_bias_pc", ("pseudocounts",), "DQN Bias + pseudocounts", {
        "chain": dict(final_bias=1.0, beta=0.1), "maze": dict(final_bias=1.0, beta=0.1),
    }),
    Method("dqn_dora", ("dora",), "DQN + DORA: generalised counts from an E-value network as intrinsic reward", {
        "chain": dict(beta_dora=0.01), "maze": dict(beta_dora=0.01),
    }, notes={"chain": "the paper gives DORA, RND and BSP settings for the maze only; the chain uses the maze's."}),
    Method("dqn_dora_oa", ("dora",), "DQN + DORA OA: DORA's bonus also added to Q for action selection", {
        "chain": dict(beta_dora=0.01, beta_dora_action=0.1), "maze": dict(beta_dora=0.01, beta_dora_action=0.1),
    }),
    Method("dqn_rnd", ("rnd",), "DQN + RND: random network distillation error as intrinsic reward", {
        "chain": dict(beta_rnd=10.0), "maze": dict(beta_rnd=10.0), "montezuma": dict(beta_rnd=0.1, beta_mmc=0.01),
    }),
    Method("bsp", ("bsp",), "Bootstrapped DQN with randomised prior functions (K heads, a head per episode)", {
        "chain": dict(beta_bsp=100.0), "maze": dict(beta_bsp=100.0), "montezuma": dict(beta_bsp=0.1, beta_mmc=0.025),
    }),
    Method("opiq", ("pseudocounts", "optimism"), "OPIQ: Q+ for action selection and bootstrapping, plus pseudocounts", {
        "chain": dict(m=0.5, c_action=1.0, c_bootstrap=1.0, beta=0.1),
        "maze": dict(m=2.0, c_action=100.0, c_bootstrap=0.01, beta=0.1),
        "montezuma": dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta=0.01, beta_mmc=0.01),
    }),
    Method("opiq_no_ob", ("pseudocounts", "optimism"), "OPIQ without optimistic bootstrapping (Q+ for acting only)", {
        "chain": dict(m=2.0, c_action=10.0, beta=0.1),
        "maze": dict(m=2.0, c_action=100.0, beta=0.1),
        "montezuma": dict(m=2.0, c_action=0.1, beta=0.01, beta_mmc=0.005),
    }),
    Method("opiq_no_pc", ("optimism",), "OPIQ without pseudocount intrinsic reward", {
        "chain": dict(m=2.0, c_action=10.0, c_bootstrap=10.0),
        "maze": dict(m=2.0, c_action=100.0, c_bootstrap=0.1),
        "montezuma": dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta_mmc=0.01),
    }, notes={"montezuma": "the paper gives no best setting for OPIQ w/o PC there; it uses OPIQ's without beta."}),
)

for _method in _PAPER_METHODS:
    register_method(_method)
