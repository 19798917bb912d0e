"""What a results folder's record (``run_info.json``, ``timeboxed.json``) says about where it came from.

A number is only as good as the code that made it: every record says which commit that code was at and whether
its tracked files differed from the commit (``tree_clean``), naming those that did by their path in the
repository. Of the untracked files, only Python files count: a new module runs as much as a changed one, where a
results folder written inside the checkout does not. Outside a git checkout (an installed package) the revision is
unknown and says so.

A record names no absolute path of the machine that wrote it (a folder is committed and read elsewhere):
:func:`portable` writes a command's path arguments relative to the working directory, or by their name.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
GIT_SECONDS = 30.0
UNTRACKED_CODE = ":/*.py"
"""The untracked files a record counts as uncommitted (a git pathspec from the repository's top, ignored files aside):
Python files, the code a run may have imported before it was committed."""


def _git(*args: str, cwd: Path) -> str | None:
    """``git ARGS`` in ``cwd``: its stdout, or None when git is missing, fails or is not in a checkout."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def changed_paths(status: str) -> list[str]:
    """The paths of ``git status --porcelain -z`` (NUL-separated, so that a comma, a quote or unicode in a name comes
    through as it is): each entry's path, without the former name a rename or copy adds after it."""
    entries, paths = iter(status.split("\0")), []
    for entry in entries:
        if not entry:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: its next entry is the path it came from
            next(entries, None)
    return paths


def source_revision(source: Path = PACKAGE_DIR) -> dict:
    """``revision`` (the commit's full hash), ``tree_clean`` and, when not clean, ``uncommitted`` (the changed
    tracked files and the untracked Python files, relative to the repository) of the checkout holding ``source``;
    both None outside a checkout."""
    head = _git("rev-parse", "HEAD", cwd=source)
    status = _git("status", "--porcelain", "-z", "--untracked-files=no", cwd=source) if head else None
    untracked = _git("ls-files", "-z", "--others", "--exclude-standard", "--full-name", "--", UNTRACKED_CODE,
                     cwd=source) if head else None
    if head is None or status is None or untracked is None:
        return dict(revision=None, tree_clean=None, revision_note="not run from a git checkout")
    changed = sorted(changed_paths(status) + [path for path in untracked.split("\0") if path])
    record: dict = dict(revision=head.strip(), tree_clean=not changed)
    if changed:
        record["uncommitted"] = changed
    return record


def portable(argument: str) -> str:
    """``argument`` without the machine's absolute path: a path (or the value of ``--name=PATH``) relative to the
    working directory when it lies below it, else its last part; any other argument as it is."""
    flag, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", argument)
    if not os.path.isabs(value):
        return argument
    path, here = Path(value), Path.cwd()
    shown = str(path.relative_to(here)) if path.is_relative_to(here) else path.name
    return f"{flag}{equals}{shown}"
