"""What the learned count costs: OPIQ's environment steps per second and device memory per run with
``--count-features cfn`` (the coin-flip network) against the sketch's counts, on the chain, the maze and Montezuma's
Revenge, on one card in one call.

* the chain and the maze: the compiled trainer of ``opiq-jax bench`` (OPIQ at the paper's settings, float32) with
  SimHash codes, exact cell ids and the learned count, at the experiments' number of runs (20 and 8) and at a wide
  one, each timed as the best of two chunks once every step trains;
* Montezuma: the agent of ``experiments/bench/montezuma_bench.py`` (learning overlapped with the emulators) on a
  pool of 16 environments as 2 runs of 8, the layout of the Montezuma comparison, with the frame feature and with
  the learned count.

Memory per run is XLA's own figure for the compiled program (arguments, outputs and temporaries, less what is
aliased) divided by the runs, beside the training state per run from the shapes (Montezuma: at the paper's 1M-frame
replay). Rates of the same environment and number of runs are comparable; each row is timed once in this process.

Writes ``--out``: ``cost.json`` (the settings and every row, saved after each, so a call cut short keeps what it
measured), ``README.md`` (the table, with each learned-count row's ratio to the sketch's rows) and ``run_info.json``
(the card, jax, the command and the revision).

Run: ``python -m experiments.bench.learned_count_cost --out DIR``; ``--quick`` is a tiny CPU run of the same code.

Reaches inside: the trainer's timing helpers (``opiq_jax.benchmark.throughput``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from experiments.bench.report import compiles_note, keep_row, unless_out_of_memory, write_report
from experiments.tools.command_line import command_line

SKETCH_COUNTS = {"chain": ("simhash", "exact"), "maze": ("simhash", "exact"), "montezuma": ("simhash",)}
"""The hashed counts each environment is timed with beside the learned one (Montezuma's default counts its frame
feature; its ``count_features`` value is the default's name)."""
LEARNED = "cfn"
GIB = 2**30


def count_name(env: str, counts: str) -> str:
    """How the table names ``counts`` on ``env``."""
    if counts == LEARNED:
        return "learned (cfn)"
    return "frame feature" if env == "montezuma" else {"simhash": "SimHash", "exact": "exact cell ids"}[counts]


@dataclass
class Args:
    out: Path = Path("results/learned-count-cost")
    """Folder for cost.json, README.md and run_info.json."""
    envs: tuple[Literal["chain", "maze", "montezuma"], ...] = ("chain", "maze", "montezuma")
    """The environments timed, in this order."""
    chain_runs: tuple[int, ...] = (20, 4096)
    """Numbers of chain runs timed: the chain experiment's 20 seeds and a wide sweep's."""
    maze_runs: tuple[int, ...] = (8, 512)
    """Numbers of maze runs timed: the maze experiment's 8 seeds and a wide sweep's."""
    steps: int = 1000
    """Environment steps per run in one timed chunk of the chain (the maze's is a quarter of it)."""
    montezuma_pool: int = 16
    """Montezuma environments in the pool."""
    montezuma_envs_per_run: int = 8
    """Montezuma environments per run (the pool is pool / this many runs)."""
    montezuma_steps: int = 500
    """Timed agent steps per Montezuma environment (after a warm-up chunk of as many)."""
    montezuma_buffer: int = 100_000
    """Replay frames per Montezuma run while timed (the step's work does not depend on it)."""
    quick: bool = False
    """Two chain runs and one maze run for a few steps (a CPU test of this script)."""

    def runs_for(self, env: str) -> tuple[int, ...]:
        if self.quick:
            return {"chain": (2,), "maze": (1,)}.get(env, ())
        return {"chain": self.chain_runs, "maze": self.maze_runs}.get(env, ())

    def steps_for(self, env: str) -> int:
        steps = 20 if self.quick else self.steps
        return max(steps // 4, 1) if env == "maze" else steps


def time_trainer(env: str, counts: str, runs: int, steps: int) -> dict:
    """The compiled trainer on ``env`` at ``runs`` runs counting ``counts``: its rate and memory, or its error."""
    from opiq_jax.benchmark.options import Bench
    from opiq_jax.benchmark.throughput import measure_trainer

    static = Bench(envs=(env,), count_features=counts, steps_per_measure=steps).static_for(env)

    def measure() -> dict:
        m = measure_trainer(static, runs)
        return dict(steps_per_s=m.steps_per_s, compile_s=m.compile_s, compiles_timed=m.compiles_timed,
                    program_bytes_per_run=per_run(m.program_bytes, runs),
                    state_bytes_per_run=per_run(m.state_bytes, runs))

    return unless_out_of_memory(measure, env=env, counts=counts, runs=runs)


def time_montezuma(counts: str, args: Args) -> dict:
    """Montezuma's agent on one pool counting ``counts``: its rate and memory."""
    from experiments.bench.montezuma_bench import time_agent

    row = time_agent(args.montezuma_pool, args.montezuma_steps, args.montezuma_buffer,
                     envs_per_run=args.montezuma_envs_per_run, overrides=dict(count_features=counts))
    return dict(env="montezuma", counts=counts, runs=row["runs"], steps_per_s=row["env_steps_per_second"],
                compile_s=row["first_call_seconds"], compiles_timed=row["compiles_timed"],
                program_bytes_per_run=per_run(row["program_bytes"], row["runs"]),
                state_bytes_per_run=row["paper_state_bytes_per_run"], error=None)


def per_run(total: int | None, runs: int) -> float | None:
    return None if total is None else total / runs


def plan(args: Args) -> list[tuple[str, str, int | None]]:
    """(environment, counts, runs) in the order timed: at each number of runs, the sketch's counts then the learned
    one, so rows compared with each other are timed next to each other. Montezuma's runs come from its pool."""
    jobs = []
    for env in args.envs:
        counts = (*SKETCH_COUNTS[env], LEARNED)
        if env == "montezuma":
            jobs += [] if args.quick else [(env, c, None) for c in counts]
        else:
            jobs += [(env, c, runs) for runs in args.runs_for(env) for c in counts]
    return jobs


def gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GIB:.3f}"


def ratio_text(row: dict, rows: list[dict]) -> str:
    """A learned-count row's rate as a fraction of each sketch row's at the same environment and runs."""
    if row["counts"] != LEARNED or row.get("error"):
        return ""
    peers = [r for r in rows if r["env"] == row["env"] and r["runs"] == row["runs"] and r["counts"] != LEARNED
             and not r.get("error")]
    return "; ".join(f"{row['steps_per_s'] / r['steps_per_s']:.2f} of {count_name(r['env'], r['counts'])}"
                     for r in peers)


def table(rows: list[dict], device: str) -> str:
    lines = [f"OPIQ's environment steps per second (all runs together) and device memory per run on {device}, by what "
             "is counted; compiles excluded.", "",
             "| environment | runs | counts | steps/s | steps/s per run | learned / hashed | program GiB per run "
             "| state GiB per run |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['env']} | {r['runs']} | {count_name(r['env'], r['counts'])} | {r['error']} "
                         "| | | | |")
            continue
        lines.append(f"| {r['env']} | {r['runs']} | {count_name(r['env'], r['counts'])} | {r['steps_per_s']:,.0f} "
                     f"| {r['steps_per_s'] / r['runs']:,.0f} | {ratio_text(r, rows)} | "
                     f"{gib(r['program_bytes_per_run'])} | {gib(r['state_bytes_per_run'])} |")
    lines += compiles_note([f"{r['env']} {r['counts']} at {r['runs']} runs" for r in rows if r.get("compiles_timed")])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    if min((*args.chain_runs, *args.maze_runs, args.montezuma_pool, args.montezuma_envs_per_run, args.steps,
            args.montezuma_steps)) < 1:
        raise SystemExit("learned_count_cost: error: every number of runs, environments and steps must be >= 1")
    if args.montezuma_pool % args.montezuma_envs_per_run:
        raise SystemExit(f"learned_count_cost: error: --montezuma-pool {args.montezuma_pool} is not whole runs of "
                         f"--montezuma-envs-per-run {args.montezuma_envs_per_run}")
    import jax  # after the arguments are checked: a typo costs no backend start

    device, started, rows = jax.devices()[0].device_kind, time.perf_counter(), []
    args.out.mkdir(parents=True, exist_ok=True)
    for env, counts, runs in plan(args):
        row = (time_montezuma(counts, args) if env == "montezuma"
               else time_trainer(env, counts, runs, args.steps_for(env)))
        keep_row(args.out / "cost.json", device, args, rows, row, f"{env}, {counts}, {row['runs']} runs")
    text = table(rows, device)
    command = command_line("experiments.bench.learned_count_cost", argv)
    write_report(args.out, "What the learned count costs", command, text, device, started, args)
    print(text)


if __name__ == "__main__":
    main()
