"""SIGINT and SIGTERM handled for the length of a ``with`` block, in a light module (no JAX): the training
loop's :class:`opiq_jax.host.host_loop.StopSignals` and the parent of programs in processes of their own
(:class:`opiq_jax.host.processes.ForwardSignals`) both build on it."""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import sys
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


def flush_output() -> None:
    """Flushes what was printed, before the process ends without the interpreter's own flush."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can reach it
            stream.flush()


def end_with(line: bytes, signum: int) -> None:
    """Ends the process at once with ``line`` on standard error and 128 + ``signum``, skipping the interpreter's exit
    hooks (what was printed is flushed first)."""
    flush_output()
    os.write(2, line)
    os._exit(128 + signum)


class EndingAtOnce(SignalHandlers):
    """For the length of a block where nothing is left to lose, a SIGINT or SIGTERM ends the process at once, by the
    handler itself, with ``opiq-jax: <message>`` (:func:`end_with`). A KeyboardInterrupt raised while Python runs a
    garbage-collection callback (JAX registers one) is printed as "ignored" and lost, and the command would go on as
    if no signal had come (the likely cause of a test's one failure at "finished in")."""

    def __init__(self, message: str):
        self.line = f"opiq-jax: {message}\n".encode()

    def handle(self, signum: int, frame) -> None:
        end_with(self.line, signum)
