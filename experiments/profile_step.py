"""Where the trainer's time goes on the device: a profile of the compiled step, by phase.

Traces ``--chunks`` chunks of ``train_chunk`` (the paper's settings for the environment, every run
learning on every step) with ``jax.profiler``, reads the trace back with
``jax.profiler.ProfileData`` and adds up the time of every compiled op by the trainer's named scopes
(``act``, ``update/sample``, ``update/targets``, ``update/loss_and_grad``, ``update/optimiser``,
``update/dora``, ``update/rnd``, ``target_copy``, ``metrics``). An op's scope comes from the
``op_name`` metadata of the compiled HLO; ops without one count as ``other``.

On a GPU the times are the device's kernel times (the profiler's "XLA Ops" line); on the CPU they
are the host thunks' times, summed over threads. Writes ``profile_<env>_<runs>.md`` and ``.json``
(and the compiled HLO as ``.hlo.txt``) into ``--out`` and prints the table and the heaviest ops.

Run as a script, it turns off XLA's GPU command buffers before JAX starts: with them (the
default) the whole loop body is captured as one CUDA graph and the trace shows a single
``command_buffer`` op that no scope can be read from. Without them every kernel is launched on its
own, so the traced wall-clock is slower than the trainer's (the op times are not; the table says
which mode it ran in).

Run: ``python -m experiments.profile_step --env chain --runs 1024`` (or ``--env maze --runs 512``).

Reaches inside: the compiled chunk and the bench's helpers, to profile one chunk's operations.
"""

from __future__ import annotations

import os

if __name__ == "__main__" and "--xla_gpu_enable_command_buffer" not in os.environ.get("XLA_FLAGS", ""):
    # XLA reads its flags when the backend starts, which importing the trainer (gymnax) already does
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_enable_command_buffer=".strip()

import json
import re
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import tyro

from opiq_jax.benchmark.options import Bench
from opiq_jax.benchmark.throughput import bench_experiment, run_until_learning
from opiq_jax.common.config import StaticConfig, stack_hparams
from opiq_jax.runs.compiled import compiled_trainer
from opiq_jax.runs.experiment import run_keys_for

SCOPES = ("act", "update", "sample", "targets", "loss_and_grad", "optimiser", "dora", "rnd", "target_copy", "metrics")


@dataclass
class Args:
    env: Literal["chain", "maze"] = "chain"
    """Environment (the paper's settings)."""
    runs: int = 256
    """Runs trained side by side."""
    steps_per_chunk: int = 1000
    """Environment steps per run in one traced chunk."""
    chunks: int = 2
    """Chunks traced (after one untraced chunk with every run learning)."""
    method: str = "opiq"
    """Method whose paper setting every run uses."""
    count_features: Literal["exact", "simhash"] = "exact"
    """Counting features (as opiq-jax bench)."""
    precision: Literal["float32", "bfloat16"] = "float32"
    """The Q-network's precision (as opiq-jax bench)."""
    weight_storage: Literal["float32", "packed"] = "float32"
    """What an update reads and writes (as opiq-jax bench; packed needs bfloat16)."""
    top: int = 15
    """Heaviest single ops listed."""
    out: Path = Path("results/profile")
    """Folder for the tables."""

    def validate(self) -> None:
        for ok, message in [(self.runs >= 1, "--runs must be >= 1"), (self.chunks >= 1, "--chunks must be >= 1"),
                            (self.steps_per_chunk >= 1, "--steps-per-chunk must be >= 1")]:
            if not ok:
                raise SystemExit(f"profile_step: error: {message}")


def phase_of(op_name: str) -> str:
    """The trainer's named scopes in an op's name stack, outermost first: ``update/optimiser``; else ``other``."""
    labels = [t for t in re.findall(r"[A-Za-z_]+", op_name) if t in SCOPES]
    return "/".join(dict.fromkeys(labels)) or "other"


def op_names_of(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> the ``op_name`` metadata it carries, from a compiled module's text."""
    names = {}
    for match in re.finditer(r'^\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name="([^"]*)"', hlo_text, re.MULTILINE):
        names.setdefault(match.group(1), match.group(2))
    return names


def _stat(event, key: str):
    for name, value in event.stats:
        if name == key:
            return value
    return None


def op_times(xplane_path: str, module: str) -> dict[str, float]:
    """Seconds per HLO op of the executable whose name contains ``module``, summed over the trace.

    A device plane's "XLA Ops" line where there is one (GPU, TPU); else every event of the device
    planes, or without any of the host planes (the CPU's thunks), that names its HLO op.
    """
    from jax.profiler import ProfileData

    profile = ProfileData.from_file(xplane_path)
    device = [plane for plane in profile.planes if plane.name.startswith("/device:")]
    ops_lines = [line for plane in device for line in plane.lines if line.name == "XLA Ops"]
    lines = ops_lines or [line for plane in (device or [p for p in profile.planes if p.name.startswith("/host:")])
                          for line in plane.lines]
    totals: dict[str, float] = defaultdict(float)
    for line in lines:
        for event in line.events:
            op = _stat(event, "hlo_op") or (event.name if ops_lines else None)
            owner = _stat(event, "hlo_module")
            if op is None or (owner is not None and module not in str(owner)):
                continue
            totals[str(op)] += event.duration_ns * 1e-9
    if not totals:
        seen = {plane.name: sorted({line.name for line in plane.lines})[:8] for plane in profile.planes}
        raise RuntimeError(f"no op of {module} found in the trace; planes and lines: {seen}")
    return dict(totals)


def command_buffers_enabled() -> bool:
    """Whether XLA may capture the step as CUDA graphs (then a GPU trace shows one op per graph)."""
    flags = re.findall(r"--xla_gpu_enable_command_buffer=(\S*)", os.environ.get("XLA_FLAGS", ""))
    return not flags or flags[-1] not in ("", "''", '""')


def phase_totals(per_op: dict[str, float], names: dict[str, str]) -> tuple[dict[str, str], dict[str, float]]:
    """Each op's phase (from its ``op_name``; ``other`` for an op without one) and the seconds of each phase."""
    phases = {op: phase_of(names.get(op, "")) for op in per_op}
    per_phase: dict[str, float] = defaultdict(float)
    for op, t in per_op.items():
        per_phase[phases[op]] += t
    return phases, dict(per_phase)


def profile_trainer(static: StaticConfig, num_runs: int, chunks: int, method: str = "opiq") -> dict:
    """Traces ``chunks`` chunks of the compiled trainer and returns the time per phase and per op."""
    if jax.default_backend() == "gpu" and command_buffers_enabled():
        warnings.warn("XLA's GPU command buffers are on: the trace will show each loop body as one "
                      "command_buffer op; set XLA_FLAGS=--xla_gpu_enable_command_buffer= before JAX starts "
                      "(running this module as a script does)", stacklevel=2)
    experiment = bench_experiment(static, num_runs, method)
    _, init, train_chunk = compiled_trainer(static)
    run_keys, env_keys = run_keys_for(experiment)
    state = init(run_keys, env_keys, stack_hparams(experiment.hparams()))
    compiled = train_chunk.lower(state).compile()
    hlo = compiled.as_text()
    names = op_names_of(hlo)
    state, _ = jax.block_until_ready(train_chunk(run_until_learning(train_chunk, state, static)))
    with tempfile.TemporaryDirectory() as trace_dir:
        start = time.perf_counter()
        with jax.profiler.trace(trace_dir):
            for _ in range(chunks):
                state, _ = jax.block_until_ready(train_chunk(state))
        seconds = time.perf_counter() - start
        traces = sorted(Path(trace_dir).rglob("*.xplane.pb"))
        if not traces:
            raise RuntimeError(f"the profiler wrote no trace into {trace_dir}")
        per_op = op_times(str(traces[-1]), "train_chunk")
    phases, per_phase = phase_totals(per_op, names)
    steps = num_runs * static.log_every * chunks
    return dict(env=static.env, precision=static.execution.precision, weight_storage=static.execution.weight_storage, runs=num_runs,
                chunks=chunks, steps=steps, wall_s=seconds,
                env_steps_per_s_traced=steps / seconds, device=jax.devices()[0].device_kind, hlo=hlo,
                command_buffers=command_buffers_enabled() if jax.default_backend() == "gpu" else None,
                op_seconds=sum(per_op.values()), per_phase=per_phase,
                per_op=[dict(op=op, seconds=t, phase=phases[op], op_name=names.get(op, ""))
                        for op, t in sorted(per_op.items(), key=lambda kv: -kv[1])])


def markdown(result: dict, top: int) -> str:
    total = result["op_seconds"] or 1.0
    storage = ", packed storage" if result.get("weight_storage") == "packed" else ""
    lines = [f"### {result['env']}, {result['runs']} runs, {result.get('precision', 'float32')}{storage}, "
             f"{result['chunks']} chunks on {result['device']}", "",
             f"Traced wall-clock {result['wall_s']:.2f} s for {result['steps']:,} environment steps "
             f"({result['env_steps_per_s_traced']:,.0f} steps/s under the profiler, GPU command buffers "
             f"{ {True: 'on', False: 'off', None: 'n/a'}[result.get('command_buffers')] }); op time {total:.3f} s.", "",
             "| phase | op time s | share | ns per env step |", "|---|---|---|---|"]
    for phase, t in sorted(result["per_phase"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {phase} | {t:.4f} | {100 * t / total:.1f}% | {1e9 * t / result['steps']:.1f} |")
    lines += ["", "| heaviest ops | phase | op time s | share | op_name |", "|---|---|---|---|---|"]
    for op in result["per_op"][:top]:
        lines.append(f"| {op['op']} | {op['phase']} | {op['seconds']:.4f} | {100 * op['seconds'] / total:.1f}% "
                     f"| {op['op_name'][-90:]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = tyro.cli(Args, args=argv)
    args.validate()
    static = Bench(count_features=args.count_features, steps_per_measure=args.steps_per_chunk, precision=args.precision,
                   weight_storage=args.weight_storage, method=args.method).static_for(args.env)
    result = profile_trainer(static, args.runs, args.chunks, args.method)
    text = markdown(result, args.top)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = ("" if args.precision == "float32" else f"_{args.precision}") + (
        "_packed" if args.weight_storage == "packed" else "")
    stem = args.out / f"profile_{args.env}_{args.runs}{suffix}"
    stem.with_suffix(".md").write_text(text + "\n")
    stem.with_suffix(".hlo.txt").write_text(result["hlo"])  # the compiled program, to read the ops' fusions
    stem.with_suffix(".json").write_text(json.dumps({k: v for k, v in result.items() if k != "hlo"}, indent=1))
    return result


if __name__ == "__main__":
    main()
