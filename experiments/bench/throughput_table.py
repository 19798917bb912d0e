"""The README's throughput table: this project, a plain vmapped JAX DQN and a per-process PyTorch loop, one card.

For each environment asked for (chain, maze, and Montezuma's Revenge where EnvPool is importable), in one process
on one card:

* **this project** at its best default-safe setting (:data:`SAFE_SETTINGS`: the defaults plus what
  docs/performance.md found safe for learning on that environment), OPIQ at the paper's settings, every run
  learning (an update per step; Montezuma: per 4 steps) (``opiq_jax.benchmark.throughput.measure_trainer``;
  Montezuma: the OPIQ agent on one EnvPool pool, ``experiments.bench.montezuma_bench.time_agent``);
* **the plain baseline** of ``opiq-jax bench`` (``opiq_jax/benchmark/plain.py``): a straightforward vmapped, jitted
  DQN with exact counts, one Python dispatch per step, at the same number of runs; on Montezuma its Atari form
  (``opiq_jax/benchmark/plain_atari.py``: the same pool, the Nature network, a hashed count table of the frame
  feature, a replay of whole transitions; ``experiments.bench.montezuma_bench.time_plain``) at the same number of runs;
* on Montezuma also EnvPool's **emulators alone** on the same pool, stepping random actions (the ceiling of any
  agent on that pool), given under the table;
* **a PyTorch loop in the authors' structure (one environment per process), not their code**
  (``experiments/bench/torch_loop.py``), per process, on the CPU and on the GPU, each in a subprocess of its own
  (skipped where torch is not importable).

Counts are exact cell counts on the chain and the maze for both JAX columns (the paper hashes with SimHash; the
PyTorch loop does, as the authors' code does); Montezuma counts the paper's 8 x 11 frame feature in every column.

Writes ``--out``: ``table.md`` (the README-ready table and its notes), ``README.md`` (the command, the table,
the files), ``throughput.json`` (every figure) and ``run_info.json`` (device, JAX version, command, wall-clock of
each measurement). The default sizes of the chain and the maze, and Montezuma's without its plain baseline,
finished in about five minutes on one H200, compiles included (Montezuma's plain baseline is not yet timed there;
its default replay of 20k whole transitions per run takes 69 GiB at 64 runs).
Run: ``CUDA_VISIBLE_DEVICES=0 python -m experiments.bench.throughput_table --out results/throughput-table``;
``--quick`` is a tiny CPU run of the same code (a test).

Reaches inside: opiq_jax.benchmark, the bench's timing of the trainer and its plain baseline at equal runs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import tyro

from opiq_jax.reporting import source_revision
from experiments.tools.command_line import command_line

SAFE_SETTINGS: dict[str, dict[str, str]] = {
    "chain": dict(precision="bfloat16", weight_storage="packed"),
    "maze": dict(precision="bfloat16"),
    "montezuma": {},
}
"""The settings beyond the defaults that this project's column uses, per environment. The chain: bfloat16 with
packed weight storage (on GPUs the lean backward pass comes with it); the maze: bfloat16 (the Pallas convolutions
and the target table come with it on GPUs); Montezuma: the defaults (float32, stepping overlapped with learning)."""

SAFE_REASONS: dict[str, str] = {
    "chain": "`--precision bfloat16 --weight-storage packed` (with the lean backward pass on GPUs): 100 chain seeds "
             "of four methods showed no change in learning",
    "maze": "`--precision bfloat16` (the Pallas convolutions and the target table come with it on GPUs): the whole "
            "maze figure in bfloat16 against the float32 one left 38 of 39 method-and-metric rows unchanged",
    "montezuma": "the defaults (float32; the pool steps while the agent learns): bfloat16's learning was not "
                 "checked there",
}
"""Why each environment's settings count as safe, as the table's notes state it."""

NAMES = {"chain": "chain", "maze": "maze", "montezuma": "Montezuma's Revenge"}
"""How the table names each environment."""

TORCH_LABEL = "a PyTorch loop in the authors' structure (one environment per process), not their code"


@dataclass
class Args:
    envs: tuple[Literal["chain", "maze", "montezuma"], ...] = ("chain", "maze", "montezuma")
    """Environments to measure, in this order (Montezuma is skipped where EnvPool is not importable)."""
    chain_runs: int = 2048
    """Runs of the chain, both JAX columns (the plain baseline fits 2048 on an H200)."""
    maze_runs: int = 512
    """Runs of the maze, both JAX columns."""
    maze_buffer: int = 20_000
    """Replay steps per maze run, both JAX columns (the plain baseline stores whole observations; the paper's 250k
    would not fit at these runs). The chain keeps its 10k."""
    montezuma_pool: int = 64
    """Environments (= runs) of the Montezuma pool."""
    steps: int = 1_000
    """Steps per run in one timed chunk of this project's trainer."""
    baseline_steps: int = 200
    """Steps per run (one dispatch each) in one timed interval of the plain baseline."""
    repeats: int = 2
    """Timed intervals per JAX measurement; the fastest counts."""
    montezuma_steps: int = 1_000
    """Timed agent steps per pool environment (after a warm-up chunk of the same length)."""
    montezuma_buffer: int = 100_000
    """Replay frames per Montezuma run (the step's work does not depend on it; the paper's 1M would not fit)."""
    montezuma_plain_steps: int = 1_000
    """Timed steps per pool environment of the plain baseline on Montezuma (one dispatch each; after a warm-up of as
    many, at least a batch and one)."""
    montezuma_plain_buffer: int = 20_000
    """Replay transitions per run of the plain baseline on Montezuma. It stores both stacks of every transition
    whole (56 KB each: 69 GiB for 64 runs of 20k); the step's work does not depend on it."""
    torch_steps: int = 2_000
    """Timed steps of the PyTorch loop per process on the chain and the maze."""
    montezuma_torch_steps: int = 1_000
    """Timed steps of the PyTorch loop per process on Montezuma (its replay: ``--montezuma-buffer`` stacks)."""
    torch_devices: tuple[str, ...] = ("cpu", "cuda")
    """Devices of the PyTorch loop (cuda is skipped where torch sees no GPU)."""
    quick: bool = False
    """A tiny run of the same code for a CPU test (a few runs and steps; the figures mean nothing)."""
    out: Path = Path("results/throughput-table")
    """The results folder."""


QUICK = dict(chain_runs=4, maze_runs=2, maze_buffer=1_000, montezuma_pool=2, steps=50, baseline_steps=10, repeats=1,
             montezuma_steps=20, montezuma_buffer=1_000, montezuma_plain_steps=5, montezuma_plain_buffer=200,
             torch_steps=30, montezuma_torch_steps=20)
"""What ``--quick`` sets."""


def resolved(args: Args) -> Args:
    """``args`` with ``--quick``'s sizes in place."""
    return dataclasses.replace(args, **QUICK) if args.quick else args


def say(message: str) -> None:
    """One progress line on stderr."""
    print(f"[throughput-table {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(log: dict[str, float], name: str, measure: Callable[[], Any]) -> Any:
    """``measure()``, with its wall-clock (compiles included) recorded in ``log[name]`` and said."""
    say(f"{name} ...")
    started = time.perf_counter()
    result = measure()
    log[name] = round(time.perf_counter() - started, 1)
    say(f"{name}: {log[name]} s")
    return result


def jax_static(env: str, args: Args, settings: dict[str, str]):
    """The static configuration of a chain or maze measurement: the bench's (exact counts) with ``settings``."""
    from opiq_jax.benchmark.options import Bench

    runs = args.chain_runs if env == "chain" else args.maze_runs
    buffer = None if env == "chain" else args.maze_buffer
    bench = Bench(envs=(env,), min_runs=runs, max_runs=runs, steps_per_measure=args.steps, buffer_size=buffer,
                  **settings)
    return bench.static_for(env)


def measure_jax_env(env: str, args: Args, log: dict[str, float]) -> dict[str, Any]:
    """This project's trainer and the plain baseline on ``env`` (chain or maze) at the same runs."""
    from opiq_jax.benchmark import throughput as bench

    runs = args.chain_runs if env == "chain" else args.maze_runs
    ours = jax_static(env, args, SAFE_SETTINGS[env])
    plain = jax_static(env, args, {})
    this = timed(log, f"{env}: this project, {runs} runs",
                 lambda: bench.measure_trainer(ours, runs, "opiq", args.repeats))
    baseline = timed(log, f"{env}: plain baseline, {runs} runs",
                     lambda: bench.measure_plain(plain, runs, args.baseline_steps, "opiq", args.repeats))
    return dict(env=env, runs=runs, settings=SAFE_SETTINGS[env], buffer_size=ours.buffer_size,
                count_features=ours.count_features, this=dataclasses.asdict(this),
                baseline=dataclasses.asdict(baseline), baseline_kind="plain vmapped JAX DQN with exact counts")


def measure_montezuma_plain(args: Args, log: dict[str, float]) -> dict[str, Any]:
    """The plain baseline on one EnvPool pool (``time_plain``); running out of device memory is a figure's error."""
    from experiments.bench import montezuma_bench
    from opiq_jax.benchmark.throughput import is_out_of_memory

    pool, steps = args.montezuma_pool, args.montezuma_plain_steps
    try:
        plain = timed(log, f"montezuma: plain baseline, pool of {pool}",
                      lambda: montezuma_bench.time_plain(pool, steps, buffer_size=args.montezuma_plain_buffer))
    except Exception as error:  # XlaRuntimeError and friends
        if not is_out_of_memory(error):
            raise
        return dict(error="out of memory", steps_timed=steps, buffer_size=args.montezuma_plain_buffer)
    return dict(steps_per_s=plain["env_steps_per_second"], first_call_s=plain["first_call_seconds"], steps_timed=steps,
                buffer_size=plain["buffer_size"], state_bytes_per_run=plain["state_bytes_per_run"],
                updates_timed_per_run=plain["updates_timed_per_run"], count_slots=plain["count_slots"],
                compiles_timed=plain["compiles_timed"])


def measure_montezuma(args: Args, log: dict[str, float]) -> dict[str, Any]:
    """The OPIQ agent and the plain baseline on one EnvPool pool each, and the pool's emulators alone stepping random
    actions."""
    from experiments.bench import montezuma_bench

    pool, steps = args.montezuma_pool, args.montezuma_steps
    agent = timed(log, f"montezuma: this project, pool of {pool}",
                  lambda: montezuma_bench.time_agent(pool, steps, buffer_size=args.montezuma_buffer))
    baseline = measure_montezuma_plain(args, log)
    raw = timed(log, f"montezuma: EnvPool alone, pool of {pool}", lambda: montezuma_bench.time_raw(pool, steps))
    return dict(env="montezuma", runs=pool, settings=SAFE_SETTINGS["montezuma"], count_features="8x11 frame, 8 levels",
                this=dict(steps_per_s=agent["env_steps_per_second"], first_call_s=agent["first_call_seconds"],
                          steps_timed=steps, buffer_size=agent["buffer_size"], compiles_timed=agent["compiles_timed"]),
                baseline=baseline,
                baseline_kind="plain vmapped JAX DQN with hashed counts of the frame feature",
                emulators=dict(steps_per_s=raw["env_steps_per_second"], first_call_s=raw["first_call_seconds"],
                               steps_timed=steps, kind="EnvPool's emulators alone, random actions",
                               compiles_timed=raw["compiles_timed"]))


@functools.lru_cache(maxsize=1)
def torch_sees_a_gpu() -> bool:
    """Whether torch, in a subprocess (this process's JAX keeps the card), finds a CUDA device."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def measure_torch(env: str, device: str, args: Args, log: dict[str, float]) -> dict[str, Any] | None:
    """The PyTorch loop on ``env`` and ``device`` in a subprocess of its own (JAX on the CPU there); None where
    torch is missing or sees no such device."""
    if importlib.util.find_spec("torch") is None:
        return None
    if device == "cuda" and not torch_sees_a_gpu():
        return None
    steps = args.montezuma_torch_steps if env == "montezuma" else args.torch_steps
    command = [sys.executable, "-m", "experiments.bench.torch_loop", "--env", env, "--steps", str(steps),
               "--device", device]
    if env == "montezuma":
        command += ["--buffer-size", str(args.montezuma_buffer)]
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = timed(log, f"{env}: PyTorch loop, one process, {device}",
                 lambda: subprocess.run(command, capture_output=True, text=True, env=environment,
                                        cwd=Path(__file__).resolve().parents[2]))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rate(value: float | None) -> str:
    """An environment-steps-per-second figure as the table prints it."""
    return "" if value is None else f"{value:,.0f}"


def table_row(row: dict[str, Any], torch_rows: dict[str, dict | None]) -> str:
    """One environment's line of the table."""
    this, base = row["this"].get("steps_per_s"), row["baseline"].get("steps_per_s")
    name = NAMES[row["env"]]
    base_text = rate(base) if base else row["baseline"].get("error") or ""
    ratio = f"{this / base:.2f}×" if this and base else ""
    cells = [(torch_rows.get(device) or {}).get("env_steps_per_second") for device in ("cpu", "cuda")]
    torch_text = [rate(c) if c else "not measured" for c in cells]
    return f"| {name} | {row['runs']:,} | {rate(this) or row['this'].get('error', '')} | {base_text} | {ratio} | " \
           f"{torch_text[0]} | {torch_text[1]} |"


def counts_note(rows: list[dict[str, Any]]) -> str:
    """The note on what each column counts."""
    envs = {r["env"] for r in rows}
    parts = []
    if envs & {"chain", "maze"}:
        parts.append("on the chain and the maze both JAX columns count exact cells (the paper counts SimHash codes; "
                     "`opiq-jax train` does too by default), the PyTorch loop SimHash codes")
    if "montezuma" in envs:
        parts.append("Montezuma counts the paper's 8 × 11 frame feature in every column (this project in its "
                     "count-min sketch, the plain baseline in a hashed table, the PyTorch loop in a dict)")
    return "Counts: " + "; ".join(parts) + "."


HEADER = ["| | runs | this project | plain vmapped JAX DQN + counts | this ÷ plain | PyTorch loop, one process, CPU "
          "| the same, GPU |", "|---|---|---|---|---|---|---|"]
"""The table's header lines."""


def table_lines(rows: list[dict[str, Any]], torch_rows: dict[str, dict[str, dict | None]]) -> list[str]:
    """The table: its header and one line per environment."""
    return HEADER + [table_row(row, torch_rows.get(row["env"], {})) for row in rows]


def emulators_note(row: dict[str, Any]) -> str:
    """The sentence on Montezuma's pool's emulators alone, the ceiling of any agent on it ("" where not measured)."""
    emulators = row.get("emulators", {}).get("steps_per_s")
    if not emulators:
        return ""
    return (f"Montezuma's pool of {row['runs']:,} emulators alone, stepping random actions, runs {rate(emulators)} "
            "env steps/s: the ceiling of any agent on that pool.")


COLUMN_NAMES = {"this": "this project's", "baseline": "the plain baseline's", "emulators": "the emulators'"}


def compiles_note(row: dict[str, Any]) -> str:
    """A sentence for each of a row's JAX columns whose timed window held an XLA compile ("" for none): its rate
    includes the compile, so it is too low."""
    sentences = []
    for column, name in COLUMN_NAMES.items():
        count = (row.get(column) or {}).get("compiles_timed") or 0
        if count:
            sentences.append(f"{NAMES[row['env']]}: {count} XLA compile{'' if count == 1 else 's'} fell inside {name} "
                             "timed window: that rate includes it and is too low.")
    return " ".join(sentences)


def readme_text(rows: list[dict[str, Any]], torch_rows: dict[str, dict[str, dict | None]], device: str) -> str:
    """The table as the top-level README shows it, with a two-line note (``table.md``)."""
    envs = [r["env"] for r in rows]
    settings = {"chain": "the chain in bfloat16 with packed weight storage", "maze": "the maze in bfloat16",
                "montezuma": "Montezuma at the defaults"}
    note = [f"This project: {', '.join(settings[e] for e in envs)}."]
    if set(envs) & {"chain", "maze"}:
        note.append("Both JAX columns count chain and maze cells exactly (the paper: SimHash codes).")
    if "montezuma" in envs:
        note.append("Montezuma counts the paper's 8 × 11 frame feature (the plain baseline in a hashed table).")
    montezuma = [r for r in rows if r["env"] == "montezuma"]
    note += [text for r in montezuma if (text := emulators_note(r))]
    note += [text for r in rows if (text := compiles_note(r))]
    note.append("The PyTorch columns are a PyTorch loop in the authors' structure (one environment per process), "
                "not their code.")
    intro = f"Environment steps per second on one {device}, every run learning, OPIQ at the paper's settings:"
    return "\n".join([intro, "", *table_lines(rows, torch_rows), "", " ".join(note)])


def montezuma_note(row: dict[str, Any], args: Args) -> str:
    """The paragraph on Montezuma's columns in the folder's README."""
    return (f"Montezuma: one EnvPool pool of {args.montezuma_pool} environments per JAX column, one per run; this "
            f"project's replay holds {args.montezuma_buffer:,} frames per run. The plain baseline "
            "(`opiq_jax/benchmark/plain_atari.py`) is the same OPIQ agent written the obvious way: the Nature network "
            "in stock flax layers vmapped over runs, one Python dispatch per step (step, store, then train), counts "
            f"in a table of the hashed frame feature, a replay of {args.montezuma_plain_buffer:,} whole transitions "
            "per run (both stacks of four frames, 56 KB each), one update of 32 every 4 steps, no mixed Monte Carlo "
            "return. " + emulators_note(row)).strip()


def notes(rows: list[dict[str, Any]], args: Args) -> str:
    """The full notes under the table in the folder's README."""
    lines = ["This project's settings: " + "; ".join(f"{NAMES[r['env']]}, {SAFE_REASONS[r['env']]}" for r in rows)
             + ". Every run learns: one update per environment step on the chain and the maze, one per 4 on "
             "Montezuma. Compiles are excluded, unless a note says one fell inside a timed window.", "",
             counts_note(rows)]
    if any(r["env"] == "maze" for r in rows):
        lines += ["", f"The maze's replay holds {args.maze_buffer:,} steps per run in both JAX columns (the plain "
                  "baseline stores whole observations)."]
    lines += [line for r in rows if r["env"] == "montezuma" for line in ("", montezuma_note(r, args))]
    lines += ["", "The PyTorch columns are a PyTorch loop in the authors' structure (one environment per process), "
              "not their code (`experiments/bench/torch_loop.py`): one run per process, counts in a Python dict "
              "(SimHash codes on the chain and the maze, the 8 × 11 frame feature on Montezuma), one minibatch update "
              "per environment step (Montezuma: every 4 steps, without the mixed Monte Carlo return), one torch CPU "
              "thread."]
    return "\n".join(lines)


def write_folder(out: Path, report: dict[str, Any], table: str, extra: str, log: dict[str, float],
                 argv: list[str], started: float) -> None:
    """``table.md``, ``README.md``, ``throughput.json`` and ``run_info.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    command = command_line("experiments.bench.throughput_table", argv)
    (out / "table.md").write_text(table + "\n")
    (out / "throughput.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    run_info = dict(device=report["device"], jax=report["jax"], torch=report.get("torch"), command=command,
                    cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), seconds_per_measurement=log,
                    seconds=round(time.perf_counter() - started, 1), **source_revision())
    (out / "run_info.json").write_text(json.dumps(run_info, indent=1) + "\n")
    (out / "README.md").write_text("\n".join([
        "# Throughput table", "", f"`{command}`", "", table, "", extra, "",
        "- `table.md`: the table above, as the top-level README shows it;",
        "- `throughput.json`: every figure (rates, compile and first-call seconds, memory, settings);",
        "- `run_info.json`: the device, the JAX and torch versions, the command, the wall-clock of each "
        "measurement (compiles included) and of the whole command.", ""]))


def measure_all(args: Args, log: dict[str, float]) -> tuple[list[dict], dict[str, dict[str, dict | None]]]:
    """Every measurement: the PyTorch loops first (before this process's JAX takes the card), then JAX."""
    envs = [e for e in args.envs if e != "montezuma" or importlib.util.find_spec("envpool") is not None]
    torch_rows = {env: {device: measure_torch(env, device, args, log) for device in args.torch_devices} for env in envs}
    rows = [measure_montezuma(args, log) if env == "montezuma" else measure_jax_env(env, args, log) for env in envs]
    return rows, torch_rows


def main(argv: list[str] | None = None) -> None:
    """Command line: measures, prints the table and writes the folder."""
    started = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = resolved(tyro.cli(Args, args=argv))
    log: dict[str, float] = {}
    rows, torch_rows = measure_all(args, log)
    import jax

    device = jax.devices()[0].device_kind
    if jax.device_count() > 1:
        say(f"{jax.device_count()} devices visible: the trainer splits its runs over them (CUDA_VISIBLE_DEVICES=0 "
            "keeps one card)")
    torch_version = next((r["torch_version"] for t in torch_rows.values() for r in t.values() if r), None)
    report = dict(device=device, device_count=jax.device_count(), jax=jax.__version__, torch=torch_version,
                  options=json.loads(json.dumps(dataclasses.asdict(args), default=str)), rows=rows,
                  torch_loops=torch_rows, torch_label=TORCH_LABEL)
    table = readme_text(rows, torch_rows, device)
    write_folder(args.out, report, table, notes(rows, args), log, argv, started)
    print(table, flush=True)
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
