"""opiq-jax: OPIQ (Optimistic Pessimistically Initialised Q-learning, ICLR 2020) as a compiled, vmapped JAX agent."""

import os as _os

# The environments are the subpackage opiq_jax.envs: installed, or in a checkout through the link opiq_jax/envs ->
# ../envs. Where a copy of the checkout lost that link, they are the top-level envs/ folder beside this package.
_source_envs = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "envs")
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "envs")) and _os.path.isfile(
        _os.path.join(_source_envs, "base.py")):
    __path__.append(_os.path.dirname(_source_envs))

# The public API, imported on first use (PEP 562): importing the trainer imports gymnax, which starts JAX's
# backend, and a run over several hosts must call jax.distributed.initialize before that.
_API = ("train", "sweep", "load", "rerun", "bench", "methods", "environments", "options", "Results", "FinalState")
_ERRORS = ("UsageError", "ResultsError", "DoesNotFit", "PartError", "Stopped", "NonFiniteRuns", "PeerFailed", "ProgramFailed")
# The extension points (docs/design.md): a part, a method made of parts, an environment, an option.
_EXTENSION = {"Part": "parts", "register_part": "parts", "Method": "methods", "register_method": "methods",
              "EnvironmentSpec": "environments", "register_environment": "environments", "Option": "config",
              "read_metrics": "reading"}
__all__ = [*_API, *_ERRORS, *_EXTENSION]


def __getattr__(name: str):
    import importlib

    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    if name in _ERRORS:
        return getattr(importlib.import_module(".errors", __name__), name)
    if name in _EXTENSION:
        return getattr(importlib.import_module(f".{_EXTENSION[name]}", __name__), name)
    raise AttributeError(f"module 'opiq_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
