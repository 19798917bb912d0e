"""Mutation testing: does the test suite fail when the algorithm is wrong?

Each mutant (``experiments/tools/mutants.py``) is one small, plausible slip in the core (a max for a min, one constant
for another, a clip left out). For each, this copies the project into a temporary folder, applies the mutant and
runs the mutant's own few tests there; a mutant is *killed* when one of them fails (the first failing test is
recorded), *survived* when they all pass, *stale* when its original snippet no longer occurs exactly once (the code
moved on: update the mutant), and *timeout* / *error* when pytest ran too long or could not run the tests at all.

The copy holds the files git knows (tracked, plus untracked ones that are not ignored), so results, caches and
virtual environments stay behind; its tests import the copy's ``opiq_jax`` (the working directory and
``PYTHONPATH`` are the copy, and each copy checks that ``opiq_jax`` and ``opiq_jax.envs`` load from it before its
mutant runs), never the editable install's. Compiled programs are cached in one folder shared by the mutants of a
session, so a mutant that leaves a program unchanged loads it instead of compiling it again.

    python -m experiments.tools.mutation_testing --jobs 1 --out docs/mutation.md
    python -m experiments.tools.mutation_testing --only counts-query-max results-no-checksum
    python -m experiments.tools.mutation_testing --sample 3 --seed 0
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# Run by path (python experiments/tools/mutation_testing.py): import as python -m does, from the root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.tools.mutants import CHEAP, MUTANTS, Mutant  # noqa: E402
from experiments.tools.source_tree import importable  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 900.0
STATUSES = ("killed", "survived", "stale", "timeout", "error")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one mutant."""

    mutant: Mutant
    status: str  # one of STATUSES
    killer: str = ""  # the first failing test's node id (killed), or why it could not run (stale, error)
    seconds: float = 0.0


# ------------------------------------------------------------------------------------ pure pieces


class StaleMutant(Exception):
    """The mutant's original snippet does not occur exactly once in its file."""


def mutate(text: str, mutant: Mutant) -> str:
    """``text`` with the mutant's snippet replaced; :class:`StaleMutant` unless the snippet occurs exactly once."""
    found = text.count(mutant.original)
    if found != 1:
        raise StaleMutant(f"{mutant.file}: the original snippet occurs {found} times, not once")
    return text.replace(mutant.original, mutant.replacement)


FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - |$)", re.MULTILINE)


def first_failure(pytest_output: str) -> str | None:
    """The node id of the first failing (or erroring) test in pytest's short summary, or None."""
    match = FAILED_LINE.search(pytest_output)
    return match.group(1) if match else None


def classify(returncode: int | None, output: str) -> tuple[str, str]:
    """``(status, killer)`` from pytest's exit status and output (``returncode`` None: it timed out).

    Exit 1 is a failing test; exit 2 or 4 with a test module's error in the summary (collection failed: the mutant
    broke an import; pytest exits 4 when the named tests' module did not collect) kills too; otherwise exits 3 to 5
    (internal or usage error, no test collected) mean the mutant's test list is wrong.
    """
    if returncode is None:
        return "timeout", ""
    if returncode == 0:
        return "survived", ""
    failing = first_failure(output)
    if returncode == 1 or (returncode in (2, 4) and failing):
        return "killed", failing or "(pytest reported a failure)"
    tail = output.strip().splitlines()[-1:] or [""]
    return "error", f"pytest exit {returncode}: {tail[0][:200]}"


def select(mutants: Sequence[Mutant], only: Iterable[str] = (), sample: int | None = None,
           seed: int = 0) -> list[Mutant]:
    """The mutants named by ``only`` (all if none; unknown names are an error), then ``sample`` of them at random."""
    only = list(only)
    by_id = {m.id: m for m in mutants}
    unknown = [name for name in only if name not in by_id]
    if unknown:
        raise ValueError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(by_id)}")
    chosen = [by_id[name] for name in only] if only else list(mutants)
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    return chosen


def markdown(outcomes: Sequence[Outcome], revision: str, date: str, wall_seconds: float, jobs: int) -> str:
    """The report: a summary line, then one table row per mutant."""
    tally = {s: sum(o.status == s for o in outcomes) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in tally.items() if n)
    lines = [
        "# Mutation testing",
        "",
        (f"`python -m experiments.tools.mutation_testing --jobs {jobs}` on revision `{revision}`, {date}: "
         f"{len(outcomes)} mutants, {summary}; wall-clock {wall_seconds / 60:.1f} min (CPU, JAX_PLATFORMS=cpu)."),
        "",
        ("Each mutant is one small slip in the core, applied to a copy of the project; its few targeted tests run "
         "there and the first that fails killed it. The mutants and their tests are in "
         "`experiments/tools/mutants.py`."),
        "",
        "| mutant | where | description | result | killing test | s |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        killer = o.killer.replace("|", "\\|")
        lines.append(f"| `{o.mutant.id}` | `{o.mutant.file}` | {o.mutant.description} | {o.status} | "
                     f"{'`' + killer + '`' if killer else ''} | {o.seconds:.0f} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ the project copy


def project_files(root: Path) -> list[str]:
    """The files git knows in ``root``: tracked ones that exist, and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted({name for name in listed if name and (root / name).is_file()})


def copy_project(root: Path, destination: Path, files: Sequence[str]) -> None:
    """Copies ``files`` (relative to ``root``) into ``destination``; a file removed meanwhile (the working tree may be
    edited while mutants run) is no longer part of the project and is left out."""
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(root / name, target)
        except FileNotFoundError:
            pass


def test_environment(copy: Path, cache: Path | None) -> dict[str, str]:
    """The environment of a mutant's tests: the copy first on the path, CPU, no bytecode written (a mutated file
    and its original can share a size and a modification second), and the session's compilation cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(PYTHONPATH=str(copy), JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    return env


# finds opiq_jax.envs without importing it (which would import JAX): the probe takes a fraction of a second
# The project's pytest options may spread tests over workers (pytest-xdist); a mutant's few tests run in one process,
# in order, so that -x stops at the first failure and --jobs alone sets how many cores the harness takes.
XDIST_OFF = ("-n", "0") if importlib.util.find_spec("xdist") else ()

IMPORT_PROBE = ("import importlib.util, opiq_jax; print(opiq_jax.__file__); "
                "print(importlib.util.find_spec('opiq_jax.envs').origin)")


def check_imports_from(copy: Path, env: dict[str, str]) -> None:
    """Raises unless ``opiq_jax`` and ``opiq_jax.envs`` import from ``copy`` (not from an installed project).

    A copy whose package fails to import from the copy itself (the mutant broke an import) passes: its tests then
    fail to collect, which kills the mutant, as breaking the package would fail the suite."""
    probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=copy, env=env, capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        if str(copy.resolve()) in probe.stderr or str(copy) in probe.stderr:
            return
        raise RuntimeError(f"the import probe failed outside the copy: {probe.stderr.strip()[-300:]}")
    out = probe.stdout.split()
    outside = [path for path in out if not Path(path).resolve().is_relative_to(copy.resolve())]
    if outside:
        raise RuntimeError(f"the copy's tests would import {', '.join(outside)}, not the copy in {copy}")


def run_mutant(mutant: Mutant, root: Path = ROOT, files: Sequence[str] | None = None, cache: Path | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> Outcome:
    """Applies ``mutant`` to a fresh copy of the project (``files``: listed now if not given) and runs its tests
    there."""
    started = time.monotonic()
    files = project_files(root) if files is None else files
    source = root / mutant.file
    try:
        mutated = mutate(source.read_text(), mutant) if source.is_file() else None
    except StaleMutant as stale:
        return Outcome(mutant, "stale", str(stale))
    if mutated is None:
        return Outcome(mutant, "stale", f"{mutant.file} does not exist")
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as folder:
        copy = Path(folder) / "project"
        copy_project(root, copy, files)
        importable(copy)
        (copy / mutant.file).write_text(mutated)
        env = test_environment(copy, cache)
        check_imports_from(copy, env)
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *XDIST_OFF,
                   *mutant.tests]
        try:
            done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            status, killer = classify(done.returncode, done.stdout + done.stderr)
        except subprocess.TimeoutExpired:
            status, killer = classify(None, "")
    return Outcome(mutant, status, killer, time.monotonic() - started)


def run_mutants(mutants: Sequence[Mutant], jobs: int = 1, root: Path = ROOT, timeout: float = DEFAULT_TIMEOUT,
                cache: Path | None = None, report: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Every mutant's outcome, in the order given (``jobs`` at a time); ``report`` sees each as it ends."""
    def guarded(mutant: Mutant) -> Outcome:
        """One mutant's outcome; a failure of the harness itself is that mutant's error, not the session's end."""
        try:
            return run_mutant(mutant, root, None, cache, timeout)  # the files listed now: the tree may change meanwhile
        except Exception as e:  # noqa: BLE001
            return Outcome(mutant, "error", f"harness: {type(e).__name__}: {e}"[:300])

    with tempfile.TemporaryDirectory(prefix="mutation-cache-") as own_cache:
        cache = Path(own_cache) if cache is None else cache
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(guarded, m) for m in mutants]
            for future in concurrent.futures.as_completed(futures):
                if report:
                    report(future.result())
            return [f.result() for f in futures]


def revision(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD``, with ``+ uncommitted changes`` where the working tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True, check=False).stdout.strip()
    return f"{head or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def main(argv: Sequence[str] | None = None) -> list[Outcome]:
    parser = argparse.ArgumentParser(prog="python -m experiments.tools.mutation_testing",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=[], metavar="ID", help="run these mutants only")
    parser.add_argument("--sample", type=int, metavar="K", help="run K mutants drawn at random")
    parser.add_argument("--cheap", action="store_true", help="draw from the mutants whose tests take seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (each pytest uses its own cores)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per mutant before it counts as timeout")
    parser.add_argument("--out", type=Path, help="write the markdown table here (e.g. docs/mutation.md)")
    parser.add_argument("--list", action="store_true", help="list the mutants and whether each still applies")
    args = parser.parse_args(argv)
    pool = [m for m in MUTANTS if m.id in CHEAP] if args.cheap else MUTANTS
    try:
        chosen = select(pool, args.only, args.sample, args.seed)
    except ValueError as e:
        parser.error(str(e))
    if args.list:
        for m in chosen:
            try:
                mutate((ROOT / m.file).read_text(), m)
                state = "applies"
            except (StaleMutant, FileNotFoundError) as e:
                state = f"STALE ({e})"
            print(f"{m.id:45s} {m.file:32s} {state}")
        return []
    started, date = time.monotonic(), datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"{len(chosen)} mutants, {args.jobs} at a time", flush=True)
    outcomes = run_mutants(chosen, args.jobs, timeout=args.timeout, report=lambda o: print(
        f"{o.status:8s} {o.mutant.id:45s} {o.seconds:6.0f} s  {o.killer}", flush=True))
    wall = time.monotonic() - started
    text = markdown(outcomes, revision(), date, wall, args.jobs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text.splitlines()[2])
    if any(o.status != "killed" for o in outcomes):
        sys.exit(1)
    return outcomes


if __name__ == "__main__":
    main()
