"""The ``opiq-jax`` command's entry point: what must come before JAX starts its backend, then the command line.

Two settings only take effect before the backend starts, and importing the trainer starts it (its modules build
arrays at import): a run over several hosts joins them with ``jax.distributed.initialize``, and ``--programs
parallel`` keeps this process from taking 75 % of the GPU's memory for itself. :func:`main` reads both from the
raw arguments, then imports the command line (:mod:`opiq_jax.cli`): the one import inside a function that the
package keeps, and the reason it exists. Everything else imports at the top of its module.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import jax

from .common.errors import UsageError, command_line_message
from .host.multihost import join_hosts
from .host.stop_signals import end_with, flush_output

HOST_OPTIONS = ("--coordinator", "--num-processes", "--process-id")


def option_values(argv: list[str], names: tuple[str, ...]) -> dict[str, str]:
    """The values ``argv`` gives the options ``names`` (``--name VALUE`` or ``--name=VALUE``), before any parser."""
    found = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in names:
            found[name] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def share_device_memory(argv: list[str]) -> None:
    """For ``--programs parallel``: this process does not take 75 % of the GPU's memory when JAX starts, so the
    programs' processes get it."""
    if option_values(argv, ("--programs",)).get("--programs") == "parallel":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def hosts_asked(argv: list[str]) -> dict[str, str] | None:
    """``train``'s options that join several hosts, or None when the command trains on this host alone."""
    if not argv or argv[0] != "train":
        return None
    given = option_values(argv, HOST_OPTIONS)
    return given if given or "--distributed" in argv else None


def backend_problem() -> str | None:
    """Why JAX cannot start the backend this environment asks for (``JAX_PLATFORMS``), in one line; None when it
    starts. Checked here, before the command line's modules build their first arrays, where it would be a traceback."""
    try:
        jax.devices()
    except Exception as e:  # noqa: BLE001 - RuntimeError for an unknown name, AssertionError for an absent CUDA
        asked = os.environ.get("JAX_PLATFORMS")
        why = (str(e).splitlines() or [""])[0] or type(e).__name__
        where = f"the backend JAX_PLATFORMS={asked!r} asks for" if asked else "its backend"
        return (f"JAX could not start {where} ({why[:200]}); unset JAX_PLATFORMS, or set it to a backend this "
                "machine has (cpu, cuda or tpu)")
    return None


def main(argv: list[str] | None = None) -> None:
    """``opiq-jax``: the backend's settings from the raw arguments, then the command line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a folder named in unicode under PYTHONIOENCODING=ascii still prints
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # the command only draws into files (Agg), and gymnax imports matplotlib, which refuses an unknown backend name
    os.environ.pop("MPLBACKEND", None)
    share_device_memory(argv)
    hosts = hosts_asked(argv)
    joined = None
    if hosts is not None:
        try:
            joined = join_hosts(hosts.get("--coordinator"), hosts.get("--num-processes"), hosts.get("--process-id"))
        except UsageError as e:
            print(f"opiq-jax: error: {command_line_message(e)}", file=sys.stderr, flush=True)
            sys.exit(2)
    problem = backend_problem()
    if problem:
        print(f"opiq-jax: error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)
    from .cli import main as command_line  # after the backend's settings above: the reason this module exists

    try:
        try:
            command_line(argv, joined)
        finally:
            end_at_once_on_signals()
    except KeyboardInterrupt:  # outside the command's own handling: as it parsed its arguments, or as it ended
        end_now(signal.SIGINT)


ENDED = b"opiq-jax: interrupted; every file it wrote is whole\n"


def end_now(signum: int, frame: Any = None) -> None:
    """Ends the process at once with 128 + ``signum`` and one line, skipping the interpreter's exit hooks."""
    end_with(ENDED, signum)


def end_at_once_on_signals() -> None:
    """Once the command has done its work: a Ctrl-C or SIGTERM while the interpreter shuts down (JAX's exit hooks take
    a moment) ends the process at once (:func:`end_now`), instead of a traceback from inside JAX's hooks and exit code
    0. Everything was written, each file whole, and the command's lines were flushed as printed."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a command that ended on a Ctrl-C ignores a second one
            signal.signal(signum, end_now)
    flush_output()


if __name__ == "__main__":
    main()
