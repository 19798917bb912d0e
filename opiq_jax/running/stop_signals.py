"""SIGINT and SIGTERM handled for the length of a ``with`` block, in a light module (no JAX): the training
loop's :class:`opiq_jax.running.host_loop.StopSignals` and the parent of programs in processes of their own
(:class:`opiq_jax.running.processes.ForwardSignals`) both build on it."""

from __future__ import annotations

import abc
import signal
import threading


class SignalHandlers(abc.ABC):
    """Installs ``self.handle`` for SIGINT and SIGTERM on entry and restores the previous handlers on exit.
    Python lets only the main thread set handlers; elsewhere the block runs with the handlers it has."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    @abc.abstractmethod
    def handle(self, signum: int, frame) -> None:
        """What a subclass does on SIGINT or SIGTERM."""

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
