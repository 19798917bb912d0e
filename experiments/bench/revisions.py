"""The same benchmarks for two or more source trees of the project, alternating, in one process tree on one card.

A change that must not slow the trainer (a refactor, a new contract) is checked by timing the code before and after
it on the same card in the same call: ``opiq-jax bench`` on the chain and the maze, and
``experiments/bench/montezuma_bench.py`` on Montezuma's Revenge. Each tree runs each benchmark in a subprocess of
its own, from its own folder (``PYTHONPATH=TREE``, made importable by :mod:`experiments.tools.source_tree`), and the
trees take turns within each round, in reverse order every other round, so a drift of the card's clock or its host
over the call touches both alike. The table gives each tree's best rate and, per round, its ratio to the first tree's.

A tree is a folder holding a revision's ``opiq_jax/``, ``envs/`` and ``experiments/``, for example
``git archive REV -- pyproject.toml opiq_jax envs experiments | tar -x -C bench-trees/REV``; ``.`` is this
working tree.

Writes ``--out``: ``revisions.json`` (the settings and every rate of every round, with each subprocess's
wall-clock), ``README.md`` (the table: the best rate per tree over the rounds, and each tree's ratio to the first)
and ``run_info.json`` (the card, the command, the trees and this tree's revision). Each benchmark's own files are
kept under ``raw/``.

Run: ``python -m experiments.bench.revisions --trees before=bench-trees/REV after=. --out DIR``; ``--quick`` is a
tiny CPU run of the same code (a test).

Reaches inside: opiq_jax.store.files, for its atomic writes (a call cut short keeps the rates it measured).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
CALLERS_PREALLOCATE = os.environ.get(PREALLOCATE)
"""How the caller's JAX allocates, which every benchmark's child gets back (None: JAX's default, 75 % of the card
at start)."""
if __name__ == "__main__":
    # This process starts each tree's benchmarks in a child and waits. Importing opiq_jax starts JAX (gymnax makes
    # arrays as it is imported), and JAX holding 75 % of the card here left the children of an 80 GB H100 out of
    # memory. So, run as a script, it allocates only what it uses.
    os.environ[PREALLOCATE] = "false"

import tyro  # noqa: E402

from experiments.tools.source_tree import importable  # noqa: E402
from experiments.bench.report import portable_settings, write_report  # noqa: E402
from experiments.tools.command_line import command_line  # noqa: E402
from opiq_jax.reporting import portable  # noqa: E402
from opiq_jax.store.files import atomic_write_text  # noqa: E402


@dataclass(frozen=True)
class Job:
    """One benchmark configuration: its label, its command's arguments after ``python -m``, and how to read its
    rate (environment steps per second) from the folder it wrote."""

    label: str
    module_args: tuple[str, ...]
    read_rate: Callable[[Path], float]


def trainer_rate(env: str) -> Callable[[Path], float]:
    """The rate of ``opiq-jax bench``'s trainer row for ``env`` (one number of runs is timed per job)."""
    def read(folder: Path) -> float:
        rows = json.loads((folder / "bench.json").read_text())["envs"][env]["rows"]
        return max(row["trainer"]["steps_per_s"] for row in rows if row["trainer"].get("steps_per_s"))
    return read


def montezuma_rate(kind: str) -> Callable[[Path], float]:
    """The rate of ``montezuma_bench``'s rows of ``kind`` ('agent' or 'raw' EnvPool) on one device."""
    def read(folder: Path) -> float:
        rows = json.loads((folder / "montezuma_bench.json").read_text())["rows"]
        return max(row["env_steps_per_second"] for row in rows if row["kind"] == kind and row.get("devices", 1) == 1)
    return read


def bench_job(env: str, runs: int, precision: str, steps: int, extra: tuple[str, ...] = ()) -> Job:
    """``opiq-jax bench`` on ``env`` at exactly ``runs`` runs, OPIQ at the paper's settings, no plain baseline."""
    args = ("opiq_jax", "bench", "--envs", env, "--min-runs", str(runs), "--max-runs", str(runs),
            "--precision", precision, "--steps-per-measure", str(steps), "--repeats", "2", "--no-baseline",
            "--no-progress", "--probe-bytes", str(2**28), "--matmul-size", "2048", *extra)
    name = f"{env}, {runs} runs, {precision}" + (f" ({' '.join(extra)})" if extra else "")
    return Job(name, args, trainer_rate(env))


def montezuma_job(pool: int, steps: int, buffer_size: int) -> Job:
    """``montezuma_bench`` at one pool size, the agent overlapped with its emulators (the default program)."""
    args = ("experiments.bench.montezuma_bench", "--pool-sizes", str(pool), "--steps", str(steps),
            "--buffer-size", str(buffer_size), "--no-strict")
    return Job(f"Montezuma, {pool} environments, OPIQ agent", args, montezuma_rate("agent"))


def default_jobs(quick: bool, montezuma_pools: tuple[int, ...] = (16,)) -> list[Job]:
    """The default programs of the chain and the maze in float32 and bfloat16, and Montezuma's agent at each pool
    size; ``quick``: a few runs and steps of the chain and the maze, for a CPU test."""
    if quick:
        return [bench_job("chain", 2, "float32", 20), bench_job("maze", 1, "float32", 10)]
    return [bench_job("chain", 4096, "float32", 1000), bench_job("chain", 4096, "bfloat16", 1000),
            bench_job("maze", 512, "float32", 250), bench_job("maze", 1024, "bfloat16", 250),
            *(montezuma_job(pool, 1000, 20000) for pool in montezuma_pools)]


def child_environment(tree: Path) -> dict[str, str]:
    """The environment a benchmark runs in: this process's, with ``tree`` first on the path and JAX allocating as the
    caller's does (not as this waiting process does)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
    env.pop(PREALLOCATE, None)
    return env if CALLERS_PREALLOCATE is None else dict(env, **{PREALLOCATE: CALLERS_PREALLOCATE})


def run_job(job: Job, tree: Path, folder: Path) -> dict:
    """Runs ``job`` with ``tree``'s code from ``tree``'s folder; returns its rate and wall-clock, or its error."""
    tree = importable(tree.resolve())
    env = child_environment(tree)
    out_args = ("--out", str(folder.resolve()))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *job.module_args, *out_args], cwd=tree, env=env,
                          capture_output=True, text=True)
    seconds = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        return dict(rate=None, seconds=seconds, error=done.stderr.strip().splitlines()[-1:] or ["exit status"])
    return dict(rate=job.read_rate(folder), seconds=seconds, error=None)


def best_rates(rounds: list[dict], labels: list[str], job: str) -> dict[str, float | None]:
    """Each tree's fastest rate of ``job`` over the rounds (None where it never ran)."""
    def best(label: str) -> float | None:
        rates = [r[job][label]["rate"] for r in rounds if r[job][label]["rate"] is not None]
        return max(rates) if rates else None
    return {label: best(label) for label in labels}


def paired_ratios(rounds: list[dict], label: str, first: str, job: str) -> list[float]:
    """``label``'s rate over ``first``'s within each round where both ran: the two were timed minutes apart, so a
    slow stretch of the card or its host touches both, where the best rates may come from different stretches."""
    pairs = [(r[job][label]["rate"], r[job][first]["rate"]) for r in rounds if job in r and label in r[job]
             and first in r[job]]
    return [a / b for a, b in pairs if a is not None and b is not None]


def ratio_cells(best: dict[str, float | None], ratios: list[float], label: str, first: str) -> str:
    """The best rates' ratio, then the paired ratios' median and range (n/a where a tree never ran)."""
    fastest = "n/a" if None in (best[label], best[first]) else f"{best[label] / best[first]:.3f}"
    if not ratios:
        return f"{fastest} | n/a"
    median = statistics.median(ratios)
    spread = f" ({min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)" if len(ratios) > 1 else ""
    return f"{fastest} | {median:.3f}{spread}"


def table(rounds: list[dict], labels: list[str], jobs: list[Job], device: str) -> str:
    """The README table: the best rate of each tree per job, and per other tree its ratio to the first tree's:
    of the best rates, and the median of the rounds' paired ratios with their range."""
    first = labels[0]
    head = ["| benchmark | " + " | ".join(f"{label} steps/s" for label in labels) + " | "
            + " | ".join(f"{label} / {first}, best | {label} / {first}, per round" for label in labels[1:]) + " |",
            "|---|" + "---|" * (len(labels) + 2 * (len(labels) - 1))]
    rows = []
    for job in jobs:
        best = best_rates(rounds, labels, job.label)
        rates = " | ".join("failed" if best[label] is None else f"{best[label]:,.0f}" for label in labels)
        ratios = " | ".join(ratio_cells(best, paired_ratios(rounds, label, first, job.label), label, first)
                            for label in labels[1:])
        rows.append(f"| {job.label} | {rates} | {ratios} |")
    return "\n".join([f"Environment steps per second on {device}, the fastest of {len(rounds)} round(s) per tree; "
                      "within a round the trees take turns, in reverse order every other round, so that a drift "
                      "over the call favours neither (compiles excluded). Per round: the median of the rounds' "
                      "ratios, each of two rates timed minutes apart, and their range.", "", *head, *rows])


def turn_order(labels: list[str], number: int) -> list[str]:
    """The trees' order in round ``number``: as given, then reversed, and so on (A B, B A, A B, ...)."""
    return labels if number % 2 == 0 else labels[::-1]


@dataclass
class Args:
    trees: tuple[str, ...] = ("before=bench-trees/before", "after=.")
    """LABEL=FOLDER for each source tree, the first being the one the others are compared with."""
    rounds: int = 2
    """How many times each tree runs every benchmark (taking turns, the order reversed every other round)."""
    out: Path = Path("results/bench-revisions")
    """Folder for revisions.json, README.md and run_info.json."""
    quick: bool = False
    """A few runs and steps of the chain and the maze only (a CPU test of this script)."""
    envs: tuple[str, ...] = ("chain", "maze", "montezuma")
    """The environments whose benchmarks run (the others' are left out, for a short call)."""
    montezuma_pools: tuple[int, ...] = (16,)
    """Montezuma's numbers of environments, a job each: at 16 one round's rate can differ from the next by a
    quarter on a shared host; a larger pool spends less of its step on the host."""


def parse_trees(specs: tuple[str, ...]) -> dict[str, Path]:
    """``LABEL=FOLDER`` pairs as a dict, refusing a malformed pair, a repeated label or a folder without the
    package, in one line each."""
    trees: dict[str, Path] = {}
    for spec in specs:
        label, sep, folder = spec.partition("=")
        if not sep or not label or not folder:
            raise SystemExit(f"--trees: {spec!r} is not LABEL=FOLDER")
        if label in trees:
            raise SystemExit(f"--trees: the label {label!r} is given twice")
        if not (Path(folder) / "opiq_jax" / "__init__.py").is_file():
            raise SystemExit(f"--trees: {folder!r} holds no opiq_jax package")
        trees[label] = Path(folder)
    if len(trees) < 2:
        raise SystemExit("--trees: give at least two trees to compare")
    return trees


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    trees = parse_trees(args.trees)
    if not args.montezuma_pools or min(args.montezuma_pools) < 1:
        raise SystemExit("--montezuma-pools: every pool needs at least one environment")
    jobs = [job for job in default_jobs(args.quick, args.montezuma_pools)
            if job.label.split(",")[0].lower() in args.envs]
    labels = list(trees)
    import jax  # after the arguments are checked: a typo costs no backend start

    device = jax.devices()[0].device_kind
    started, rounds = time.perf_counter(), []
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every job: a call cut short keeps the rates it measured
        atomic_write_text(args.out / "revisions.json", json.dumps(dict(
            device=device, settings=portable_settings(args), trees={k: portable(str(v)) for k, v in trees.items()},
            jobs=[dict(label=j.label, command=["python", "-m", *j.module_args]) for j in jobs], rounds=rounds),
            indent=1))
    for number in range(args.rounds):
        rounds.append({})
        for index, job in enumerate(jobs):
            rounds[-1][job.label] = {}
            for label in turn_order(labels, number):
                folder = args.out / "raw" / f"round{number}" / f"job{index}-{label}"
                rounds[-1][job.label][label] = run_job(job, trees[label], folder)
                print(f"round {number + 1}: {job.label}, {label}: {rounds[-1][job.label][label]}", file=sys.stderr)
                save()
    text = table(rounds, labels, jobs, device)
    command = command_line("experiments.bench.revisions", argv)
    write_report(args.out, "Benchmarks of several source trees", command, text, device, started, args)
    print(text)


if __name__ == "__main__":
    main()
