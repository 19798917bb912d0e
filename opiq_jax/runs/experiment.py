"""What an experiment is, below everything that trains or reads one: its runs, their keys, its programs.

An :class:`Experiment` is runs (:class:`RunSpec`: method, setting label, seed, hyperparameters) that train as one
compiled program. :attr:`Experiment.programs` is the one place a mix of methods is grouped into programs (a part
with networks of its own compiles into a program of its own), once per experiment; :func:`run_keys_for` is the one
place a run's keys come from (its seed alone, so comparisons stay paired); :func:`keys_to_data` is how they are
saved.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ..common.config import StaticConfig, hparam_options, hparams_to_dict, make_hparams
from ..parts import get_part
from ..registry.environments import ENVIRONMENT_ORIGINS
from ..registry.methods import METHODS, method_program, origins, program_parts, run_hparams_off


@dataclass(frozen=True)
class RunSpec:
    """One entry of the runs axis."""

    method: str
    setting: str  # a label of the hyperparameters, e.g. "m=0.5,c_action=1"
    seed: int
    hparams: dict  # the method's hyperparameters (methods.method_hparams); others of its program take defaults


@dataclass(frozen=True)
class Experiment:
    """Runs of any mix of methods. Those of one compiled program train together (:attr:`programs`); ``static.parts``
    holds every part of that program, and is filled in when the runs make one program and it is left empty."""

    static: StaticConfig
    runs: tuple[RunSpec, ...]
    seed: int = 0
    shared_mask_seed: int = 12345

    def __post_init__(self):
        """Groups the runs into programs (once: :attr:`programs` reads it); a static configuration without parts
        gets its runs' program's parts, when they make one program."""
        groups = program_groups(self.runs) if all(r.method in METHODS for r in self.runs) else None
        object.__setattr__(self, "_groups", groups)
        if not self.static.parts and groups is not None and len(groups) == 1:
            (runs,) = groups.values()
            object.__setattr__(self, "static", dataclasses.replace(self.static, parts=program_parts(
                {r.method for r in runs})))

    @functools.cached_property
    def programs(self) -> dict[str, Experiment]:
        """One experiment per compiled program, in order of first appearance: methods whose parts all share programs
        train together; a part with networks of its own (DORA, RND, BSP) makes a program of its own. Each program's
        ``static.parts`` is the union of its methods' parts. Built once per experiment."""
        if self._groups is None:
            raise ValueError("an experiment of unregistered methods cannot be split into programs: register them")
        return {name: dataclasses.replace(self, runs=runs, static=dataclasses.replace(
                    self.static, parts=program_parts({r.method for r in runs})))
                for name, runs in self._groups.items()}

    def hparams(self) -> list[dict]:
        """Every run's hyperparameters as the program needs them: its parts' defaults, the ``off`` values of the
        parts its method does not name (:func:`opiq_jax.registry.methods.run_hparams_off`), then the run's values."""
        options, parts = make_train_options(self.static), self.static.parts
        return [make_hparams(options, {**run_hparams_off(parts, r.method), **r.hparams}) for r in self.runs]

    def to_json(self) -> dict:
        """``config.json``; ``plugins`` names the modules that registered methods not of the paper (if any)."""
        plugins = sorted({*origins(dict.fromkeys(r.method for r in self.runs)),
                          *([ENVIRONMENT_ORIGINS[self.static.env]] if self.static.env in ENVIRONMENT_ORIGINS else [])})
        return {
            "static": self.static.to_dict(),
            "seed": self.seed,
            "shared_mask_seed": self.shared_mask_seed,
            "runs": [
                {"run": i, "method": r.method, "setting": r.setting, "seed": r.seed, "hparams": hparams_to_dict(hp)}
                for i, (r, hp) in enumerate(zip(self.runs, self.hparams()))
            ],
            **({"plugins": plugins} if plugins else {}),
        }


def make_train_options(static: StaticConfig) -> dict:
    """The hyperparameters of a program with ``static.parts``: the trainer's and its parts'."""
    return hparam_options(get_part(name) for name in static.parts)


def run_keys_for(experiment: Experiment) -> tuple[jax.Array, jax.Array]:
    """Per-run keys: a run's randomness depends on its seed only, not on its method or setting.

    So the same seed gives every method the same network initialisation, SimHash matrix and action
    randomisation, which makes method comparisons paired.
    """
    base = jax.random.key(experiment.seed)
    seeds = jnp.array([r.seed for r in experiment.runs], jnp.uint32)
    run_keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(seeds)
    if experiment.static.shared_action_mask:
        shared = jax.random.key(experiment.shared_mask_seed)
        env_keys = jax.vmap(lambda _: shared)(seeds)
    else:
        env_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0x0E4))(run_keys)
    return run_keys, env_keys


def program_groups(runs: tuple[RunSpec, ...]) -> dict[str, tuple[RunSpec, ...]]:
    """The runs of each compiled program (:func:`opiq_jax.registry.methods.method_program`), in order of first
    appearance."""
    groups: dict[str, list[RunSpec]] = {}
    for run in runs:
        groups.setdefault(method_program(run.method), []).append(run)
    return {name: tuple(members) for name, members in groups.items()}


def split_by_program(experiment: Experiment) -> dict[str, Experiment]:
    """``experiment.programs``: one experiment per compiled program (grouped once per experiment)."""
    return experiment.programs


def process_share(experiment: Experiment, index: int, count: int) -> Experiment:
    """Process ``index`` of ``count``'s share of the runs: every ``count``-th run from ``index``.

    A run's keys depend on its seed only (:func:`run_keys_for`), so it trains the same whichever
    process holds it; interleaving gives every process a similar mix of methods.
    """
    if not 0 <= index < count:
        raise ValueError(f"process index {index} is not in [0, {count})")
    if len(experiment.runs) < count:
        raise ValueError(f"{len(experiment.runs)} runs cannot be shared among {count} processes")
    return dataclasses.replace(experiment, runs=experiment.runs[index::count])


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def keys_to_data(tree):
    """Typed PRNG keys as their raw ``uint32`` data, so that the tree serialises."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def keys_from_data(tree, typed_template):
    """Inverse of :func:`keys_to_data`, guided by a tree that still has typed keys."""
    return jax.tree.map(lambda x, t: jax.random.wrap_key_data(x) if _is_key(t) else x, tree, typed_template)
