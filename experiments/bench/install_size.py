"""The disk space that an extra of opiq-jax adds to an installed environment (default: ``atari``, EnvPool).

The added distributions are those the extra's requirements pull in, transitively, that the core's do not.
A distribution's size is the sum of the sizes of the files its install record lists.

``python -m experiments.bench.install_size --out docs/results/envpool-install-size`` (after
``pip install -e '.[atari]'``) writes ``install_size.json``, ``install_size.md`` and ``run_info.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

from opiq_jax.reporting import source_revision

PROJECT = "opiq-jax"


def requirement_names(name: str, extra: str | None = None) -> list[str]:
    """The names of ``name``'s requirements: the core ones, or only those of ``extra``."""
    names = []
    for req in metadata.distribution(name).requires or []:
        marker = re.search(r"extra\s*==\s*['\"]([^'\"]+)", req)
        if (marker.group(1) if marker else None) == extra:
            names.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def closure(names: list[str]) -> set[str]:
    """The installed distributions ``names`` need, transitively (themselves included)."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        stack += requirement_names(name)
    return seen


def installed_bytes(name: str) -> int:
    """The bytes on disk of the files in ``name``'s install record."""
    files = metadata.distribution(name).files or []
    return sum(f.locate().stat().st_size for f in files if Path(f.locate()).is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--extra", default="atari")
    args = parser.parse_args(argv)
    start = time.time()
    added = sorted(closure(requirement_names(PROJECT, args.extra)) - closure(requirement_names(PROJECT)))
    sizes = {name: {"version": metadata.version(name), "bytes": installed_bytes(name)} for name in added}
    total = sum(s["bytes"] for s in sizes.values())
    lines = ["| distribution | version | MB (10^6 bytes) |", "|---|---|---|"]
    lines += [f"| {n} | {s['version']} | {s['bytes'] / 1e6:.1f} |" for n, s in sizes.items()]
    lines.append(f"| **all {len(sizes)}** | | **{total / 1e6:.1f}** |")
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"extra": args.extra, "python": sys.version.split()[0]}
    document = {"options": options, "distributions": sizes, "total_bytes": total}
    (args.out / "install_size.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / "install_size.md").write_text("\n".join(lines) + "\n")
    info = {"device": f"{os.cpu_count()}-core {platform.machine()} CPU, no accelerator",
            "seconds": round(time.time() - start, 2), **source_revision()}
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
