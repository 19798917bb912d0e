"""The paper's methods: each a named composition of exploration parts, and their best settings per environment.

``METHODS`` is the registry; :func:`register_method` adds one (with any new parts it brings), so a new
method is one module of parts plus one line of registration. The settings are one table (``SETTINGS``): the
paper's best hyperparameters (appendix, "The best hyperparameters we found were") per settings family, ``chain``,
``maze`` and ``montezuma`` (a gymnax environment uses the chain's, an Atari game Montezuma's; see
:mod:`opiq_jax.registry.environments`), then per method. Where the paper gives no best value for a variant the nearest
one it gives is used, and ``SETTING_NOTES`` says so.

Methods whose parts all share programs (pseudocounts, optimism, or none) train side by side in one
compiled program, as a vmap over runs; a method with a part of its own (DORA, RND, BSP) compiles into a
program of its own (:func:`program_name`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping

from ..common.config import Option, hparam_options
from ..parts import BUILTIN_PARTS, PARTS, Part, canonical_order, check_part, get_part, register_part, switched_off
from .environments import environment_spec


@dataclasses.dataclass(frozen=True)
class Method:
    """A named composition of exploration parts and the paper's best settings of their numbers."""

    name: str
    parts: tuple[str | Part, ...]
    """Its exploration parts (names of registered parts, or part objects, which registration registers)."""
    description: str
    settings: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """A method of your own: per settings family (``chain``, ``maze``, ``montezuma``), the hyperparameters it sets,
    added to :data:`SETTINGS` when it is registered. The paper's methods keep theirs in that one table."""
    paper_name: str = ""
    """Its name in the paper's text and figures (``DQN + PC``), for legends and tables; empty: its ``name``."""

    @property
    def part_names(self) -> tuple[str, ...]:
        return canonical_order([p.name if isinstance(p, Part) else p for p in self.parts])

    def options(self) -> dict[str, Option]:
        """Every hyperparameter a run of this method has: the trainer's and its parts'."""
        return hparam_options(get_part(name) for name in self.part_names)


METHODS: dict[str, Method] = {}
"""Every registered method by name, in registration order."""

SETTINGS: dict[str, dict[str, Mapping[str, float]]] = {}
"""The best settings per settings family, then per method: a method missing from a family is not offered on its
environments. A new family (a new kind of environment) is one :func:`register_settings` call."""

ORIGINS: dict[str, str] = {}
"""The module that registered each method that is not the paper's (``__main__`` for a script or notebook): a
results folder names it, so that whoever loads the folder in another process knows what to import."""


def register_method(method: Method, origin: str | None = None) -> Method:
    """Adds ``method`` and any part objects it holds to the registries, all or nothing: every check runs before
    anything is registered, so a failed call leaves the registries as they were and the corrected call can follow.
    Registering a method again (a notebook cell run twice) replaces it; the paper's methods cannot be replaced.
    ``origin``: the module registering it (default: the caller's)."""
    check_method(method)
    for part in method.parts:
        if isinstance(part, Part):
            register_part(part)
    METHODS[method.name] = method
    if method.name not in PAPER_METHODS:  # a method of yours registered again keeps only the settings it now gives
        for table in SETTINGS.values():
            table.pop(method.name, None)
    for family, values in method.settings.items():
        SETTINGS.setdefault(family, {})[method.name] = dict(values)
    if method.name not in PAPER_METHODS:
        ORIGINS[method.name] = origin or sys._getframe(1).f_globals.get("__name__", "__main__")
    return method


def check_method(method: Method) -> None:
    """:func:`register_method`'s checks, registering nothing: a one-line ``ValueError`` for the first problem."""
    if not isinstance(method, Method):
        raise ValueError(f"register_method takes a Method, got {method!r}")
    if not method.name.isidentifier():
        raise ValueError(f"a method needs a name that is a Python identifier, got {method.name!r}")
    if method.name in PAPER_METHODS and METHODS.get(method.name) not in (None, method):
        raise ValueError(f"{method.name} is one of the paper's methods and cannot be replaced: choose another name")
    parts = []
    for part in method.parts:
        if isinstance(part, Part):
            check_part(part)
            parts.append(part)
        else:
            parts.append(get_part(part))
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"method {method.name} names a part twice: {', '.join(names)}")
    try:
        hparam_options(parts)  # two new parts of one method that declare one hyperparameter differently
    except ValueError as e:
        raise ValueError(f"method {method.name}: {e}") from None
    for family, values in method.settings.items():
        check_settings(method.name, parts, family, values)


def check_settings(method: str, parts: list[Part], family: str, values: Mapping[str, float]) -> None:
    """A one-line ``ValueError`` when ``values`` are not settings of a method with ``parts`` on ``family``."""
    options = hparam_options(parts)
    unknown = sorted(set(values) - set(options))
    if unknown:
        raise ValueError(f"method {method} sets {', '.join(unknown)} on {family}, which none of its parts "
                         f"({', '.join(p.name for p in parts) or 'none'}) declares")
    for name, value in values.items():
        options[name].check(value, f"method {method}: {family} {name}")


def register_settings(family: str, table: Mapping[str, Mapping[str, float]]) -> None:
    """Adds (or replaces) the best settings of registered methods on a settings family (``{method: {name: value}}``),
    all or nothing: every entry is checked first. A family new to :data:`SETTINGS` is a new kind of environment."""
    for method, values in table.items():
        check_settings(method, [get_part(name) for name in get_method(method).part_names], family, values)
    SETTINGS.setdefault(family, {}).update({method: dict(values) for method, values in table.items()})


def origins(methods: Iterable[str]) -> list[str]:
    """The modules that registered ``methods`` (none for the paper's), for a results folder's ``plugins``."""
    return sorted({ORIGINS[m] for m in methods if m in ORIGINS})


def run_hparams_off(program: tuple[str, ...], method: str) -> dict[str, float]:
    """What a run of ``method`` in a program of the parts ``program`` takes for the parts it does not name:
    their ``off`` values, so that a part's defaults never switch it on for another method. A run labelled with a
    name that is no registered method (an experiment built by hand, its hyperparameters given) takes none."""
    return switched_off(program, get_method(method).part_names) if method in METHODS else {}


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


def method_program(method: str) -> str:
    """The program ``method``'s runs train in: the one rule that groups methods into programs."""
    return program_name(get_method(method).part_names)


def program_parts(methods: Iterable[str]) -> tuple[str, ...]:
    """The parts of a program training ``methods``, in registry order: the union of theirs, and the paper's parts
    that share programs (pseudocounts, optimism: no state, switched off by their ``off`` values).

    Keeping the count-based parts in every program makes every program count, so any method's runs can be read
    against their counts, and keeps every program on one arithmetic: without them XLA fuses the target's
    ``partial + discount * max(q)`` differently, which moves it by one ulp, and training amplifies that. A part of
    your own joins only the programs of methods that name it, so registering one changes no other experiment.
    """
    shared = {name for name, part in PARTS.items() if part.shares_program and name in BUILTIN_PARTS}
    return canonical_order(shared | {part for m in methods for part in get_method(m).part_names})


_PAPER_METHODS = (
    Method("dqn", (), "epsilon-greedy DQN (epsilon decayed linearly from 1 to 0.01)", paper_name="ε-greedy DQN"),
    Method("dqn_pc", ("pseudocounts",), "DQN + pseudocount intrinsic reward beta/sqrt(N)", paper_name="DQN + PC"),
    Method("dqn_rsubtract", (), "DQN with a constant subtracted from every environment reward",
           paper_name="DQN R-Subtract"),
    Method("dqn_rsubtract_pc", ("pseudocounts",), "DQN R-Subtract + pseudocounts", paper_name="DQN R-Subtract + PC"),
    Method("dqn_bias", (), "DQN with the output layer's bias initialised optimistically", paper_name="DQN Bias"),
    Method("dqn_bias_pc", ("pseudocounts",), "DQN Bias + pseudocounts", paper_name="DQN Bias + PC"),
    Method("dqn_dora", ("dora",), "DQN + DORA: generalised counts from an E-value network as intrinsic reward",
           paper_name="DQN + DORA"),
    Method("dqn_dora_oa", ("dora",), "DQN + DORA OA: DORA's bonus also added to Q for action selection",
           paper_name="DQN + DORA OA"),
    Method("dqn_rnd", ("rnd",), "DQN + RND: random network distillation error as intrinsic reward",
           paper_name="DQN + RND"),
    Method("bsp", ("bsp",), "Bootstrapped DQN with randomised prior functions (K heads, a head per episode)",
           paper_name="BSP"),
    Method("opiq", ("pseudocounts", "optimism"), "OPIQ: Q+ for action selection and bootstrapping, plus pseudocounts",
           paper_name="OPIQ"),
    Method("opiq_no_ob", ("pseudocounts", "optimism"), "OPIQ without optimistic bootstrapping (Q+ for acting only)",
           paper_name="OPIQ w/o OB"),
    Method("opiq_no_pc", ("optimism",), "OPIQ without pseudocount intrinsic reward", paper_name="OPIQ w/o PC"),
)

PAPER_METHODS = frozenset(m.name for m in _PAPER_METHODS)
"""The paper's methods: they cannot be replaced by a registration."""

# The paper's best settings (appendix), one table per settings family: a method missing from a family is not
# offered there. The epsilon schedule of every method but epsilon-greedy DQN is the environment's (environments.py).
_PAPER_SETTINGS: dict[str, dict[str, dict[str, float]]] = {
    "chain": dict(
        dqn=dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100.0),
        dqn_pc=dict(beta=0.1),
        dqn_rsubtract=dict(reward_subtract=1.0),
        dqn_rsubtract_pc=dict(reward_subtract=1.0, beta=0.1),
        dqn_bias=dict(final_bias=1.0),
        dqn_bias_pc=dict(final_bias=1.0, beta=0.1),
        dqn_dora=dict(beta_dora=0.01),
        dqn_dora_oa=dict(beta_dora=0.01, beta_dora_action=0.1),
        dqn_rnd=dict(beta_rnd=10.0),
        bsp=dict(beta_bsp=100.0),
        opiq=dict(m=0.5, c_action=1.0, c_bootstrap=1.0, beta=0.1),
        opiq_no_ob=dict(m=2.0, c_action=10.0, beta=0.1),
        opiq_no_pc=dict(m=2.0, c_action=10.0, c_bootstrap=10.0),
    ),
    "maze": dict(
        dqn=dict(epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=100_000.0),
        dqn_pc=dict(beta=0.1),
        dqn_rsubtract=dict(reward_subtract=0.1),
        dqn_rsubtract_pc=dict(reward_subtract=0.1, beta=0.1),
        dqn_bias=dict(final_bias=1.0),
        dqn_bias_pc=dict(final_bias=1.0, beta=0.1),
        dqn_dora=dict(beta_dora=0.01),
        dqn_dora_oa=dict(beta_dora=0.01, beta_dora_action=0.1),
        dqn_rnd=dict(beta_rnd=10.0),
        bsp=dict(beta_bsp=100.0),
        opiq=dict(m=2.0, c_action=100.0, c_bootstrap=0.01, beta=0.1),
        opiq_no_ob=dict(m=2.0, c_action=100.0, beta=0.1),
        opiq_no_pc=dict(m=2.0, c_action=100.0, c_bootstrap=0.1),
    ),
    "montezuma": dict(
        dqn=dict(),
        dqn_pc=dict(beta=0.01, beta_mmc=0.01),
        dqn_rnd=dict(beta_rnd=0.1, beta_mmc=0.01),
        bsp=dict(beta_bsp=0.1, beta_mmc=0.025),
        opiq=dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta=0.1, beta_mmc=0.01),
        opiq_no_ob=dict(m=2.0, c_action=0.1, beta=0.1, beta_mmc=0.005),
        opiq_no_pc=dict(m=2.0, c_action=0.1, c_bootstrap=0.01, beta_mmc=0.01),
    ),
}

SETTING_NOTES: dict[tuple[str, str], str] = {
    ("montezuma", "dqn"): "the paper gives no epsilon-greedy DQN setting there; it uses the common epsilon schedule "
                          "(1 to 0.01 over 1M steps) without MMC.",
    ("maze", "dqn_rsubtract"): "the paper runs R-Subtract and Bias only with PC; the variants without PC use the same "
                               "constants.",
    ("chain", "dqn_rsubtract_pc"): "the paper's best R-Subtract setting (subtract 1) is without PC; the +PC variant "
                                   "uses the same constant with beta 0.1.",
    ("chain", "dqn_bias"): "the paper's best Bias setting (bias 1) is with PC; the variant without PC uses bias 1 too.",
    ("chain", "dqn_dora"): "the paper gives DORA, RND and BSP settings for the maze only; the chain uses the maze's.",
    ("montezuma", "opiq_no_pc"): "the paper gives no best setting for OPIQ w/o PC there; it uses OPIQ's without beta.",
    ("montezuma", "opiq"): "the paper's list omits OPIQ's beta there (its grid is 0.01, 0.1); beta 0.1 is the authors' "
                           "corrected README command (oxwhirl/opiq b7df513, 2020-08-04: their first command's 0.01 "
                           "was reported to find no reward in 8.5M steps).",
    ("montezuma", "opiq_no_ob"): "the paper's list omits OPIQ w/o OB's beta there too; it takes OPIQ's corrected 0.1, "
                                 "as OPIQ w/o PC takes OPIQ's other settings.",
}
"""Where a setting of the table is a choice of ours rather than the paper's: ``(family, method)`` and why."""

for _method in _PAPER_METHODS:
    register_method(_method)
for _family, _table in _PAPER_SETTINGS.items():
    register_settings(_family, _table)


# ------------------------------------------------------------------------------------ settings per environment


def method_settings(env: str, method: str) -> dict[str, float]:
    """The hyperparameters ``method`` sets on ``env``: the environment's defaults and the method's paper settings."""
    spec, entry = environment_spec(env), get_method(method)
    table = SETTINGS.get(spec.settings, {})
    if method not in table:
        offered = [m for m in METHODS if m in table]
        raise ValueError(f"{method} is not available on {env}: use one of {', '.join(offered)}")
    options = entry.options()
    defaults = {k: v for k, v in spec.hparams.items() if k in options}
    return {**defaults, **table[method]}


def method_hparams(env: str, method: str, **overrides: float) -> dict[str, float]:
    """Every hyperparameter of ``method`` on ``env``: its options' defaults, the environment's and the
    method's paper settings, then ``overrides`` (each must be one of the method's options)."""
    options = get_method(method).options()
    unknown = sorted(set(overrides) - set(options))
    if unknown:
        raise ValueError(f"{method} has no hyperparameter {', '.join(unknown)}; "
                         f"its hyperparameters: {', '.join(options)}")
    for name, value in overrides.items():
        options[name].check(value)
    values = {name: option.default for name, option in options.items()}
    return {**values, **method_settings(env, method), **overrides}
