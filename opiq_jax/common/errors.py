"""The ways a run ends early that a user is told about in one line (no traceback), in one light module:
the command line catches them without importing JAX (which must wait for ``jax.distributed.initialize``)."""

from __future__ import annotations

import re

# An option's name inside a message is marked where the message is made and worded only where it reaches the user:
# the command line says --chain-length, Python says chain_length. The mark is a control character that no option's
# name, path or value a message quotes can hold.
_MARK = "\x1f"
_MARKED = re.compile(f"{_MARK}([^{_MARK}]*){_MARK}([^{_MARK}]*){_MARK}")


def option_name(name: str, flag: str | None = None) -> str:
    """``name`` (Python's spelling) marked for :func:`worded`; ``flag``: the command line's name where it is not
    ``name`` with dashes (``--method`` for ``methods``)."""
    return f"{_MARK}{name}{_MARK}{flag or ''}{_MARK}"


def worded(message: str, on_command_line: bool = False) -> str:
    """``message`` with its marked names as Python writes them, or as the command line does."""
    if on_command_line:
        return _MARKED.sub(lambda m: "--" + (m[2] or m[1]).replace("_", "-"), message)
    return _MARKED.sub(lambda m: m[1], message)


def message_of(error: BaseException) -> str:
    """The message an error was raised with, its marks kept (for a message that quotes another)."""
    return error.args[0] if isinstance(error, UsageError) and error.args and isinstance(error.args[0], str) \
        else str(error)


def command_line_message(error: BaseException) -> str:
    """What the command line prints of ``error``: its message, the options named as flags."""
    return worded(message_of(error), on_command_line=True)


class UsageError(ValueError):
    """A bad option or input: one line saying what to change (exit code 2). Its text names options as Python
    does; :func:`command_line_message` names them as the command line does."""

    def __str__(self) -> str:
        return worded(super().__str__())


class ResultsError(UsageError):
    """A results folder cannot be used as asked: a file in its place, unwritable, locked by another process,
    holding another experiment, or an unreadable ``config.json`` (exit code 2)."""


class DoesNotFit(UsageError):
    """Runs whose training state would not fit in the device's free memory: one line with what would fit."""


class PartError(UsageError):
    """An exploration part's hook returned something of the wrong shape or structure: one line naming the part
    and the hook, raised when the program is traced."""


class Stopped(KeyboardInterrupt):
    """A run stopped on request (SIGINT or SIGTERM) at a safe point, its progress checkpointed."""

    def __init__(self, step: int, total: int, signum: int):
        super().__init__(f"stopped at step {step:,} of {total:,}; run the same command to resume")
        self.step, self.total, self.signum = step, total, signum

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


class NonFiniteRuns(RuntimeError):
    """Some run's loss, Q-values or parameters became NaN or infinite and the experiment was asked to stop."""


class ProgramFailed(RuntimeError):
    """A program trained in a process of its own (``programs="parallel"``) failed; the others' progress is kept."""


class PeerFailed(RuntimeError):
    """Another process of a run over several hosts failed; this one stopped at a safe point with its checkpoint."""


__all__ = ["DoesNotFit", "NonFiniteRuns", "PartError", "PeerFailed", "ProgramFailed", "ResultsError", "Stopped",
           "UsageError"]
