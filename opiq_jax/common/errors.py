"""The ways a run ends early that a user is told about in one line (no traceback), in one light module:
the command line catches them without importing JAX (which must wait for ``jax.distributed.initialize``)."""

from __future__ import annotations


class UsageError(ValueError):
    """A bad option or input: one line saying what to change (exit code 2)."""


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


__all__ = ["DoesNotFit", "NonFiniteRuns", "PartError", "PeerFailed", "ProgramFailed", "ResultsError", "Stopped", "UsageError"]
