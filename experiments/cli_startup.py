"""How long ``opiq-jax COMMAND --help`` takes from a fresh interpreter: the wall-clock a newcomer waits.

Each repeat starts a new ``python -m opiq_jax COMMAND --help`` process (JAX on the CPU, the files already in the
operating system's cache) and times it to exit; the first repeat of each command is listed apart. Alongside, one
``python -X importtime -c "import opiq_jax.cli"`` gives the slowest imports. Writes ``summary.md``,
``timings.json`` and ``run_info.json`` into ``--out``.

Run: ``python -m experiments.cli_startup --out docs/results/cli-startup``.

Uses only the command line (no internals).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    out: Path
    """Where summary.md, timings.json and run_info.json go."""
    commands: tuple[str, ...] = ("train", "sweep", "plot", "bench")
    repeats: int = 5
    """Fresh processes per command."""
    goal_seconds: float = 3.0
    """The wall-clock the README promises for --help on a 2-core CPU."""


def help_seconds(command: str) -> float:
    """The wall-clock of one ``python -m opiq_jax COMMAND --help`` in a new process."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "opiq_jax", command, "--help"], capture_output=True, env=env,
                          cwd=ROOT, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"opiq-jax {command} --help failed: {done.stderr.decode()[-300:]}")
    return seconds


def slowest_imports(count: int = 8) -> list[tuple[str, float]]:
    """The ``count`` top-level-most imports that take longest (cumulative seconds) when the command line loads."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import opiq_jax.cli"], capture_output=True,
                          text=True, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    found = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            if depth <= 2:
                found.append((name.strip(), int(parts[1]) / 1e6))
    return sorted(found, key=lambda item: -item[1])[:count]


def summary(timings: dict[str, list[float]], imports: list[tuple[str, float]], goal: float) -> str:
    lines = ["| command | first run | median of the rest | slowest | within the goal |", "|---|---|---|---|---|"]
    for command, seconds in timings.items():
        rest = seconds[1:] or seconds
        lines.append(f"| `opiq-jax {command} --help` | {seconds[0]:.2f} s | {statistics.median(rest):.2f} s | "
                     f"{max(seconds):.2f} s | {'yes' if max(seconds) <= goal else 'no'} |")
    lines += ["", "Slowest imports of `opiq_jax.cli` (cumulative):", ""]
    lines += [f"- `{name}`: {seconds:.2f} s" for name, seconds in imports]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    timings = {command: [help_seconds(command) for _ in range(args.repeats)] for command in args.commands}
    imports = slowest_imports()
    text = summary(timings, imports, args.goal_seconds)
    (args.out / "summary.md").write_text(text, encoding="utf-8")
    settings = {"commands": list(args.commands), "repeats": args.repeats, "goal_seconds": args.goal_seconds}
    (args.out / "timings.json").write_text(json.dumps({"settings": settings, "seconds": timings, "imports": imports},
                                                      indent=1))
    info = {"device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(), "command": ["python", "-m", "experiments.cli_startup", *sys.argv[1:]],
            "wall_seconds": round(time.time() - started, 1), "date": time.strftime("%Y-%m-%d")}
    (args.out / "run_info.json").write_text(json.dumps(info, indent=1))
    print(text)


if __name__ == "__main__":
    main()
