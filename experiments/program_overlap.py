"""How fast a figure's programs run one after another, side by side in threads, or in processes at once.

A figure such as the maze's (13 methods x 8 seeds) trains as several compiled programs: the methods
that differ only in numbers as one (72 runs), and DORA, DQN + RND and BSP each as a program of its own
(16, 8 and 8 runs). Small programs leave most of a GPU idle: their step time is latency (kernel
launches, the host waiting on a condition), not work. This script measures each program's rate in one
of three ways, after compiling it and filling its replay past one batch:

* ``sequential``: each program alone, one after another (what ``opiq_jax.train`` does by default);
* ``threads``: every program in one process, each driven by a thread of its own, all timed at once;
* ``processes``: every program in a process of its own, all timed at once (the processes wait for each
  other at a barrier after compiling);
* ``joint``: every program's step in one compiled scan (``experiments.joint_programs.joint_train_chunk``).

For each it projects the wall-clock of ``--full-steps`` steps (the paper's 1M for the maze): the sum of
the programs' times when they run one after another, the longest when they run at once. Writes
``overlap_<mode>.json`` and ``overlap_<mode>.md`` into ``--out``.

Run: ``python -m experiments.program_overlap --env maze --mode processes``.

Reaches inside: the trainer and the compiled chunks, to step several programs in one scan
(experiments/joint_programs.py).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

if not __package__:  # run by path: import as python -m does, from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import tyro

from experiments.compare_methods import ABLATIONS, BASELINES
from experiments.joint_programs import joint_train_chunk
from opiq_jax.benchmark.throughput import run_until_learning
from opiq_jax.common.config import stack_hparams
from opiq_jax.running.plan import plan_experiment
from opiq_jax.runs.compiled import chunk_program, compiled_trainer
from opiq_jax.runs.experiment import Experiment, run_keys_for, split_by_program

FIGURE_METHODS = tuple(dict.fromkeys(BASELINES + ABLATIONS))


@dataclass
class Args:
    env: Literal["chain", "maze"] = "maze"
    """Environment (the paper's settings)."""
    mode: Literal["sequential", "threads", "processes", "joint"] = "sequential"
    """How the programs run while timed (see the module's docstring)."""
    seeds: int = 8
    """Seeds per method (the paper's maze figure: 8)."""
    methods: tuple[str, ...] = FIGURE_METHODS
    """Methods of the figure."""
    steps: int = 2000
    """Steps per timed chunk (each program's chunk length)."""
    chunks: int = 3
    """Timed chunks per program."""
    full_steps: int = 1_000_000
    """Steps of the whole figure, for the projected wall-clock."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The networks' compute precision."""
    maze_torso: Literal["auto", "xla", "pallas"] = "auto"
    """The maze network's convolutions (``StaticConfig.maze_torso``)."""
    target_values: Literal["auto", "table", "network"] = "auto"
    """The target network's values (``StaticConfig.target_values``)."""
    out: Path = Path("results/program-overlap")
    """Where the table goes."""
    program: str | None = None
    """(processes mode, internal) the one program this process times."""
    barrier: Path | None = None
    """(processes mode, internal) the folder where the processes meet after compiling."""


def figure_programs(args: Args) -> dict[str, Experiment]:
    """The figure's programs, as ``opiq_jax.train`` would split them."""
    options = dict(steps=args.steps * (args.chunks + 2), log_every=args.steps, precision=args.precision,
                   maze_torso=args.maze_torso, target_values=args.target_values)
    return split_by_program(plan_experiment(args.env, args.methods, args.seeds, options=options))


def initial_state(experiment: Experiment):
    _, init, _ = compiled_trainer(experiment.static)
    return init(*run_keys_for(experiment), stack_hparams(experiment.hparams()))


def timed_chunks(chunk, state, chunks: int) -> tuple[object, float, float]:
    """``chunks`` calls of ``chunk``, each waited for: the state after them, and the interval's start and end."""
    started = time.time()
    for _ in range(chunks):
        state, metrics = chunk(state)
        jax.block_until_ready(metrics)
    return state, started, time.time()


class Timed:
    """One program compiled and warmed up (its replay past one batch), ready to time."""

    def __init__(self, name: str, experiment: Experiment):
        self.name, self.runs, self.steps = name, len(experiment.runs), experiment.static.log_every
        trainer = compiled_trainer(experiment.static)[0]
        self.state = initial_state(experiment)
        started = time.perf_counter()
        self.chunk = chunk_program(trainer.train_chunk, self.state).lower(self.state).compile()
        self.compile_seconds = time.perf_counter() - started
        self.state = jax.block_until_ready(run_until_learning(self.chunk, self.state, experiment.static))

    def time_chunks(self, chunks: int) -> dict:
        self.state, started, ended = timed_chunks(self.chunk, self.state, chunks)
        return program_row(self.name, self.runs, self.steps * chunks, started, ended, self.compile_seconds)


def program_row(name: str, runs: int, steps: int, started: float, ended: float, compile_seconds: float) -> dict:
    """A program's timed interval: its steps per second (each steps all its runs) and env steps per second."""
    seconds = ended - started
    return dict(program=name, runs=runs, steps=steps, started=started, ended=ended, seconds=seconds,
                steps_per_second=steps / seconds, env_steps_per_second=runs * steps / seconds,
                compile_seconds=compile_seconds)


def projected_seconds(rows: list[dict], full_steps: int, at_once: bool) -> float:
    """The figure's wall-clock at these rates: the longest program when they run at once, else their sum."""
    times = [full_steps / r["steps_per_second"] for r in rows]
    return max(times) if at_once else sum(times)


def run_sequential(args: Args, programs: dict[str, Experiment]) -> list[dict]:
    rows = []
    for name, experiment in programs.items():
        rows.append(Timed(name, experiment).time_chunks(args.chunks))
        print(rows[-1], flush=True)
    return rows


def run_threads(args: Args, programs: dict[str, Experiment]) -> list[dict]:
    timed = [Timed(name, experiment) for name, experiment in programs.items()]
    rows: list[dict] = []
    threads = [threading.Thread(target=lambda t=t: rows.append(t.time_chunks(args.chunks))) for t in timed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(rows, key=lambda r: list(programs).index(r["program"]))


def run_joint(args: Args, programs: dict[str, Experiment]) -> list[dict]:
    """Every program in one scan: one row per program, all with the joint program's interval."""
    states = tuple(initial_state(e) for e in programs.values())
    agents = tuple(compiled_trainer(e.static)[0].agent for e in programs.values())
    started = time.perf_counter()
    chunk = jax.jit(functools.partial(joint_train_chunk, agents), donate_argnums=0).lower(states).compile()
    compile_seconds = time.perf_counter() - started
    static = next(iter(programs.values())).static  # the programs share their schedule (joint_train_chunk checks it)
    warm_up = -(-(static.batch_size + 1) // static.log_every)  # the chunks run_until_learning takes from step 0
    states, _, _ = timed_chunks(chunk, states, warm_up)
    states, started, ended = timed_chunks(chunk, states, args.chunks)
    return [program_row(name, len(e.runs), args.steps * args.chunks, started, ended, compile_seconds)
            for name, e in programs.items()]


def run_processes(args: Args, programs: dict[str, Experiment]) -> list[dict]:
    """One child process per program; each compiles, waits at the barrier, times its chunks, writes its row."""
    barrier = Path(tempfile.mkdtemp(prefix="program_overlap_"))
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # the processes share the card's memory
    argv = [sys.executable, "-m", "experiments.program_overlap", "--env", args.env, "--seeds", str(args.seeds),
            "--steps", str(args.steps), "--chunks", str(args.chunks), "--precision", args.precision,
            "--maze-torso", args.maze_torso, "--target-values", args.target_values,
            "--methods", *args.methods, "--out", str(args.out), "--barrier", str(barrier)]
    children = [subprocess.Popen([*argv, "--program", name], env=env, cwd=Path(__file__).resolve().parents[1])
                for name in programs]
    if any(child.wait() != 0 for child in children):
        raise SystemExit("program_overlap: error: a program's process failed (its output is above)")
    return [json.loads((barrier / f"{name}.json").read_text()) for name in programs]


def run_one_of_several(args: Args, programs: dict[str, Experiment]) -> None:
    """The child's part: compile, say ready, wait for every program to be ready, time, write the row."""
    timed = Timed(args.program, programs[args.program])
    (args.barrier / f"{args.program}.ready").touch()
    while len(list(args.barrier.glob("*.ready"))) < len(programs):
        time.sleep(0.01)
    row = timed.time_chunks(args.chunks)
    (args.barrier / f"{args.program}.json").write_text(json.dumps(row))


def report(args: Args, rows: list[dict]) -> dict:
    at_once = args.mode != "sequential"
    device = jax.devices()[0].device_kind
    wall = max(r["ended"] for r in rows) - min(r["started"] for r in rows)
    result = dict(device=device, env=args.env, mode=args.mode, seeds=args.seeds, precision=args.precision,
                  maze_torso=args.maze_torso, target_values=args.target_values,
                  xla_flags=os.environ.get("XLA_FLAGS", ""), rows=rows, timed_wall_seconds=wall,
                  projected_seconds=projected_seconds(rows, args.full_steps, at_once), full_steps=args.full_steps)
    lines = [f"{args.env}, {args.precision} (maze torso {args.maze_torso}, target values {args.target_values}), "
             f"{args.seeds} seeds, programs {args.mode} on one {device}"
             f"{' with XLA_FLAGS=' + result['xla_flags'] if result['xla_flags'] else ''}.", "",
             "| program | runs | steps/s | env steps/s | compile (s) | projected for the figure (s) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['program']} | {r['runs']} | {r['steps_per_second']:,.0f} | {r['env_steps_per_second']:,.0f} | "
              f"{r['compile_seconds']:.0f} | {args.full_steps / r['steps_per_second']:,.0f} |" for r in rows]
    lines += ["", f"Projected wall-clock of {args.full_steps:,} steps: {result['projected_seconds']:,.0f} s "
              f"({'the longest program' if at_once else 'the sum of the programs'}); timed: {wall:.1f} s."]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"overlap_{args.mode}.json").write_text(json.dumps(result, indent=1))
    (args.out / f"overlap_{args.mode}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return result


def main(argv: list[str] | None = None) -> dict | None:
    args = tyro.cli(Args, args=argv)
    if min(args.seeds, args.steps, args.chunks, args.full_steps) < 1:
        raise SystemExit("program_overlap: error: --seeds, --steps, --chunks and --full-steps must be >= 1")
    programs = figure_programs(args)
    if args.program is not None:
        return run_one_of_several(args, programs)
    run = dict(sequential=run_sequential, threads=run_threads, processes=run_processes, joint=run_joint)[args.mode]
    return report(args, run(args, programs))


if __name__ == "__main__":
    main()
