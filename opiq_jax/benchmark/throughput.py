"""``opiq-jax bench``: throughput of the compiled trainer, side by side with the plain baseline.

For each environment and for R = 1, 2, 4, ... runs (doubling until the aggregate rate grows by less
than ``--growth`` over the previous doubling, until the next R would not fit in device memory or
runs out of it, or until ``--max-runs``) it measures

* compile time of ``train_chunk`` (ahead-of-time ``lower(...).compile()``, timed on its own; the
  first call, which reuses that executable, is recorded as ``first_call_s``);
* steady-state environment steps per second over a timed chunk of ``--steps-per-measure`` steps
  per run with one update on every step (``runs x steps / seconds``; best of ``--repeats``);
* device memory: the device's high-water mark (``memory_stats()['peak_bytes_in_use']``, None on
  CPU) and the compiled chunk's own footprint from XLA's memory analysis;
* a work model per environment step per run (:func:`work_model`): bytes for parameters,
  gradients, optimiser state, target network, replay, counts and observations, and FLOPs, which
  turn the measured rate into GB/s and TFLOP/s, shown as fractions of the card's *measured* peak
  (a large on-device ``x + 1`` for bandwidth, large matmuls for compute, in the same run);
* the plain baseline (:mod:`opiq_jax.benchmark.plain`) at the same R, or the largest R it fits, so that
  every speed-up is a ratio measured side by side on the same device in the same process.

The results go to stdout and to ``--out`` as ``bench.json`` and ``bench.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tyro

from ..agent.trainer import make_train, uses_pallas_torso
from ..common.config import StaticConfig, stack_hparams
from ..common.errors import command_line_message
from ..registry.methods import method_hparams
from ..runs.compiled import compiled_trainer
from ..runs.experiment import Experiment, RunSpec, run_keys_for
from ..runs.memory import available_device_bytes, fits, state_bytes_per_run, tree_bytes
from .options import Bench, runs_schedule
from .plain import Plain, make_plain, plain_replay_item_bytes, plain_state_bytes_per_run, run_plain
from .traffic import target_work, unread_gradient_bytes, weight_update_bytes

GIB = 2**30


# ============================================================================================
# Work model


def count_params(params: chex.ArrayTree) -> int:
    """Number of scalars in a parameter pytree (arrays or shape structs)."""
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def layer_macs(network: Any, example_obs: jax.Array) -> dict[str, int]:
    """Multiply-accumulates per observation of every layer with a ``kernel`` (Dense and Conv).

    A layer's MACs are ``prod(kernel.shape) * prod(output spatial dims)``: ``in * out`` for a
    dense layer, ``out_h * out_w * k_h * k_w * c_in * c_out`` for a convolution. The output shapes
    come from flax's captured intermediates under ``jax.eval_shape`` (nothing is computed).
    Biases and activations are not counted.
    """

    if getattr(network, "pallas_torso", False):  # the same layers; XLA's form exposes each one's output
        network = network.clone(pallas_torso=False)

    def capture(obs):
        params = network.init(jax.random.key(0), obs)
        _, state = network.apply(params, obs, capture_intermediates=True, mutable=["intermediates"])
        return params, state["intermediates"]

    params, intermediates = jax.eval_shape(capture, example_obs[None])
    macs = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params["params"])[0]:
        names = [str(getattr(k, "key", k)) for k in path]
        if names[-1] != "kernel":
            continue
        node = intermediates
        for name in names[:-1]:
            node = node[name]
        (output,) = node["__call__"]
        macs["/".join(names[:-1])] = int(np.prod(leaf.shape) * np.prod(output.shape[1:-1]))
    return macs


def forward_flops(network: Any, example_obs: jax.Array) -> int:
    """FLOPs of one forward pass on one observation: 2 x the MACs of :func:`layer_macs`."""
    return 2 * sum(layer_macs(network, example_obs).values())


@dataclass(frozen=True)
class WorkModel:
    """Work per environment step per run of the trainer, by component.

    ``bytes`` and ``flops`` map a component to its amount per environment step (updates happen
    every ``train_every`` steps and are divided accordingly; the target copy every
    ``target_update`` steps likewise). The model counts the traffic of the algorithm's arrays, not
    of every intermediate: activations other than the input observations are left out.
    """

    params: int
    forward_flops: int
    replay_item_bytes: int
    bytes: dict[str, float]
    flops: dict[str, float]

    @property
    def total_bytes(self) -> float:
        return float(sum(self.bytes.values()))

    @property
    def total_flops(self) -> float:
        return float(sum(self.flops.values()))

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "total_bytes": self.total_bytes, "total_flops": self.total_flops}


def work_model(static: StaticConfig) -> WorkModel:
    """The trainer's work per environment step per run for ``static`` (from shapes only).

    Bytes, per update unless said otherwise:

    * ``acting params``: the online network read once per step to act on one observation;
    * ``update params``: the forward and the backward pass on the batch each read the weights
      the forward passes use, the update reads and writes the float32 weights, and under mixed
      precision writes their bfloat16 copy; with ``weight_storage="packed"`` it reads and writes the
      bfloat16 copy and the low bytes instead (3 bytes a weight), and the copy needs no write of its own;
    * ``gradients``: written by the backward pass, read by the clip's norm and by the optimiser
      (in the forward passes' precision); with the lean backward pass (``Execution.mlp_backward``) the
      kernels its Pallas kernel writes are not read for the norm;
    * ``optimiser``: the RMSProp state read and written (float32, or bfloat16 when packed);
    * ``target``: the target network (in the forward passes' precision) read once for the
      bootstrap forward, plus its copy (read + write) every ``target_update`` steps; with the target
      table (``Execution.target_values``, the chain and the maze) the network is read once per copy
      to fill the table, the table written then, and ``batch x actions`` of its values read per update;
    * ``replay``: ``batch x n`` stored items gathered, plus one item written per step;
    * ``counts``: sketch cells read to act (``rows x actions``), updated (read + write of ``rows``),
      and read at training time for the intrinsic rewards (``batch x n x rows``) and the bootstrap
      (``batch x rows x actions``);
    * ``observations``: the rebuilt observations of the online and the target batch (with the target
      table: of the online batch, and of every cell once per copy), written then read.

    FLOPs: the online forward to act (1 observation), the online forward + backward on the batch
    (3 forwards), the target forward on the batch (with the target table: on every cell once per
    copy), SimHash projections (``2 k D`` each: one to act,
    ``batch x (n + 1)`` at training time) when counting SimHash codes, and about 10 per parameter
    for the clip and RMSProp.
    """
    trainer = make_train(static)
    env = trainer.stepping.env
    example_obs = env.obs_from_compact(env.start_compact(env.default_params), env.default_params)
    params = jax.eval_shape(lambda: {"params": trainer.network.init(jax.random.key(0), example_obs[None])["params"]})
    keys = jax.random.split(jax.random.key(0), 1)
    shapes = jax.eval_shape(trainer.init, keys, keys, stack_hparams(bench_experiment(static, 1).hparams()))
    item_bytes = tree_bytes(shapes.runs.memory) // static.buffer_size  # the replay's state per stored step

    num_params = count_params(params)
    param_bytes = float(tree_bytes(params))
    compute_bytes = param_bytes * jnp.dtype(static.execution.precision).itemsize / 4  # what the forward passes read
    weight_bytes = weight_update_bytes(trainer.agent.weights, param_bytes, shapes.runs)
    opt_bytes = float(tree_bytes(trainer.agent.weights.optimiser_state(shapes.runs)))  # one run's (shapes of one)
    obs_bytes = float(example_obs.size * example_obs.dtype.itemsize)
    fwd = forward_flops(trainer.network, example_obs)
    b, n, a, rows = static.batch_size, static.n_step, env.num_actions, static.sketch_rows
    per_update = 1.0 / static.train_every
    int_bytes = 4.0
    target_bytes, target_obs, target_forwards = target_work(trainer.agent.targets, static, compute_bytes, obs_bytes,
                                                            shapes.runs)
    nbytes = {
        "acting params": compute_bytes,
        "update params": (2 * compute_bytes + weight_bytes) * per_update,
        "gradients": (3 * compute_bytes - unread_gradient_bytes(trainer.agent.backward, params, static.batch_size))
        * per_update,
        "optimiser": 2 * opt_bytes * per_update,
        "target": target_bytes,
        "replay": b * n * item_bytes * per_update + item_bytes,
        "counts": int_bytes * rows * (a + 2 + (b * n + b * a) * per_update),
        "observations": 2 * b * obs_bytes * per_update + target_obs,
    }
    simhash = 2.0 * static.simhash_bits * example_obs.size if static.count_features == "simhash" else 0.0
    flops = {
        "acting forward": float(fwd),
        "online forward+backward": 3.0 * fwd * b * per_update,
        "target forward": float(fwd) * target_forwards,
        "simhash": simhash * (1 + b * (n + 1) * per_update),
        "optimiser": 10.0 * num_params * per_update,
    }
    return WorkModel(params=num_params, forward_flops=fwd, replay_item_bytes=item_bytes, bytes=nbytes, flops=flops)


# ============================================================================================
# The card's measured peaks


def _best_seconds_per_call(fn, x, calls: int, trials: int):
    """Best over ``trials`` of the mean time of ``calls`` back-to-back calls ``x = fn(x)``."""
    x = jax.block_until_ready(fn(x))  # compile and warm up
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(calls):
            x = fn(x)
        jax.block_until_ready(x)
        best = min(best, (time.perf_counter() - start) / calls)
    return best, x


def measure_bandwidth(num_bytes: int, calls: int = 10, trials: int = 3) -> float:
    """Device memory bandwidth in bytes/s: a donated ``x + 1`` over ``num_bytes`` of float32.

    Each call reads and writes the whole array, so it moves ``2 x num_bytes``.
    """
    n = max(1, num_bytes // 4)
    add_one = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    seconds, x = _best_seconds_per_call(add_one, jnp.zeros((n,), jnp.float32), calls, trials)
    del x
    return 2.0 * n * 4 / seconds


def measure_matmul(size: int, dtype: Any = jnp.float32, calls: int = 5, trials: int = 3) -> float:
    """Compute rate in FLOP/s of a ``size x size`` matmul in ``dtype`` at JAX's default precision.

    (Default precision is what the networks use; on recent NVIDIA cards it allows TF32 for float32.)
    """
    a = jax.random.normal(jax.random.key(1), (size, size), jnp.float32).astype(dtype)
    b = (jax.random.normal(jax.random.key(2), (size, size), jnp.float32) / np.sqrt(size)).astype(dtype)
    matmul = jax.jit(lambda x, w: x @ w)  # w is an argument: a closed-over array would be baked in
    seconds, _ = _best_seconds_per_call(lambda x: matmul(x, b), a, calls, trials)
    return 2.0 * size**3 / seconds


@dataclass(frozen=True)
class DevicePeaks:
    """Measured peaks of the card: memory copy bandwidth (bytes/s) and matmul rates (FLOP/s)."""

    bandwidth: float
    flops_f32: float
    flops_bf16: float | None
    probe_bytes: int
    matmul_size: int


def is_accelerator() -> bool:
    return jax.devices()[0].platform != "cpu"


def measure_peaks(probe_bytes: int | None = None, matmul_size: int | None = None) -> DevicePeaks:
    """Measures bandwidth and matmul rates; sizes default to 2 GiB and 8192 on an accelerator, 256 MiB and 1024 on
    CPU."""
    accel = is_accelerator()
    probe_bytes = probe_bytes or (2 * GIB if accel else 256 * 2**20)
    probe_bytes = int(min(probe_bytes, available_device_bytes() // 4))  # the array, its result, headroom
    matmul_size = matmul_size or (8192 if accel else 1024)
    return DevicePeaks(
        bandwidth=measure_bandwidth(probe_bytes),
        flops_f32=measure_matmul(matmul_size, jnp.float32),
        flops_bf16=measure_matmul(matmul_size, jnp.bfloat16) if accel else None,
        probe_bytes=probe_bytes,
        matmul_size=matmul_size,
    )


def device_description() -> dict[str, Any]:
    """Device kind, platform, count and the JAX version."""
    device = jax.devices()[0]
    return {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "host": platform.node(),
    }


# ============================================================================================
# Measurements


@dataclass
class Measurement:
    """One timed configuration (trainer or plain baseline) at ``runs`` runs."""

    runs: int
    steps_per_s: float | None = None  # aggregate environment steps per second (all runs)
    compile_s: float | None = None
    first_call_s: float | None = None
    seconds: float | None = None  # the best timed interval
    steps_timed: int | None = None  # environment steps per run in that interval
    peak_bytes: int | None = None  # device high-water mark after the measurement (None on CPU)
    program_bytes: int | None = None  # XLA: arguments + outputs - aliased + temporaries
    state_bytes: int | None = None  # the training state of all runs, from shapes
    compiles_timed: int | None = None  # XLA compiles inside the timed intervals (0 unless a timer is wrong)
    error: str | None = None  # "out of memory", "would not fit", ...


BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The event jax.monitoring records once per XLA compile (served from the persistent cache or not)."""


@contextlib.contextmanager
def counting_compiles():
    """A one-item list holding the number of XLA compiles made while the block runs. Timers put it around their
    timed window and report it: a window with a compile in it times the compile too (a jitted chunk whose first
    input was uncommitted recompiles on its second call, when its input is its own committed output)."""
    count = [0]

    def listener(event: str, duration: float, **kwargs) -> None:
        del duration, kwargs
        if event == BACKEND_COMPILE_EVENT:
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def timed_call(call: Callable[[], Any]) -> tuple[Any, float, int]:
    """``call()``'s output once ready on the device, the seconds that took and the XLA compiles made meanwhile: every
    timer times its windows through it, so that a compile inside one shows in its ``compiles_timed``."""
    with counting_compiles() as compiles:
        started = time.perf_counter()
        out = jax.block_until_ready(call())
        seconds = time.perf_counter() - started
    return out, seconds, compiles[0]


def timed_repeats(advance: Callable[[Any], Any], state: Any, repeats: int) -> tuple[Any, list[float], int]:
    """``repeats`` timed calls of ``advance``, each on the state the last returned: the final state, each call's
    seconds and the XLA compiles made in all of them."""
    seconds, compiles = [], 0
    for _ in range(repeats):
        state, took, made = timed_call(lambda: advance(state))
        seconds.append(took)
        compiles += made
    return state, seconds, compiles


def peak_bytes_in_use() -> int | None:
    """The first local device's memory high-water mark, or None where the backend has no stats."""
    stats = jax.local_devices()[0].memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def program_bytes(compiled: Any) -> int | None:
    """Device bytes an executable needs from XLA's memory analysis, or None if unavailable."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return "resource_exhausted" in text or "out of memory" in text or "oom" in text.split()


def bench_experiment(static: StaticConfig, num_runs: int, method: str = "opiq") -> Experiment:
    """``num_runs`` seeds of ``method`` with the paper's best setting for ``static.env``."""
    hparams = method_hparams(static.env, method)
    return Experiment(static, tuple(RunSpec(method, "bench", seed, hparams) for seed in range(num_runs)))


def run_until_learning(train_chunk, state, static: StaticConfig):
    """Chunks until the buffer holds ``batch + 1`` steps, so that every later step trains."""
    while int(state.step) < static.batch_size + 1:
        state, _ = train_chunk(state)
    return state


def measure_trainer(static: StaticConfig, num_runs: int, method: str = "opiq", repeats: int = 2) -> Measurement:
    """Compile time, steady-state rate and memory of the compiled trainer at ``num_runs`` runs.

    Chunks run until the buffer holds ``batch + 1`` steps, so that the timed chunks (``repeats``
    of them, best kept) train on every step.
    """
    result = Measurement(runs=num_runs, state_bytes=state_bytes_per_run(static) * num_runs)
    experiment = bench_experiment(static, num_runs, method)
    _, init, train_chunk = compiled_trainer(static)
    run_keys, env_keys = run_keys_for(experiment)
    state = jax.block_until_ready(init(run_keys, env_keys, stack_hparams(experiment.hparams())))

    start = time.perf_counter()
    compiled = train_chunk.lower(state).compile()
    result.compile_s = time.perf_counter() - start
    result.program_bytes = program_bytes(compiled)
    del compiled

    start = time.perf_counter()
    state, _ = jax.block_until_ready(train_chunk(state))
    result.first_call_s = time.perf_counter() - start
    state = run_until_learning(train_chunk, state, static)

    state, times, result.compiles_timed = timed_repeats(lambda s: train_chunk(s)[0], state, repeats)
    del state
    result.seconds, result.steps_timed = min(times), static.log_every
    result.steps_per_s = num_runs * static.log_every / result.seconds
    result.peak_bytes = peak_bytes_in_use()
    return result


@functools.lru_cache(maxsize=8)
def cached_plain(static: StaticConfig) -> Plain:
    """:func:`make_plain` once per configuration, so its jitted step is reused across R."""
    return make_plain(static)


def measure_plain(static: StaticConfig, num_runs: int, steps: int, method: str = "opiq",
                  repeats: int = 2) -> Measurement:
    """Compile time and steady-state rate of the plain baseline: ``steps`` dispatches per timed interval."""
    result = Measurement(runs=num_runs, state_bytes=plain_state_bytes_per_run(static) * num_runs)
    experiment = bench_experiment(static, num_runs, method)
    plain = cached_plain(static)
    run_keys, env_keys = run_keys_for(experiment)
    state = jax.block_until_ready(plain.init(run_keys, env_keys, stack_hparams(experiment.hparams())))

    start = time.perf_counter()
    compiled = plain.step.lower(state).compile()
    result.compile_s = time.perf_counter() - start
    result.program_bytes = program_bytes(compiled)
    del compiled

    start = time.perf_counter()
    state = jax.block_until_ready(plain.step(state))
    result.first_call_s = time.perf_counter() - start
    for _ in range(static.batch_size):  # the same warm-up as the trainer's: train from here on
        state = plain.step(state)

    state, times, result.compiles_timed = timed_repeats(lambda s: run_plain(plain, s, steps), state, repeats)
    del state
    result.seconds, result.steps_timed = min(times), steps
    result.steps_per_s = num_runs * steps / result.seconds
    result.peak_bytes = peak_bytes_in_use()
    return result


def _guarded(measure, num_runs: int, bytes_per_run: int, *args, **kwargs) -> Measurement:
    """Runs ``measure`` unless ``num_runs`` would not fit; an out-of-memory error becomes a row."""
    if not fits(bytes_per_run, num_runs):
        return Measurement(runs=num_runs, state_bytes=bytes_per_run * num_runs, error="would not fit")
    try:
        return measure(*args, **kwargs)
    except Exception as error:  # XlaRuntimeError and friends
        if not is_out_of_memory(error):
            raise
        return Measurement(runs=num_runs, state_bytes=bytes_per_run * num_runs, error="out of memory")


def keeps_growing(previous: float | None, current: float, growth: float) -> bool:
    """Whether ``current`` beats ``previous`` by at least the fraction ``growth``."""
    return previous is None or current >= (1.0 + growth) * previous


# ============================================================================================
# The sweep and its report


def _say(options: Bench, message: str) -> None:
    if options.progress:
        print(f"[bench] {message}", file=sys.stderr, flush=True)


def _describe(m: Measurement) -> str:
    if m.error:
        return m.error
    return f"compile {_fmt(m.compile_s, '.1f')} s, {_fmt(m.steps_per_s, ',.0f')} env steps/s"


def sweep_trainer(options: Bench, static: StaticConfig) -> list[Measurement]:
    """The trainer at R = 1, 2, 4, ... until the rate stops growing, memory runs out or ``max_runs``."""
    per_run = state_bytes_per_run(static)
    rows: list[Measurement] = []
    previous = None
    for num_runs in runs_schedule(options.max_runs, options.min_runs):
        _say(options, f"{static.env} trainer, {num_runs} runs ...")
        m = _guarded(measure_trainer, num_runs, per_run, static, num_runs, options.method, options.repeats)
        _say(options, f"{static.env} trainer, {num_runs} runs: {_describe(m)}")
        rows.append(m)
        if m.error or not keeps_growing(previous, m.steps_per_s, options.growth):
            break
        previous = m.steps_per_s
    return rows


def sweep_plain(options: Bench, static: StaticConfig, run_counts: Sequence[int]) -> dict[int, Measurement]:
    """The plain baseline at each R of ``run_counts`` while it fits (larger R reuse the largest that did)."""
    per_run = plain_state_bytes_per_run(static)
    measured: dict[int, Measurement] = {}
    for num_runs in run_counts:
        _say(options, f"{static.env} plain baseline, {num_runs} runs ...")
        m = _guarded(measure_plain, num_runs, per_run, static, num_runs, options.baseline_steps, options.method,
                     options.repeats)
        _say(options, f"{static.env} plain baseline, {num_runs} runs: {_describe(m)}")
        measured[num_runs] = m
        if m.error:
            break
    return measured


def pair_rows(trainer: list[Measurement],
              plain: dict[int, Measurement]) -> list[tuple[Measurement, Measurement | None]]:
    """Each trainer row with the plain row at the same R, else the largest R the baseline managed, else the plain
    row's error at that R (so the report says "would not fit" rather than nothing), else None (not measured)."""
    ok = sorted((r, m) for r, m in plain.items() if not m.error)
    pairs = []
    for t in trainer:
        same = plain.get(t.runs)
        if same is not None and not same.error:
            pairs.append((t, same))
            continue
        below = [m for r, m in ok if r <= t.runs]
        pairs.append((t, below[-1] if below else same))
    return pairs


def row_summary(t: Measurement, p: Measurement | None, model: WorkModel, peaks: DevicePeaks | None,
                precision: str = "float32") -> dict[str, Any]:
    """One row of the report as plain numbers (None where not measured); compute as a fraction of the matmul
    peak of the trainer's precision."""
    row: dict[str, Any] = {"runs": t.runs, "trainer": dataclasses.asdict(t),
                           "plain": dataclasses.asdict(p) if p else None}
    rate = t.steps_per_s
    row["bytes_per_s"] = model.total_bytes * rate if rate else None
    row["flops_per_s"] = model.total_flops * rate if rate else None
    row["bandwidth_fraction"] = row["bytes_per_s"] / peaks.bandwidth if rate and peaks else None
    flops_peak = ((peaks.flops_bf16 if precision == "bfloat16" and peaks.flops_bf16 else peaks.flops_f32)
                  if peaks else None)
    row["compute_fraction"] = row["flops_per_s"] / flops_peak if rate and peaks else None
    row["speedup"] = rate / p.steps_per_s if rate and p and p.steps_per_s else None
    return row


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value / scale, spec)


TABLE_COLUMNS = (
    "env", "runs", "steps/s", "compile s", "peak GiB", "XLA GiB", "GB/s", "% BW", "TFLOP/s", "% FLOP",
    "plain steps/s", "speed-up",
)


def form_note(static: StaticConfig, env: str) -> str:
    """How the targets were computed (``Execution.target_values``), whether the MLP's backward pass was
    the lean one (``Execution.mlp_backward``) and, for the maze, which form its network's convolutions took
    (``Execution.maze_torso``)."""
    agent = make_train(static).agent  # the strategies the agent chose (nothing is compiled)
    note = ", targets: " + agent.targets.description + agent.backward.bench_note
    if static.network == "maze_conv":
        note += ", convolutions: " + ("Pallas kernels" if uses_pallas_torso(static, "maze_conv") else "XLA patch GEMMs")
    return note


def markdown_table(env: str, rows: list[dict[str, Any]], device: dict[str, Any], peaks: DevicePeaks | None,
                   model: WorkModel, static: StaticConfig) -> str:
    """The Markdown report of one environment, headed by the device it ran on."""
    lines = [
        f"### {env} on {device['device_kind']} ({device['platform']}, JAX {device['jax']})",
        "",
        f"Paper settings: batch {static.batch_size}, n-step {static.n_step}, replay {static.buffer_size:,}, "
        f"target update {static.target_update}, counts: {static.count_features}, "
        f"precision: {static.execution.precision} "
        f"(the plain baseline: float32){form_note(static, env)}; one update per environment step.",
        f"Work per step per run: {model.params:,} parameters, {model.total_bytes / 1e6:.3f} MB, "
        f"{model.total_flops / 1e6:.3f} MFLOP.",
    ]
    if peaks:
        bf16 = f", bf16 matmul {peaks.flops_bf16 / 1e12:.1f} TFLOP/s" if peaks.flops_bf16 else ""
        lines.append(f"Measured peaks: copy {peaks.bandwidth / 1e9:.1f} GB/s, f32 matmul {peaks.flops_f32 / 1e12:.2f} "
                     f"TFLOP/s{bf16}.")
    lines += ["", "| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    for row in rows:
        t, p = row["trainer"], row["plain"]
        if t["error"]:
            cells = [env, str(row["runs"]), t["error"]] + [""] * (len(TABLE_COLUMNS) - 3)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        if p is None:
            plain = "n/a"
        elif p["error"]:
            plain = p["error"]
        else:
            plain = f"{p['steps_per_s']:,.0f}" + ("" if p["runs"] == row["runs"] else f" (R={p['runs']})")
        cells = [
            env, str(row["runs"]), f"{t['steps_per_s']:,.0f}", _fmt(t["compile_s"], ".1f"),
            _fmt(t["peak_bytes"], ".3f", GIB), _fmt(t["program_bytes"], ".3f", GIB),
            _fmt(row["bytes_per_s"], ".1f", 1e9), _fmt(row["bandwidth_fraction"], ".1%", 1.0),
            _fmt(row["flops_per_s"], ".3f", 1e12), _fmt(row["compute_fraction"], ".1%", 1.0),
            plain, _fmt(row["speedup"], ".1f") + ("x" if row["speedup"] else ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "steps/s: environment steps per second summed over all runs, training on every step. peak GiB: the device's "
        "memory high-water mark since the process started (n/a on CPU). XLA GiB: the compiled chunk's arguments + "
        "outputs + temporaries - donated. GB/s and TFLOP/s: the work model times steps/s, as % of the measured peaks "
        "above. The trainer's timed chunk includes its one greedy test episode per run (not counted as steps). "
        "plain: the per-step jitted baseline at the same runs (or the largest R it fits, in brackets).",
    ]
    return "\n".join(lines + compiles_timed_lines(rows))


def compiles_timed_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line naming every measurement whose timed intervals held an XLA compile (none: no line): its rate includes
    the compile and is too low."""
    hits = [f"{who} at R={m['runs']} ({m['compiles_timed']})" for row in rows
            for who, m in (("trainer", row["trainer"]), ("plain", row["plain"])) if m and m.get("compiles_timed")]
    return ["", f"XLA compiles fell inside the timed intervals of: {', '.join(hits)}; those rates include them and "
            "are too low."] if hits else []


def run_bench(options: Bench) -> dict[str, Any]:
    """Runs the whole benchmark; prints and writes the report; returns it as a JSON-ready dict."""
    options.validate()
    device = device_description()
    _say(options, f"device: {device['device_kind']} ({device['platform']})")
    measured: dict[str, Any] = {}
    for env in options.envs:
        static = options.static_for(env)
        model = work_model(static)
        trainer_rows = sweep_trainer(options, static)
        plain_rows: dict[int, Measurement] = {}
        if options.baseline:
            plain_rows = sweep_plain(options, static, [m.runs for m in trainer_rows if not m.error])
        measured[env] = (static, model, trainer_rows, plain_rows)
    # The probes allocate large arrays: measured last so that they do not raise the memory high-water
    # mark seen by the rows above.
    _say(options, "measuring the device's peak bandwidth and compute ...")
    peaks = measure_peaks(options.probe_bytes, options.matmul_size)

    report: dict[str, Any] = {
        "device": device, "peaks": dataclasses.asdict(peaks),
        "options": json.loads(json.dumps(dataclasses.asdict(options), default=str)), "envs": {},
    }
    tables = []
    for env, (static, model, trainer_rows, plain_rows) in measured.items():
        rows = [row_summary(t, p, model, peaks, static.execution.precision)
                for t, p in pair_rows(trainer_rows, plain_rows)]
        report["envs"][env] = {
            "static": static.to_dict(), "work_model": model.to_json(),
            "plain_replay_item_bytes": plain_replay_item_bytes(static), "rows": rows,
        }
        tables.append(markdown_table(env, rows, device, peaks, model, static))
    text = "\n\n".join(tables)
    print(text, flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "bench.md").write_text(text + "\n")
    _say(options, f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    report["markdown"] = text
    return report


def main(argv: Sequence[str] | None = None) -> None:
    """``opiq-jax bench`` (or ``python -m opiq_jax.benchmark.throughput``): parse ``argv`` and run.

    A bad option stops with one ``opiq-jax bench: error: ...`` line and exit status 2. The report
    is printed and written to ``--out``; :func:`run_bench` returns it as a dict instead.
    """
    options = tyro.cli(Bench, args=argv, prog="opiq-jax bench")
    try:
        options.validate()
    except ValueError as error:
        print(f"opiq-jax bench: error: {command_line_message(error)}", file=sys.stderr)
        sys.exit(2)
    run_bench(options)


if __name__ == "__main__":
    main()
