"""Imports that gymnax makes for rendering alone, deferred to their first use.

gymnax's package imports every environment it ships, and some import their renderers' libraries only to draw
frames: Pong imports seaborn (with scipy and pandas: about 0.8 s of the 2-core CPU's 2.9 s to import the command
line), and Catch, Pong and three more import ``matplotlib.pyplot`` (about 0.3 s of the 2 s left). Nothing here
renders. So while gymnax is imported, each of those modules is a stand-in that imports the real one the first time
anything reads from it; afterwards the stand-in leaves ``sys.modules``, so that any later import is the real one.
(The standard library's ``LazyLoader`` does not help here: Python 3.11's import statement reads the lazy module's
``__spec__``, which loads it.)"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator

DEFERRED = ("seaborn", "matplotlib.pyplot")


class DeferredModule(types.ModuleType):
    """A stand-in for module ``name``: reading any attribute imports the real module and reads it there."""

    def __getattr__(self, attribute: str):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)


@contextlib.contextmanager
def plotting_imports_deferred() -> Iterator[None]:
    """Within the block, each installed module of :data:`DEFERRED` not imported yet is a :class:`DeferredModule`."""
    placed = []
    for name in DEFERRED:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            sys.modules[name] = DeferredModule(name)
            placed.append(name)
    try:
        yield
    finally:
        for name in placed:
            if isinstance(sys.modules.get(name), DeferredModule):
                del sys.modules[name]
