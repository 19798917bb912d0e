"""Project the cost of the paper's Montezuma comparison from a short run's measured throughput.

Reads every program's ``run_info.json`` in a results folder of ``opiq-jax train`` (``plain/``, ``rnd/``,
``bsp/``, or the folder itself), or the ``timeboxed.json`` of a time-boxed run: its runs, device and
``env_steps_per_second`` (all runs together, compile excluded; ``--rate NAME=VALUE`` replaces a program's rate,
e.g. one measured over a longer call). Then, for
``--steps`` per run, it prints (and with ``--out`` writes) a markdown table of wall-clock hours:

* one card: the programs run one after another, as ``opiq-jax train`` runs them;
* ``--cards`` cards: each program gets a group of cards that divides its runs (the trainer splits a
  program's runs over the visible cards only when they divide), the groups chosen to make the slowest
  program finish first. Runs never communicate, so the assumption is that each card keeps the measured
  per-card throughput (env steps/s) and a program's time divides by its group size, but no run steps faster than
  ``--per-run-cap`` (the rate one run reaches alone: with one environment per run, each step waits for its
  emulator and its network, so more cards cannot shorten a run past that).

The card measured is the one in ``run_info.json``; the other card (H100 for H200, H200 for H100) is a
scaled estimate, not a measurement: the rate times ``--h100-per-h200`` (default 0.741, the chain bench
in ``docs/results/target_table``: 836,755 env steps/s on one H100 against 1,129,707 on one H200, 4096 runs).
Run: ``python -m experiments.bench.montezuma_projection docs/results/montezuma-comparison --rate rnd=2537.1``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import tyro


@dataclass
class Args:
    folder: tyro.conf.Positional[Path]
    """A results folder of ``opiq-jax train`` (its program subfolders are read)."""
    steps: float = 12_500_000
    """Environment steps per run to project (the paper's 12.5M)."""
    cards: int = 8
    """Cards of the multi-GPU host."""
    h100_per_h200: float = 0.741
    """Throughput ratio of one H100 to one H200 on this trainer (measured elsewhere, see the docstring)."""
    rate: tuple[str, ...] = ()
    """NAME=VALUE: use VALUE env steps/s for program NAME instead of its run_info.json's."""
    per_run_cap: float | None = None
    """Env steps/s one run reaches alone: no run is projected faster (default: no bound)."""
    out: Path | None = None
    """Also write the table here (markdown)."""


def read_programs(folder: Path, overrides: dict[str, float]) -> list[dict]:
    """One entry per program: name, runs, device and env steps/s."""
    infos = (sorted(folder.glob("*/run_info.json")) or sorted(folder.glob("*/timeboxed.json"))
             or [folder / "run_info.json" if (folder / "run_info.json").exists() else folder / "timeboxed.json"])
    programs = []
    for path in infos:
        info = json.loads(path.read_text())
        name = path.parent.name
        device = info.get("device") or info["gpus"][0]  # a time-boxed run names its cards
        programs.append({"name": name, "runs": info["runs"], "device": device,
                         "rate": overrides.get(name, info["env_steps_per_second"])})
    return programs


def program_rate(program: dict, rate: float, cards: int, per_run_cap: float | None) -> float:
    """Env steps/s of a program on ``cards`` cards, each keeping ``rate`` (one card's, all its runs), and no run
    faster than ``per_run_cap``."""
    total = cards * rate
    return total if per_run_cap is None else min(total, program["runs"] * per_run_cap)


def best_groups(programs: list[dict], cards: int, steps: float,
                per_run_cap: float | None = None) -> tuple[list[int], float]:
    """Card-group sizes (each dividing the program's runs, summing to at most ``cards``) minimising the slowest."""
    choices = [[g for g in range(1, min(p["runs"], cards) + 1) if p["runs"] % g == 0] for p in programs]
    best, best_time = None, float("inf")
    for groups in itertools.product(*choices):
        if sum(groups) > cards:
            continue
        slowest = max(p["runs"] * steps / program_rate(p, p["rate"], g, per_run_cap) for p, g in zip(programs, groups))
        if slowest < best_time or (slowest == best_time and sum(groups) > sum(best)):  # ties: more cards
            best, best_time = list(groups), slowest
    if best is None:  # fewer cards than programs: one after another on one card
        return [1] * len(programs), sum(p["runs"] * steps / program_rate(p, p["rate"], 1, per_run_cap)
                                        for p in programs)
    return best, best_time


def table(args: Args) -> str:
    overrides = {k: float(v) for k, v in (item.split("=", 1) for item in args.rate)}
    programs = read_programs(args.folder, overrides)
    measured = programs[0]["device"]
    h100 = "H100" in measured
    other = "H200 (scaled)" if h100 else "H100 (scaled)"
    scale = 1 / args.h100_per_h200 if h100 else args.h100_per_h200
    groups, _ = best_groups(programs, args.cards, args.steps, args.per_run_cap)

    def hours(p: dict, rate: float, g: int = 1) -> float:
        return p["runs"] * args.steps / program_rate(p, rate, g, args.per_run_cap) / 3600

    lines = [(f"Projection for {args.steps:,.0f} steps per run; measured on {measured}; {other} = measured rate "
              f"x {scale:.3f}."), "",
             (f"| program | runs | env steps/s ({measured}) | 1 card, measured card (h) | 1 card, {other} (h) "
              f"| cards of {args.cards} | {args.cards} cards, measured card (h) | {args.cards} cards, {other} (h) |"),
             "|---|---|---|---|---|---|---|---|"]
    for p, g in zip(programs, groups):
        lines.append(f"| {p['name']} | {p['runs']} | {p['rate']:,.0f} | {hours(p, p['rate']):.2f} "
                     f"| {hours(p, p['rate'] * scale):.2f} | {g} | {hours(p, p['rate'], g):.2f} "
                     f"| {hours(p, p['rate'] * scale, g):.2f} |")
    one = sum(hours(p, p["rate"]) for p in programs)
    many = max(hours(p, p["rate"], g) for p, g in zip(programs, groups))
    one_other = sum(hours(p, p["rate"] * scale) for p in programs)
    many_other = max(hours(p, p["rate"] * scale, g) for p, g in zip(programs, groups))
    lines.append(f"| **all** (1 card: one after another; {args.cards} cards: the slowest group) "
                 f"| {sum(p['runs'] for p in programs)} | | **{one:.2f}** | **{one_other:.2f}** | {sum(groups)} "
                 f"| **{many:.2f}** | **{many_other:.2f}** |")
    if args.per_run_cap is not None:
        lines.append(f"\nNo run projected faster than {args.per_run_cap:,.0f} env steps/s (`--per-run-cap`).")
    return "\n".join(lines) + "\n"


def main(args: Args) -> None:
    text = table(args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main(tyro.cli(Args))
