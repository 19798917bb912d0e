"""The thin host loop: compiled chunks in, a results folder out.

A results folder holds

* ``config.json``: the resolved static configuration, the base seed and every run's method, setting
  label, seed and hyperparameters;
* ``metrics.csv``: a tidy table ``run, method, setting, seed, step, metric, value``, appended after
  every chunk;
* ``checkpoint.msgpack``: the whole training state (networks, optimisers, replay, counts, keys)
  and the chunk it belongs to, written atomically (temporary file, then rename).

Calling :func:`run_experiment` again on the same folder resumes from the checkpoint: rows of
``metrics.csv`` past the checkpoint are dropped and the chunks after it are recomputed, so an
interrupted experiment ends with exactly the parameters and metrics of an uninterrupted one.

Methods that need networks of their own (DORA, RND, BSP) compile into programs of their own.
:func:`run_methods` runs such a mix as one program per structure, each in a subfolder named after
it (``plain``, ``dora``, ``rnd``, ``bsp``); :func:`read_metrics` and :func:`is_finished` read such a
folder as one experiment. Every run keeps its seed's keys, so comparisons stay paired.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .config import HParams, StaticConfig, hparams_to_dict, make_hparams, stack_hparams
from .methods import method_structure
from .trainer import METRICS, Trainer, make_train

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
CHECKPOINT_FILE = "checkpoint.msgpack"
METRICS_HEADER = ("run", "method", "setting", "seed", "step", "metric", "value")


@dataclass(frozen=True)
class RunSpec:
    """One entry of the runs axis."""

    method: str
    setting: str  # a label of the hyperparameters, e.g. "m=0.5,c_action=1"
    seed: int
    hparams: HParams


@dataclass(frozen=True)
class Experiment:
    static: StaticConfig
    runs: tuple[RunSpec, ...]
    seed: int = 0
    shared_mask_seed: int = 12345

    def to_json(self) -> dict:
        return {
            "static": dataclasses.asdict(self.static),
            "seed": self.seed,
            "shared_mask_seed": self.shared_mask_seed,
            "runs": [
                {"run": i, "method": r.method, "setting": r.setting, "seed": r.seed, "hparams": hparams_to_dict(r.hparams)}
                for i, r in enumerate(self.runs)
            ],
        }


@functools.lru_cache(maxsize=16)
def compiled_trainer(static: StaticConfig) -> tuple[Trainer, callable, callable]:
    """``make_train`` plus jitted ``init`` and a donated, jitted ``train_chunk`` (cached per config)."""
    trainer = make_train(static)
    return trainer, jax.jit(trainer.init), jax.jit(trainer.train_chunk, donate_argnums=0)


def run_keys_for(experiment: Experiment) -> tuple[jax.Array, jax.Array]:
    """Per-run keys: a run's randomness depends on its seed only, not on its method or setting.

    So the same seed gives every method the same network initialisation, SimHash matrix and action
    randomisation, which makes method comparisons paired.
    """
    base = jax.random.key(experiment.seed)
    seeds = jnp.array([r.seed for r in experiment.runs], jnp.uint32)
    run_keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(seeds)
    if experiment.static.shared_action_mask:
        shared = jax.random.key(experiment.shared_mask_seed)
        env_keys = jax.vmap(lambda _: shared)(seeds)
    else:
        env_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0x0E4))(run_keys)
    return run_keys, env_keys


def split_by_structure(experiment: Experiment, bsp_heads: int = 10) -> dict[str, Experiment]:
    """One experiment per program structure, in order of first appearance, each with its static options."""
    groups: dict[str, list[RunSpec]] = {}
    for run in experiment.runs:
        groups.setdefault(method_structure(run.method, bsp_heads)[0], []).append(run)
    return {
        name: dataclasses.replace(
            experiment, static=dataclasses.replace(experiment.static, **method_structure(runs[0].method, bsp_heads)[1]),
            runs=tuple(runs),
        )
        for name, runs in groups.items()
    }


def same_experiment(saved: dict, config: dict) -> bool:
    """Whether a saved ``config.json`` describes ``config``; static fields added since it was written
    (absent from it) count as their defaults."""
    defaults = dataclasses.asdict(StaticConfig())
    static = {k: v for k, v in config["static"].items()
              if k in saved.get("static", {}) or json.loads(json.dumps(v)) != json.loads(json.dumps(defaults.get(k)))}
    return saved == json.loads(json.dumps({**config, "static": static}))


def require_same_experiment(out: Path, experiment: Experiment) -> None:
    """Raises ``ValueError`` when ``out`` already holds the results of another experiment."""
    path = Path(out) / CONFIG_FILE
    if path.exists() and not same_experiment(json.loads(path.read_text()), experiment.to_json()):
        raise ValueError(f"{out} holds a different experiment: choose another --out or delete it")


def run_methods(experiment: Experiment, out: str | Path, bsp_heads: int = 10, **kwargs) -> dict[str, object]:
    """Runs ``experiment`` as one program per structure; a single structure uses ``out`` itself.

    Keyword arguments go to :func:`run_experiment`; ``max_seconds`` bounds the whole call (the
    structures run one after another). Returns the final state of each structure that ran.
    """
    out = Path(out)
    groups = split_by_structure(experiment, bsp_heads)
    if len(groups) == 1:
        (name, group), = groups.items()
        return {name: run_experiment(group, out, **kwargs)}
    if (out / CONFIG_FILE).exists():
        raise ValueError(f"{out} holds a different experiment: choose another --out or delete it")
    for name, group in groups.items():  # fail before training anything if some group cannot fit
        check_fits(group.static, len(group.runs))
    max_seconds, started, states = kwargs.pop("max_seconds", None), time.monotonic(), {}
    for name, group in groups.items():
        left = None if max_seconds is None else max_seconds - (time.monotonic() - started)
        if left is not None and left <= 0:
            break
        if not ((out / name / CONFIG_FILE).exists() and is_finished(out / name)):
            states[name] = run_experiment(group, out / name, max_seconds=left, **kwargs)
    return states


def experiment_folders(out: str | Path) -> list[Path]:
    """The results folders of an experiment: ``out`` itself, or every folder below it that holds a config
    (per-structure subfolders, and the per-process folders of a run over several hosts)."""
    out = Path(out)
    if (out / CONFIG_FILE).exists():
        return [out]
    return sorted(config.parent for config in out.rglob(CONFIG_FILE)) if out.is_dir() else []


def process_share(experiment: Experiment, index: int, count: int) -> Experiment:
    """Process ``index`` of ``count``'s share of the runs: every ``count``-th run from ``index``.

    A run's keys depend on its seed only (:func:`run_keys_for`), so it trains the same whichever
    process holds it; interleaving gives every process a similar mix of methods.
    """
    if not 0 <= index < count:
        raise ValueError(f"process index {index} is not in [0, {count})")
    if len(experiment.runs) < count:
        raise ValueError(f"{len(experiment.runs)} runs cannot be shared among {count} processes")
    return dataclasses.replace(experiment, runs=experiment.runs[index::count])


# ------------------------------------------------------------------------------------ memory


def tree_bytes(tree) -> int:
    """Bytes of all leaves of a pytree of arrays or shape structs."""
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def state_bytes_per_run(static: StaticConfig) -> int:
    """Device bytes of one run's training state, from the shapes alone (nothing is allocated)."""
    trainer = compiled_trainer(static)[0]
    keys = jax.random.split(jax.random.key(0), 1)  # shapes only: eval_shape allocates nothing
    hp = stack_hparams([make_hparams()])
    shapes = jax.eval_shape(trainer.init, keys, keys, hp)
    return tree_bytes(shapes.runs)


def available_device_bytes() -> int:
    """Free memory of the first local device (host RAM for the CPU backend)."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)) * jax.local_device_count()
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


# The donated state, the chunk's temporaries and a checkpoint copy on the host.
MEMORY_HEADROOM = 3.0


def runs_that_fit(per_run: int, free_bytes: int, headroom: float = MEMORY_HEADROOM) -> int:
    """The most states of ``per_run`` bytes that, times ``headroom``, fit in ``free_bytes``."""
    return max(0, int(free_bytes // (per_run * headroom)))


def fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM) -> bool:
    """Whether ``num_runs`` states of ``per_run`` bytes, times ``headroom``, fit in the free device memory."""
    return num_runs <= runs_that_fit(per_run, available_device_bytes(), headroom)


def require_fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM) -> None:
    """Stops with a one-line message when ``num_runs`` states of ``per_run`` bytes do not :func:`fits`."""
    free = available_device_bytes()
    most = runs_that_fit(per_run, free, headroom)
    if num_runs > most:
        need = per_run * num_runs * headroom
        raise ValueError(
            f"{num_runs} runs need about {need / 2**30:.1f} GiB ({per_run / 2**20:.1f} MiB each, x{headroom:g} "
            f"headroom) but the device has {free / 2**30:.1f} GiB free: use at most {most} runs "
            f"(fewer seeds or methods) or a smaller --buffer-size"
        )


def check_fits(static: StaticConfig, num_runs: int) -> None:
    """Stops with a one-line message when ``num_runs`` runs cannot fit in device memory."""
    require_fits(state_bytes_per_run(static), num_runs)


# ------------------------------------------------------------------------------------ devices


def shard_over_devices(state, num_runs: int, verbose: bool = True):
    """Splits the runs axis over all local devices (data parallelism: runs never communicate).

    The step counter is replicated; every leaf of ``state.runs`` is sharded along its leading axis,
    and ``train_chunk`` (jitted without explicit shardings) follows the placement of its input. With
    one device, or a number of runs the devices do not divide, the state stays where it is.
    """
    devices = jax.local_devices()
    if len(devices) == 1:
        return state
    if num_runs % len(devices):
        if verbose:
            print(f"opiq-jax: {num_runs} runs do not divide over {len(devices)} devices; using one device", flush=True)
        return state
    mesh = Mesh(np.array(devices), ("runs",))
    by_run, replicated = NamedSharding(mesh, PartitionSpec("runs")), NamedSharding(mesh, PartitionSpec())
    return state.replace(
        step=jax.device_put(state.step, replicated),
        runs=jax.tree.map(lambda x: jax.device_put(x, by_run), state.runs),
    )


# ------------------------------------------------------------------------------------ files


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_checkpoint(out: Path, state, chunk: int) -> None:
    payload = {"chunk": chunk, "state": jax.device_get(keys_to_data(state))}
    atomic_write_bytes(out / CHECKPOINT_FILE, serialization.to_bytes(payload))


def _read_checkpoint(out: Path, template) -> tuple[object, int] | None:
    path = out / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        payload = serialization.from_bytes({"chunk": 0, "state": template}, path.read_bytes())
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} does not fit this version's training state (written by an older opiq-jax, whose state "
            f"was laid out differently?): resume it with that version, or delete the checkpoint to start over "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    return payload["state"], int(payload["chunk"])


def csv_text(rows) -> str:
    """``rows`` as CSV text the way :func:`append_metrics` writes them (quoted where needed, CRLF endings)."""
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def _truncate_metrics(out: Path, last_step: int) -> None:
    """Keeps the header and the rows up to ``last_step`` (rows of an interrupted chunk go).

    The kept rows are written back with the same CSV writer that appended them, so labels with commas,
    quotes or any unicode keep their quoting, and the file keeps one line ending.
    """
    path = out / METRICS_FILE
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    kept = [rows[0]] + [r for r in rows[1:] if len(r) == len(METRICS_HEADER) and int(r[4]) <= last_step]
    atomic_write_bytes(path, csv_text(kept).encode("utf-8"))


def append_metrics(out: Path, experiment: Experiment, step: int, metrics: dict[str, np.ndarray],
                   names: tuple[str, ...] = METRICS) -> None:
    path = out / METRICS_FILE
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(METRICS_HEADER)
        for i, spec in enumerate(experiment.runs):
            for name in names:
                writer.writerow((i, spec.method, spec.setting, spec.seed, step, name, f"{float(metrics[name][i]):.6g}"))


def read_metrics_file(folder: Path) -> list[dict]:
    """The raw rows of one folder's ``metrics.csv`` (or of ``metrics.csv.gz``, as results are committed);
    none where nothing was logged yet."""
    for path, opener in ((folder / METRICS_FILE, open), (folder / f"{METRICS_FILE}.gz", gzip.open)):
        if path.exists():
            with opener(path, "rt", newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
    return []


def read_metrics(out: str | Path) -> list[dict]:
    """The tidy metrics table of a results folder as a list of dicts (value as float).

    A folder of per-structure subfolders (see :func:`run_methods`) reads as one table, run ids
    numbered on across the subfolders.
    """
    folders = experiment_folders(out)
    if not folders:
        raise FileNotFoundError(f"{out} holds no results (no {CONFIG_FILE})")
    table, offset = [], 0
    for folder in folders:
        rows = read_metrics_file(folder)
        for r in rows:
            r["run"], r["seed"], r["step"], r["value"] = (
                offset + int(r["run"]), int(r["seed"]), int(r["step"]), float(r["value"]))
        table += rows
        offset += len(json.loads((folder / CONFIG_FILE).read_text())["runs"])
    return table


# ------------------------------------------------------------------------------------ loop


def run_experiment(
    experiment: Experiment,
    out: str | Path,
    progress: bool = True,
    checkpoint_seconds: float = 60.0,
    stop_after_chunks: int | None = None,
    max_seconds: float | None = None,
) -> object:
    """Trains every run of ``experiment`` to ``static.total_steps``, resuming from ``out`` if possible.

    Args:
      checkpoint_seconds: write a checkpoint after a chunk when at least this long has passed since
        the last one (0: after every chunk); the last chunk always writes one.
      stop_after_chunks: return after this many chunks of this call (for tests).
      max_seconds: return after the first chunk that ends past this many seconds of this call,
        with a checkpoint written, so that a time-boxed job can be resumed by calling again.
    Returns the final training state.
    """
    out = Path(out)
    static = experiment.static
    num_chunks = static.total_steps // static.log_every
    config = experiment.to_json()
    require_same_experiment(out, experiment)
    check_fits(static, len(experiment.runs))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / CONFIG_FILE, json.dumps(config, indent=1).encode())

    trainer, init, train_chunk = compiled_trainer(static)
    hparams = stack_hparams([r.hparams for r in experiment.runs])
    run_keys, env_keys = run_keys_for(experiment)
    typed = jax.eval_shape(trainer.init, run_keys, env_keys, hparams)
    raw = jax.eval_shape(keys_to_data, typed)
    restored = _read_checkpoint(out, jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), raw))
    if restored is None:
        state, chunk = init(run_keys, env_keys, hparams), 0
        (out / METRICS_FILE).unlink(missing_ok=True)
    else:
        host_state, chunk = restored
        state = keys_from_data(jax.tree.map(jnp.asarray, host_state), typed)
        _truncate_metrics(out, chunk * static.log_every)
    state = shard_over_devices(state, len(experiment.runs), progress)

    bar = tqdm(total=static.total_steps, initial=chunk * static.log_every, unit="step", disable=not progress,
               desc=f"{static.env} x{len(experiment.runs)} runs", dynamic_ncols=True)
    last_checkpoint = time.monotonic()
    started, done_here = time.monotonic(), 0
    while chunk < num_chunks:
        state, metrics = train_chunk(state)
        metrics = jax.device_get(metrics)
        chunk += 1
        done_here += 1
        append_metrics(out, experiment, chunk * static.log_every, metrics)
        out_of_time = max_seconds is not None and time.monotonic() - started >= max_seconds
        if chunk == num_chunks or out_of_time or time.monotonic() - last_checkpoint >= checkpoint_seconds:
            _write_checkpoint(out, state, chunk)
            last_checkpoint = time.monotonic()
        rate = done_here * static.log_every * len(experiment.runs) / max(time.monotonic() - started, 1e-9)
        bar.set_postfix_str(f"{rate:,.0f} env steps/s, test {np.nanmedian(metrics['test_return']):.3g}")
        bar.update(static.log_every)
        if out_of_time or (stop_after_chunks is not None and done_here >= stop_after_chunks):
            break
    bar.close()
    return state


def is_finished(out: str | Path) -> bool:
    """Whether the results folder (every per-structure subfolder) holds metrics of the last chunk."""
    folders = experiment_folders(out)
    for folder in folders:
        config = json.loads((folder / CONFIG_FILE).read_text())["static"]
        rows = read_metrics(folder)
        if not rows or max(r["step"] for r in rows) < config["total_steps"]:
            return False
    return bool(folders)


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def keys_to_data(tree):
    """Typed PRNG keys as their raw ``uint32`` data, so that the tree serialises."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def keys_from_data(tree, typed_template):
    """Inverse of :func:`keys_to_data`, guided by a tree that still has typed keys."""
    return jax.tree.map(lambda x, t: jax.random.wrap_key_data(x) if _is_key(t) else x, tree, typed_template)
