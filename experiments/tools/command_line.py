"""How a results folder names the call that wrote it: ``python -m MODULE ARGS``, with this machine's paths left out,
so a record can be committed and rerun from any checkout."""

from __future__ import annotations

import sys

from opiq_jax.reporting import portable


def command_line(module: str, argv: list[str] | None) -> str:
    """``argv`` is the script's own argument list when called from Python; None means the process's (``sys.argv``),
    and an empty list means no arguments (not the process's)."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python -m", module, *(portable(str(a)) for a in args)])
