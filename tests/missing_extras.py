"""Imports as a machine without an optional extra sees them (the tests of the one-line 'install the extra' errors)."""

import builtins


def hide_module(monkeypatch, name: str) -> None:
    """Makes ``import NAME`` and ``import NAME.anything`` fail as if the package were not installed, for the rest of
    the test (``monkeypatch`` undoes it)."""
    real_import = builtins.__import__

    def without(module, *args, **kwargs):
        if module == name or module.startswith(name + "."):
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
