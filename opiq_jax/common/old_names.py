"""The flat layout's import paths (every module at the package's root, before the layers became folders), kept
working: ``import opiq_jax.trainer`` imports ``opiq_jax.agent.trainer`` itself (one module object under both names,
so a patch through the old name reaches the code) and warns once with a ``DeprecationWarning``. CHANGELOG.md lists
the same moves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "config": "common.config",
    "errors": "common.errors",
    "maze_torso": "kernels.maze_torso",
    "mlp_backward": "kernels.mlp_backward",
    "counts": "pieces.counts",
    "replay": "pieces.replay",
    "frame_replay": "pieces.frame_replay",
    "targets": "pieces.targets",
    "networks": "pieces.networks",
    "packed_state": "pieces.packed_state",
    "state": "pieces.state",
    "results": "store.files",
    "frame_store": "store.frames",
    "metrics_file": "store.metrics",
    "environments": "registry.environments",
    "methods": "registry.methods",
    "trainer": "agent.trainer",
    "weights": "agent.weights",
    "target_values": "agent.bootstrap_values",
    "backward": "agent.backward",
    "experiment": "runs.experiment",
    "compiled": "runs.compiled",
    "memory": "runs.memory",
    "devices": "runs.devices",
    "reading": "runs.results_folder",
    "plotting": "reporting.plotting",
    "stats": "reporting.stats",
    "tracking": "reporting.tracking",
    "runner": "running.host_loop",
    "plan": "running.plan",
    "programs": "running.train_programs",
    "program_processes": "running.processes",
    "sweeping": "running.sweeping",
    "multihost": "running.multihost",
    "stop_signals": "running.stop_signals",
    "presets": "running.presets",
}
"""Each old module, under ``opiq_jax``, and where it lives now."""


class _SameModule(importlib.abc.Loader):
    """Loads an old name as the module at its new one: no second copy of its state (registries, caches)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        self.module = importlib.import_module(self.new)
        self.own_spec = self.module.__spec__
        return self.module

    def exec_module(self, module) -> None:
        module.__spec__ = self.own_spec  # the import system set it to the old name's; the module keeps its own


class OldNames(importlib.abc.MetaPathFinder):
    """Finds ``opiq_jax.<old name>`` (placed after Python's own finders: a real module of that name would win)."""

    def find_spec(self, fullname: str, path=None, target=None):
        old = fullname.removeprefix("opiq_jax.")
        if not fullname.startswith("opiq_jax.") or old not in MOVED:
            return None
        new = f"opiq_jax.{MOVED[old]}"
        warnings.warn(f"{fullname} is now {new}; the old name will go in a later release (CHANGELOG.md)",
                      DeprecationWarning, stacklevel=2)  # the import system's own frames are skipped
        return importlib.util.spec_from_loader(fullname, _SameModule(new))


def install() -> None:
    """Puts the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, OldNames) for finder in sys.meta_path):
        sys.meta_path.append(OldNames())
