"""Configuration, split in two as the design asks, each option declared once.

* :class:`StaticConfig` holds shapes and structure (network, buffer size, batch, n-step, counting
  features, the exploration parts of the program, ...). It is closed over at trace time: changing it
  means compiling again.
* Hyperparameters are numbers (M, C_action, C_bootstrap, beta, the epsilon schedule, ...): a dict of
  float32 arrays with a leading runs axis, so one compiled program trains many settings side by side.
  The trainer's own hyperparameters are declared here (:data:`CORE_HPARAMS`); every exploration part
  declares its own (``Part.hparams``), so a part brings its numbers with it.

Every option, static or numeric, is one :class:`Option`: its name, type, default, allowed range and one
line of documentation. The command line (``opiq-jax train``, ``sweep``, ``bench``), the sweep presets and
the Python API all take their options, help and checks from these declarations; a check's message names
the option as the user wrote it (``--steps must be >= 1`` on the command line, ``steps must be >= 1`` in
Python). Per-environment defaults are the environment registry's (:mod:`opiq_jax.registry.environments`).

The static options that an exploration part (``Part.static_options``) or an environment
(``EnvironmentSpec.static_options``) declares are set by their public names, flat, as every other option is
(``--rnd-outputs``, ``rnd_outputs=512``, the keys of a results folder's ``config.json``), and read as their owner's
group: ``static.part("rnd").outputs``, ``static.part("bsp").prior_values``, ``static.environment("chain").length``,
``static.environment(static.env).env_kwargs`` (``gymnax:NAME``'s). Within a group an option reads by its
:func:`short_name`: its public name without the owner's prefix (``rnd_``, ``chain_``), where it has it. Code that
holds an option's public name reads it with ``static.value(name)``, whoever declares it.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from .errors import UsageError, option_name


def number(value: float) -> str:
    """A bound or value for a message: whole numbers in full (2**30 is 1,073,741,824, not 1.07374e+09)."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) >= 1e6 else f"{value:g}"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option, declared once: name, type, default, allowed range and a line of documentation."""

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
    """The name users write, when it is not the field's (``steps`` for ``total_steps``)."""
    type: Any = float
    """The Python type of a value."""
    environment_default: bool = False
    """Whether each environment sets its own default (see ``opiq_jax.registry.environments``)."""

    @property
    def value_type(self) -> Any:
        """The Python type of a value as a parser takes it: the choices as a ``Literal``, else ``type``."""
        return Literal[self.choices] if self.choices is not None else self.type  # type: ignore[valid-type]

    @property
    def public_name(self) -> str:
        """The option's name in Python calls and presets' messages (``steps``)."""
        return self.cli or self.name

    def label(self, written: str | None = None) -> str:
        """How a message names the option: as ``written`` by the user where given (a preset's key), else marked,
        to read ``--steps`` on the command line and ``steps`` in Python (:func:`~opiq_jax.common.errors.worded`)."""
        return written or option_name(self.public_name)

    def problem(self, value: Any, written: str | None = None) -> str | None:
        """What is wrong with ``value`` for this option, in one line naming the option as the user writes it."""
        label = self.label(written)
        if self.choices is not None:
            return None if value in self.choices else (
                f"{label} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return None
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):  # nan, or inf (an lr of inf: NaNs)
            return f"{label} must be a finite number, got {value}"
        if self.minimum is not None and (value <= self.minimum if self.open_minimum else value < self.minimum):
            return f"{label} must be {'>' if self.open_minimum else '>='} {self.minimum:g}, got {value:g}"
        if self.maximum is not None and value > self.maximum:
            if self.minimum is not None and not self.open_minimum:
                return f"{label} must lie in [{number(self.minimum)}, {number(self.maximum)}], got {number(value)}"
            return f"{label} must be <= {number(self.maximum)}, got {number(value)}"
        return None

    def check(self, value: Any, written: str | None = None) -> None:
        """Raises :class:`UsageError` with :meth:`problem`'s message when ``value`` is not allowed."""
        message = self.problem(value, written)
        if message:
            raise UsageError(message)

    def help(self, defaults: str | None = None) -> str:
        """The option's help text: its line, its range and its default (or the environments')."""
        text = self.doc
        if self.choices is None and (self.minimum is not None or self.maximum is not None):
            low = "" if self.minimum is None else f"{'>' if self.open_minimum else '>='} {self.minimum:g}"
            high = "" if self.maximum is None else f"<= {self.maximum:g}"
            text += f" Range: {', '.join(x for x in (low, high) if x)}."
        return text + f" Default: {defaults or _shown(self.default)}."


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value)) or "none"
    return (f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000
            else str(value))


def option(default: Any, doc: str, **kw: Any) -> Any:
    """A :class:`StaticConfig` field declared with its :class:`Option` (the field's name and type fill it in)."""
    return dataclasses.field(default=default, metadata={"option": Option("", default, doc, **kw)})


Hidden = tuple[int, ...]
EnvKwargs = tuple[tuple[str, object], ...]
DeclaredSettings = tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class Execution:
    """How a program is executed, apart from what the agent computes: its precision, how the Q-network's weights
    are stored, the MLP's backward pass, the maze torso's implementation, where the targets' bootstrap values come
    from, and whether a pool's emulators step while the agent learns. Each mode is a speed choice with its cost
    measured in docs/performance.md; the defaults in float32 are the paper's arithmetic. The options keep their
    own names on the command line, in the API and in ``config.json`` (``precision``, not ``execution.precision``)."""

    precision: str = option("float32", "The Q-network's precision: float32 (the paper) or bfloat16 (float32 weights "
                            "and optimiser, bfloat16 forward and backward passes and target network).",
                            choices=("float32", "bfloat16"))
    weight_storage: str = option("float32", "What an update of the bfloat16 Q-network reads and writes: float32 "
                                 "weights and RMSProp accumulator, or packed (each weight as its bfloat16 copy plus 8 "
                                 "bits, a bfloat16 accumulator, both rounded stochastically: an update reads and "
                                 "writes 10 bytes of state per weight instead of 18). precision=bfloat16 only.",
                                 choices=("float32", "packed"))
    mlp_backward: str = option("auto", "The MLP's backward pass under packed storage: XLA's, or pallas (each hidden "
                               "weight gradient written by a Pallas kernel with its sum of squares, so the clip's "
                               "norm does not read it again; the output layer's input gradient as outer products), "
                               "or auto (pallas on GPUs). The one-headed MLP only: BSP and the conv nets keep XLA's.",
                               choices=("auto", "xla", "pallas"))
    maze_torso: str = option("auto", "The maze network's convolutions: XLA's patch GEMMs, the Pallas kernels, or auto "
                             "(Pallas on GPUs in bfloat16).", choices=("auto", "xla", "pallas"))
    target_values: str = option("auto", "The target network's values for bootstrapping: a table of every cell filled "
                                "at each copy (chain, maze), the network on every batch, or auto (the table in "
                                "bfloat16).", choices=("auto", "table", "network"))
    overlap: bool = option(True, "Pool environments (Montezuma): learn while the emulators step (the update sees the "
                           "replay one step late); off: step, store, then train.")


@dataclasses.dataclass(frozen=True, init=False)
class StaticConfig:
    """Shapes and structure of one compiled experiment (everything that is not a traced number)."""

    env: str = option("chain", "Environment: chain, maze, montezuma (EnvPool; pip install -e '.[atari]'), atari:NAME "
                      "for any EnvPool Atari game with the paper's Montezuma settings (atari:Venture), gymnax:NAME "
                      "for any gymnax environment, or a registered name.")
    parts: tuple[str, ...] = option((), "The exploration parts of the program: the union of its methods' parts, set "
                                    "by the runner (choose methods instead).")
    network: str = option("mlp", "Q-network: mlp, maze_conv, minatar_conv (Young and Tian's), nature, or auto (mlp "
                          "for vectors, maze_conv for images).",
                          choices=("mlp", "maze_conv", "minatar_conv", "nature", "auto"), environment_default=True)
    hidden: Hidden = option((256, 256), "Hidden layer widths of the MLP.")
    total_steps: int = option(100_000, "Environment steps per run.", minimum=1, cli="steps", environment_default=True)
    log_every: int = option(1_000, "Steps per compiled chunk: one row of metrics per run per chunk; divides --steps.",
                            minimum=1, environment_default=True)
    buffer_size: int = option(10_000, "Replay capacity per run, in environment steps (Montezuma: frames).",
                              minimum=2, environment_default=True)
    batch_size: int = option(64, "Minibatch size of every update.", minimum=1, environment_default=True)
    n_step: int = option(1, "n of the n-step Q-learning target.", minimum=1, environment_default=True)
    train_every: int = option(1, "One update every this many environment steps.", minimum=1,
                              environment_default=True)
    target_update: int = option(200, "Steps between copies of the online network to the target network.",
                                minimum=1, environment_default=True)
    gamma: float = option(0.99, "Discount.", minimum=0.0, maximum=1.0)
    count_features: str = option("simhash", "What is counted: SimHash codes of the observation (the paper), the "
                                 "environment's exact cell id (no aliasing), or cfn: a learned pseudo-count of the "
                                 "observation (coin-flip network; the chain, the maze and gymnax environments); "
                                 "Montezuma counts its frame feature.",
                                 choices=("simhash", "exact", "cfn"))
    cfn_outputs: int = option(20, "The learned count (--count-features cfn): coin flips d drawn per step and "
                              "regressed per action; more give less noisy counts.", minimum=1, maximum=32)
    cfn_torso: str = option("auto", "The learned count's network: mlp (on the flattened observation), maze_conv, or "
                            "auto (as the Q-network's auto rule picks for the observation).",
                            choices=("auto", "mlp", "maze_conv"))
    cfn_hidden: Hidden = option((256, 256), "Hidden layer widths of the learned count's MLP.")
    cfn_lr: float = option(5e-4, "The learned count's RMSProp learning rate (one step per update, on the update's "
                           "minibatch).", minimum=0.0, open_minimum=True)
    simhash_bits: int = option(32, "SimHash code length k.", minimum=1, environment_default=True)
    sketch_rows: int = option(4, "Rows of the count-min sketch.", minimum=1)
    sketch_width: int = option(1 << 14, "Columns per row of the count-min sketch.", minimum=2,
                               maximum=1 << 30)  # hashed into 32-bit columns; 2**30 of them are 4 GiB a row already
    shared_action_mask: bool = option(False, "One action randomisation shared by all runs (the reference code) "
                                      "instead of one per run (the paper).")
    network_init: str = option("pytorch", "How every network's weights and biases are first drawn: pytorch "
                               "(uniform in ±1/sqrt(fan_in), weights and biases: PyTorch's default, which the "
                               "authors' networks keep) or flax (LeCun normal weights, zero biases: flax's "
                               "default, and this project's on the chain and the maze until 2026-12-06).",
                               choices=("flax", "pytorch"))
    head_init_scale: float = option(1.0, "Factor on the Q-network's initial output-layer weights (1: as "
                                    "--network-init draws them). A smaller factor starts Q nearer 0, whatever the "
                                    "scale of the rewards.", minimum=0.0, open_minimum=True)
    grad_clip: float = option(5.0, "Global gradient-norm clip.", minimum=0.0, open_minimum=True)
    rms_decay: float = option(0.99, "RMSProp decay (PyTorch's alpha).", minimum=0.0, maximum=1.0)
    rms_eps: float = option(1e-8, "RMSProp epsilon, added outside the square root as PyTorch does.", minimum=0.0,
                            open_minimum=True)
    execution: Execution = dataclasses.field(default_factory=Execution)
    """How the program is executed (precision, weight storage, backward pass, torso, targets' values, overlap):
    :class:`Execution`, apart from what the agent computes. Its options are set and saved by their own names."""
    envs_per_run: int = option(1, "Environments each run steps at once (Montezuma: of the pool); step counts stay per "
                               "run.", minimum=1)
    mmc_unfinished: str = option("zero", "The mixed Monte Carlo target of a transition whose episode has not ended "
                                 "(pool environments): zero (the paper: its return counts as 0) or n_step (the n-step "
                                 "target alone until the episode ends).", choices=("zero", "n_step"))
    declared_settings: DeclaredSettings = dataclasses.field(default=())
    """The static options that exploration parts and environments declare (``Part.static_options``,
    ``EnvironmentSpec.static_options``) where they differ from their defaults, as sorted ``(public name, value)``
    pairs; they read through their owner's group (:meth:`part`, :meth:`environment`)."""

    def __init__(self, **values: Any):
        """Takes every option by name, a part's or an environment's (:data:`DECLARED_STATIC_OPTIONS`) as well as the
        trainer's own."""
        execution = values.pop("execution", None) or Execution()
        chosen = {name: values.pop(name) for name in EXECUTION_FIELDS if name in values}
        values["execution"] = dataclasses.replace(execution, **chosen) if chosen else execution
        given = dict(values.pop("declared_settings", ()))
        for name in [name for name in values if name not in CORE_FIELDS]:
            if name not in DECLARED_STATIC_OPTIONS:
                raise TypeError(f"StaticConfig got an unknown option {name!r} (a part's or an environment's static "
                                "option? it registers with them: import opiq_jax.registry.environments, or your "
                                "part's or environment's module, first)")
            given[name] = values.pop(name)
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, values.pop(field.name, field.default))
        # Only values that differ from the defaults: equal configurations compare (and hash) equal, however written.
        settled = tuple(sorted((k, v) for k, v in given.items() if v != DECLARED_STATIC_OPTIONS[k].default))
        object.__setattr__(self, "declared_settings", settled)

    def part(self, name: str) -> OptionGroup:
        """The static options that the part ``name`` declares, as attributes by their :func:`short_name`
        (``static.part("rnd").outputs``); a part nobody registered is a one-line ``ValueError``."""
        return self._group(Owner("part", name))

    def environment(self, name: str) -> OptionGroup:
        """The static options that the environment ``name`` declares, as attributes by their :func:`short_name`
        (``static.environment("chain").length``); ``gymnax:NAME`` and the like name their family's spec, so
        ``static.environment(static.env)`` reads the configuration's own. An environment nobody registered is a
        one-line ``ValueError``."""
        return self._group(environment_owner(name))

    def _group(self, owner: Owner) -> OptionGroup:
        if owner not in DECLARED_GROUPS:
            registered = ", ".join(o.name for o in DECLARED_GROUPS if o.kind == owner.kind) or "none"
            raise ValueError(f"no {owner} is registered (registered {owner.kind}s: {registered})")
        return OptionGroup(owner, {short: self._declared(public) for short, public in DECLARED_GROUPS[owner].items()})

    def _declared(self, name: str) -> Any:
        """A part's or an environment's static option by its public name: its value here, else its default."""
        return dict(self.declared_settings).get(name, DECLARED_STATIC_OPTIONS[name].default)

    def value(self, name: str) -> Any:
        """The option ``name`` (its public name: ``batch_size``, ``precision``, ``rnd_outputs``), whichever part of
        the configuration holds it: its own fields, the execution's, or a part's or an environment's."""
        if name in EXECUTION_FIELDS:
            return getattr(self.execution, name)
        if name in DECLARED_STATIC_OPTIONS:
            return self._declared(name)
        if name in CORE_FIELDS:
            return getattr(self, name)
        raise ValueError(f"{type(self).__name__} has no option {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Every option by name, flat, the execution's, parts' and environments' included (a results folder's
        ``config.json``, as before the execution became a configuration of its own and before the parts' and
        environments' options read as groups)."""
        values = {}
        for f in dataclasses.fields(self):
            if f.name == "execution":
                values.update(dataclasses.asdict(self.execution))
            elif f.name != "declared_settings":
                values[f.name] = getattr(self, f.name)
        return {**values, **{name: self._declared(name) for name in DECLARED_STATIC_OPTIONS}}

    def problems(self) -> list[str]:
        """Every problem of this configuration, one line each, naming options as the user writes them."""
        found = [p for o in STATIC_OPTIONS.values() if (p := o.problem(self.value(o.name)))]
        x = self.execution
        name = {o.name: o.label() for o in STATIC_OPTIONS.values()}
        e = self.envs_per_run
        relations = [
            (self.total_steps % self.log_every == 0,
             f"{name['total_steps']} ({self.total_steps}) must be a multiple of {name['log_every']} "
             f"({self.log_every})"),
            (self.buffer_size > self.batch_size,
             f"{name['buffer_size']} ({self.buffer_size}) must exceed {name['batch_size']} ({self.batch_size})"),
            (all(getattr(self, f) % e == 0 for f in ("log_every", "target_update", "batch_size", "buffer_size")),
             f"{name['log_every']}, {name['target_update']}, {name['batch_size']} and {name['buffer_size']} must be "
             f"multiples of {name['envs_per_run']} ({e})"),
            (self.train_every % e == 0 or e % self.train_every == 0,
             f"{name['train_every']} ({self.train_every}) and {name['envs_per_run']} ({e}) must divide one another"),
            (all(w >= 1 for w in self.hidden), f"{name['hidden']} widths must be >= 1, got {self.hidden}"),
            (all(w >= 1 for w in self.cfn_hidden), f"{name['cfn_hidden']} widths must be >= 1, got {self.cfn_hidden}"),
            (self.count_features == "cfn" or all(self.value(o) == STATIC_OPTIONS[o].default for o in CFN_OPTIONS),
             f"{', '.join(name[o] for o in CFN_OPTIONS)} set the learned count: they need {name['count_features']} "
             f"cfn, got {self.count_features}"),
            (x.weight_storage == "float32" or x.precision == "bfloat16",
             f"{name['weight_storage']} packed needs {name['precision']} bfloat16 (float32 networks keep float32 "
             f"weights), got {x.precision}"),
            (x.mlp_backward != "pallas" or x.weight_storage == "packed",
             f"{name['mlp_backward']} pallas needs {name['weight_storage']} packed (its optimiser takes the clip's "
             f"norm from the kernels), got {x.weight_storage}"),
        ]
        parts = [problem for check in DECLARED_RELATIONS.values() for problem in check(self, name)]
        return found + [message for ok, message in relations if not ok] + parts

    def validate(self) -> None:
        """Raises :class:`UsageError` (a ``ValueError``) with the first of :meth:`problems`."""
        found = self.problems()
        if found:
            raise UsageError(found[0])


def _declared_fields(config: type) -> dict[str, Option]:
    """The options a configuration's fields declare, in order, :class:`Execution`'s where it stands."""
    types, options = typing.get_type_hints(config), {}
    for f in dataclasses.fields(config):
        if f.name == "execution":
            options.update(_declared_fields(Execution))
        elif "option" in f.metadata:
            options[f.name] = dataclasses.replace(f.metadata["option"], name=f.name, type=types[f.name])
    return options


CFN_OPTIONS = ("cfn_outputs", "cfn_torso", "cfn_hidden", "cfn_lr")
"""The learned count's options (``count_features cfn``): refused with any other counting, where they would change
nothing."""

STATIC_OPTIONS: dict[str, Option] = _declared_fields(StaticConfig)
"""Every static option by public name: :class:`StaticConfig`'s fields, then the registered parts' and environments'
own (which :func:`register_static_options` adds), so the command line, the API and the checks take them alike."""

VALUE_BEFORE_DECLARED: dict[str, Any] = {"network_init": "flax"}
"""What a static field was, where it differs from today's default, in a ``config.json`` written before the field
existed: such a file's runs trained that way, so a re-run or a resume of it must too. Every network was drawn as
flax draws it until ``--network-init`` came."""


def saved_defaults() -> dict[str, Any]:
    """The value of each static field that a saved ``config.json`` lacks: :data:`VALUE_BEFORE_DECLARED`'s where it
    names one, else the default."""
    return {**StaticConfig().to_dict(), **VALUE_BEFORE_DECLARED}


EXECUTION_FIELDS = frozenset(f.name for f in dataclasses.fields(Execution))
CORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StaticConfig)) | EXECUTION_FIELDS


# ------------------------------------------------------------------------------------ parts' and environments' options

@dataclasses.dataclass(frozen=True)
class Owner:
    """Who declares a group of static options: a part or an environment, by its registered name (an environment
    family resolved from one spec by its pattern, ``gymnax:NAME``)."""

    kind: Literal["part", "environment"]
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r}"

    @property
    def prefix(self) -> str:
        """What its options' public names may start with: its name up to any ``:``, then ``_`` (``rnd_``,
        ``gymnax_``)."""
        return f"{self.name.split(':')[0]}_"


def short_name(owner: Owner, option_name: str) -> str:
    """How the option ``option_name`` reads in ``owner``'s group: without the owner's prefix where it has it and what
    is left can be an attribute (``rnd_outputs`` is ``static.part("rnd").outputs``), else whole (BSP's
    ``prior_values``, gymnax's ``env_kwargs``). The one rule between the public names and the groups' names."""
    rest = option_name.removeprefix(owner.prefix)
    readable = rest.isidentifier() and not keyword.iskeyword(rest) and not rest.startswith("_")
    return rest if rest != option_name and readable else option_name


def environment_owner(name: str) -> Owner:
    """The owner of environment ``name``'s options: the environment, or for a name that one spec resolves by its
    pattern (``gymnax:CartPole-v1``), that spec (``gymnax:NAME``)."""
    owner = Owner("environment", name)
    if owner in DECLARED_GROUPS or ":" not in name:
        return owner
    return Owner("environment", f"{name.split(':')[0]}:NAME")


class OptionGroup:
    """One part's or environment's static options in a configuration, read as attributes by their
    :func:`short_name` (``static.part("rnd").outputs``): the values set, else the declared defaults."""

    __slots__ = ("_owner", "_values")

    def __init__(self, owner: Owner, values: Mapping[str, Any]):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        if name in OptionGroup.__slots__:  # not set yet (a copy under way): the slots are no options
            raise AttributeError(name)
        if name not in self._values:
            declared = ", ".join(self._values) or "none"
            raise AttributeError(f"{self._owner} declares no static option {name!r} (it declares: {declared})")
        return self._values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the static options of {self._owner} are read-only: set {name} on the configuration")

    def __reduce__(self) -> tuple:  # copied and pickled through the constructor: its attributes are read-only
        return OptionGroup, (self._owner, self._values)

    def __dir__(self) -> list[str]:
        return sorted(self._values)

    def __repr__(self) -> str:
        values = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"<static options of {self._owner}: {values}>"


DECLARED_STATIC_OPTIONS: dict[str, Option] = {}
"""The static options that exploration parts (``Part.static_options``) and environments
(``EnvironmentSpec.static_options``) declare, by public name."""

DECLARED_GROUPS: dict[Owner, dict[str, str]] = {}
"""Every registered part and environment, with the public names of the static options it declares by their
:func:`short_name` (``{"outputs": "rnd_outputs", ...}``; empty where it declares none). An option two owners
declare alike (a copy of the chain's spec under another name) is in both groups, one setting."""

DECLARED_RELATIONS: dict[Owner, Callable[[StaticConfig, Mapping[str, str]], list[str]]] = {}
"""Per declaring part, the check of its static options against the others (``Part.static_problems``): it takes the
configuration and how messages name every option, and returns the problems."""


def static_option_problem(owner: Owner, option_: Option) -> str | None:
    """Why ``owner`` cannot declare the static option ``option_``, in one line; None if it can."""
    held = STATIC_OPTIONS.get(option_.name)
    if not option_.name.isidentifier():
        return f"{owner}: a static option needs a name that is a Python identifier, got {option_.name!r}"
    if option_.name.startswith("_"):  # the groups keep such names for themselves
        return f"{owner}: a static option's name may not start with '_', got {option_.name!r}"
    if option_.name in CORE_FIELDS or (held is not None and held != option_):
        return f"{owner}: static option {option_.name} is already declared elsewhere: choose another name"
    return None


def static_options_problem(owner: Owner, options: Iterable[Option]) -> str | None:
    """Why ``owner`` cannot declare ``options``: the first of :func:`static_option_problem`'s, or two of them that
    read under one name in its group; None if it can."""
    options = tuple(options)
    problem = next((p for o in options if (p := static_option_problem(owner, o))), None)
    if problem:
        return problem
    seen: dict[str, str] = {}
    for option_ in options:
        short = short_name(owner, option_.name)
        if seen.setdefault(short, option_.name) != option_.name:
            return (f"{owner}: static options {seen[short]} and {option_.name} would both read as .{short} in its "
                    "group: choose another name")
    return None


def register_static_options(owner: Owner, options: Iterable[Option],
                            relation: Callable[[StaticConfig, Mapping[str, str]], list[str]] | None = None) -> None:
    """Adds the static options of ``owner`` (a part's or an environment's, and the check of their relations to the
    others) to :data:`STATIC_OPTIONS` and ``owner``'s group (:data:`DECLARED_GROUPS`); a name another declaration
    holds is a one-line ``ValueError``. Registering the same options again changes nothing."""
    options = tuple(options)
    problem = static_options_problem(owner, options)
    if problem:
        raise ValueError(problem)
    for option_ in options:
        STATIC_OPTIONS[option_.name] = DECLARED_STATIC_OPTIONS[option_.name] = option_
    DECLARED_GROUPS[owner] = {short_name(owner, o.name): o.name for o in options}
    if relation is not None:
        DECLARED_RELATIONS[owner] = relation


RUNNER_SET = ("env", "parts")
"""Static fields that are not options of their own: the environment is chosen by name, the parts by methods."""


def static_option(public_name: str) -> Option | None:
    """The static option users write as ``public_name`` (``steps``, ``log_every``, ...), if there is one."""
    return next((o for o in STATIC_OPTIONS.values() if o.public_name == public_name), None)


def uses_cell_table(static: StaticConfig, name: str, has_cell_table: bool) -> bool:
    """Whether the option ``name`` (``target_values``, BSP's ``prior_values``: ``auto``, ``table`` or ``network``)
    chooses a table of a fixed network's values per cell. ``auto``: in bfloat16 where the environment lists its
    cells, so that float32 keeps the network's passes and its results bit for bit; ``table`` needs such a list."""
    choice = static.value(name)
    if choice == "table" and not has_cell_table:
        raise ValueError(f"{name}='table' needs an environment with a cell table (chain, maze), not {static.env!r}")
    if choice == "auto":
        return has_cell_table and static.execution.precision == "bfloat16"
    return choice == "table"


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
        for option_ in part.hparams:
            if option_.name in options and options[option_.name] != option_:
                raise ValueError(f"hyperparameter {option_.name} is declared twice, differently (part {part.name})")
            options[option_.name] = option_
    return options


def make_hparams(options: Mapping[str, Option], values: Mapping[str, float] | None = None) -> HParams:
    """One run's hyperparameters: every option's default, updated with ``values`` (checked against the options)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(options))
    if unknown:
        raise ValueError(f"unknown hyperparameters {', '.join(unknown)}; known: {', '.join(options)}")
    for name, value in values.items():
        options[name].check(value)
    return {name: jnp.float32(values.get(name, option_.default)) for name, option_ in options.items()}


def stack_hparams(settings: Sequence[HParams]) -> HParams:
    """Stacks per-run hyperparameters along a new leading runs axis (every run must have the same names)."""
    names = [tuple(sorted(s)) for s in settings]
    if len(set(names)) != 1:
        raise ValueError("runs of one program must have the same hyperparameters")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *settings)


def hparams_to_dict(hparams: HParams) -> dict[str, list[float] | float]:
    """JSON-friendly form of (possibly stacked) hyperparameters."""
    return {k: np.asarray(v).tolist() for k, v in hparams.items()}


# ------------------------------------------------------------------------------------ how an experiment is run

LOOP_OPTIONS: dict[str, Option] = {option.name: option for option in (
    Option("checkpoint_every", 60.0, "Seconds between checkpoints (0: after every chunk); the last chunk and a stop "
           "always write one.", minimum=0.0),
    Option("stop_on_nonfinite", False, "Stop the whole experiment when a run's loss, Q-values or parameters become NaN "
           "or infinite (default: flag that run in the metrics, say so, and go on).", type=bool),
    Option("allow_nonfinite", False, "Exit with 0 even when some runs became NaN or infinite (default: the command "
           "finishes, writes everything, then exits with 1).", type=bool),
    Option("track", "none", "Stream each method's aggregates per chunk (median, IQM, quartiles) and the configuration "
           "to TensorBoard event files in <out>/tensorboard (pip install -e '.[tracking]').",
           choices=("none", "tensorboard"), type=str),
    Option("programs", "sequential", "When the methods make several programs (DORA, RND and BSP add one each): train "
           "them one after another, or at once, each in a process of its own (on one GPU faster only under NVIDIA MPS: "
           "start it with nvidia-cuda-mps-control -d).", choices=("sequential", "parallel"), type=str),
    Option("progress", True, "Show a progress bar.", type=bool),
)}
"""How an experiment is run, not what it trains: declared once for the command line, the Python API and the loop
(:func:`opiq_jax.host.host_loop.run_experiment`), which take their names, defaults, documentation and checks from
here."""

SWEEP_OPTIONS: dict[str, Option] = {
    **{name: LOOP_OPTIONS[name] for name in ("track", "allow_nonfinite", "progress")},
    "checkpoint_every": dataclasses.replace(
        LOOP_OPTIONS["checkpoint_every"], default=300.0,
        doc="Seconds between checkpoints of a batch (0: after every chunk); a stop always writes one."),
}
"""A sweep's loop options: the loop's, with a longer checkpoint interval (a sweep trains many long batches)."""

LOOP_DEFAULTS: dict[str, Any] = {name: option.default for name, option in LOOP_OPTIONS.items()}
"""The loop options' defaults, for the signatures that take them (the loop names the interval checkpoint_seconds)."""
SWEEP_DEFAULTS: dict[str, Any] = {name: option.default for name, option in SWEEP_OPTIONS.items()}
