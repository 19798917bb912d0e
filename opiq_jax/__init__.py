"""opiq-jax: OPIQ (Optimistic Pessimistically Initialised Q-learning, ICLR 2020) as a compiled, vmapped JAX agent."""

# The environments are the subpackage opiq_jax.envs, whose sources are the repository's top-level envs/ folder:
# pyproject.toml's package-dir maps the one to the other, in a wheel and in an editable install alike.

# The public API, imported on first use (PEP 562): importing the trainer imports gymnax, which starts JAX's
# backend, and a run over several hosts must call jax.distributed.initialize before that.
_API = ("train", "sweep", "load", "rerun", "bench", "methods", "environments", "options", "Results", "FinalState")
_ERRORS = ("UsageError", "ResultsError", "DoesNotFit", "PartError", "Stopped", "NonFiniteRuns", "PeerFailed",
           "ProgramFailed")
# The extension points (docs/design.md): a part, a method made of parts, an environment and the three contracts its
# spec composes (a stepping, a replay and the batch it samples, a counter), an option; and what a part or a script
# reuses: a metrics table read back, OPIQ's bonus C / (N + 1)^M.
_EXTENSION = {"Part": "parts", "register_part": "parts", "Method": "registry.methods",
              "register_method": "registry.methods", "EnvironmentSpec": "registry.environments",
              "register_environment": "registry.environments", "Option": "common.config",
              "Stepping": "contracts", "CompactStepping": "contracts.compact", "Replay": "contracts",
              "Batch": "contracts", "CompactReplay": "contracts.compact", "Counting": "contracts",
              "read_metrics": "runs.results_folder", "optimism_bonus": "parts.optimism"}
# The compiled core as pure functions (init and train_chunk), for a loop in the caller's hands.
_CORE = {"make_train": "program", "Program": "program"}
# What a script must do before JAX starts, as the opiq-jax command does: free the GPU's memory for --programs parallel.
_BEFORE_JAX = {"share_device_memory": "launch"}
_MODULE_OF = {**_CORE, **_EXTENSION, **_BEFORE_JAX}
__all__ = [*_API, *_ERRORS, *_MODULE_OF]


def __getattr__(name: str):
    import importlib

    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    if name in _ERRORS:
        return getattr(importlib.import_module(".common.errors", __name__), name)
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module 'opiq_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
