"""opiq-jax: OPIQ (Optimistic Pessimistically Initialised Q-learning, ICLR 2020) as a compiled, vmapped JAX agent."""

import os as _os

# Installed, the environments are the subpackage opiq_jax.envs. In a source checkout used without installing
# (the repository root on PYTHONPATH) they are the repository's top-level envs/ folder beside this package.
_source_envs = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "envs")
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "envs")) and _os.path.isfile(
        _os.path.join(_source_envs, "base.py")):
    __path__.append(_os.path.dirname(_source_envs))

# The public API, imported on first use (PEP 562): importing the trainer imports gymnax, which starts JAX's
# backend, and a run over several hosts must call jax.distributed.initialize before that.
_API = ("train", "sweep", "load", "rerun", "bench", "methods", "environments", "options", "Results", "FinalState")
_ERRORS = ("UsageError", "ResultsError", "Stopped", "NonFiniteRuns", "PeerFailed", "ProgramFailed")
__all__ = [*_API, *_ERRORS]


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _ERRORS:
        from . import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'opiq_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
