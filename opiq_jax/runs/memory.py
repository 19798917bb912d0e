"""How much device memory an experiment's programs need, measured from their shapes, and what fits.

A run's state is measured by tracing ``init`` (nothing is allocated); :func:`check_fits` stops in one line
(:class:`~opiq_jax.common.errors.DoesNotFit`) naming what would fit instead: fewer runs, the largest ``--buffer-size``,
or how many devices like this one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable

import jax
import numpy as np

from ..common.config import STATIC_OPTIONS, StaticConfig, make_hparams, stack_hparams
from ..common.errors import DoesNotFit
from ..registry.environments import DEFAULT_MEMORY_HEADROOM, environment_spec, envs_per_run
from .compiled import registered_parts, shape_trainer, start_shapes
from .experiment import make_train_options


def tree_bytes(tree) -> int:
    """Bytes of all leaves of a pytree of arrays or shape structs."""
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def state_bytes_per_run(static: StaticConfig) -> int:
    """Device bytes of one run's training state, from the shapes alone (nothing is allocated). Cached (per config
    and parts): the plan, the runner's memory checks and ``run_info.json`` each ask, and each answer traces the
    whole ``init``."""
    return _state_bytes_per_run(static, registered_parts(static))


@functools.lru_cache(maxsize=64)
def _state_bytes_per_run(static: StaticConfig, parts: tuple) -> int:
    del parts  # part of the cache's key only
    keys = jax.random.split(jax.random.key(0), 1)  # shapes only: eval_shape allocates nothing
    hp = stack_hparams([make_hparams(make_train_options(static))])
    start = start_shapes(static, envs_per_run(static.env, static.envs_per_run))
    return tree_bytes(jax.eval_shape(shape_trainer(static).init, keys, keys, hp, *start).runs)


def available_device_bytes() -> int:
    """Free memory of the first local device (for the CPU backend, the host's available RAM:
    :func:`available_host_bytes`)."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)) * jax.local_device_count()
    return available_host_bytes()


MEMINFO = "/proc/meminfo"


def available_host_bytes(meminfo: str = MEMINFO) -> int:
    """The host RAM a new allocation can take: Linux's ``MemAvailable``, which counts the page cache the kernel gives
    back on demand. The free pages alone (``SC_AVPHYS_PAGES``, the fallback where there is no such line) leave that
    cache out, so on a machine that has just read many files they can be a fraction of a GiB while gigabytes are
    there to take, and the check would refuse a run that fits."""
    try:
        with open(meminfo) as f:
            kib = meminfo_field(f.read(), "MemAvailable")
    except OSError:
        kib = None
    if kib is not None:
        return kib * 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def meminfo_field(text: str, name: str) -> int | None:
    """The value in kiB of the line ``name:   N kB`` of ``/proc/meminfo``'s ``text``, or None without one."""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        value = rest.split()[:1]
        if key.strip() == name and value and value[0].isdigit():
            return int(value[0])
    return None


MEMORY_HEADROOM = DEFAULT_MEMORY_HEADROOM  # the helpers' default; an environment declares its own (memory_headroom)


def runs_that_fit(per_run: int, free_bytes: int, headroom: float = MEMORY_HEADROOM) -> int:
    """The most states of ``per_run`` bytes that, times ``headroom``, fit in ``free_bytes``."""
    return max(0, int(free_bytes // (per_run * headroom)))


def fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM) -> bool:
    """Whether ``num_runs`` states of ``per_run`` bytes, times ``headroom``, fit in the free device memory."""
    return num_runs <= runs_that_fit(per_run, available_device_bytes(), headroom)


def require_fits(per_run: int, num_runs: int, headroom: float = MEMORY_HEADROOM,
                 other_ways: Callable[[int], list[str]] | None = None) -> None:
    """Stops with a one-line :class:`DoesNotFit` when ``num_runs`` states of ``per_run`` bytes do not :func:`fits`,
    naming what would fit: fewer runs, and ``other_ways(free bytes)`` (default: a smaller --buffer-size)."""
    free = available_device_bytes()
    most = runs_that_fit(per_run, free, headroom)
    if num_runs > most:
        need = per_run * num_runs * headroom
        fewer = [f"at most {most} runs (fewer seeds or methods)"] if most else []  # not even one fits: no fewer runs
        ways = [*fewer, *(other_ways(free) if other_ways else ["a smaller --buffer-size"])]
        ways_text = ", ".join(ways[:-1]) + " or " + ways[-1] if len(ways) > 1 else ways[0]
        runs = f"{num_runs} runs need" if num_runs > 1 else "1 run needs"
        raise DoesNotFit(
            f"{runs} about {need / 2**30:.1f} GiB ({per_run / 2**20:.1f} MiB each, x{headroom:g} headroom) but the "
            f"device has {free / 2**30:.1f} GiB free: use {ways_text}")


def largest_buffer_that_fits(static: StaticConfig, num_runs: int, free: int, headroom: float) -> int | None:
    """The largest ``--buffer-size`` with which ``num_runs`` runs of ``static`` fit in ``free`` bytes (a run's state
    grows linearly with its replay: two sizes measured give the line), or None if none above a batch fits."""
    envs, least = envs_per_run(static.env, static.envs_per_run), smallest_buffer(static)
    smaller = max(least, static.buffer_size // 2) // envs * envs
    if smaller >= static.buffer_size:
        return None
    full, half = state_bytes_per_run(static), state_bytes_per_run(dataclasses.replace(static, buffer_size=smaller))
    per_step = (full - half) / (static.buffer_size - smaller)
    if per_step <= 0:
        return None
    buffer = int((free / (headroom * num_runs) - (full - per_step * static.buffer_size)) // per_step) // envs * envs
    while buffer >= least and not fits_in(static, buffer, num_runs, free, headroom):
        buffer = int(buffer * 0.95) // envs * envs  # the line is a shade optimistic: step down until it fits
    return buffer if buffer >= least else None


def smallest_buffer(static: StaticConfig) -> int:
    """The smallest ``--buffer-size`` that ``static``'s checks allow (above a batch, and whatever its parts ask:
    RND's recent states), a multiple of the environments per run."""
    envs = envs_per_run(static.env, static.envs_per_run)
    # A bound on the replay is another option's value (the batch, RND's batch): the least allowed size is one of
    # them, or one above, rounded up to the environments per run.
    values = [v for name in STATIC_OPTIONS if isinstance(v := static.value(name), int) and not isinstance(v, bool)]
    candidates = sorted({-(-(v + k) // envs) * envs for v in values for k in (0, 1)} | {static.buffer_size})
    return next(b for b in candidates if b == static.buffer_size or (
        0 < b < static.buffer_size and not dataclasses.replace(static, buffer_size=b).problems()))


def fits_in(static: StaticConfig, buffer: int, num_runs: int, free: int, headroom: float) -> bool:
    per_run = state_bytes_per_run(dataclasses.replace(static, buffer_size=buffer))
    return num_runs <= runs_that_fit(per_run, free, headroom)


def ways_to_fit(static: StaticConfig, num_runs: int, headroom: float) -> Callable[[int], list[str]]:
    """What else would make ``num_runs`` runs of ``static`` fit in a device's free bytes: a replay size, or devices
    (the runs split over the local devices, a pool environment's with a pool per device)."""
    def ways(free: int) -> list[str]:
        buffer = largest_buffer_that_fits(static, num_runs, free, headroom)
        found = [f"--buffer-size {buffer:,} or less" if buffer else "a smaller --buffer-size (none above a batch fits)"]
        per_device = free / jax.local_device_count()
        devices = math.ceil(state_bytes_per_run(static) * num_runs * headroom / per_device)
        found.append(f"{devices} devices like this one (the runs split over them)")
        return found

    return ways


LARGE_STATE_FRACTION = 0.25
"""A state above this fraction of the free memory gets a note before training starts."""


def check_fits(static: StaticConfig, num_runs: int, note: Callable[[str], None] | None = None) -> None:
    """Stops with a one-line message when ``num_runs`` runs cannot fit in device memory; ``note`` is told before
    training how much memory a large state takes and how to make it smaller."""
    per_run = state_bytes_per_run(static)
    headroom = environment_spec(static.env).memory_headroom
    require_fits(per_run, num_runs, headroom, ways_to_fit(static, num_runs, headroom))
    total, free = per_run * num_runs, available_device_bytes()
    if note and total > LARGE_STATE_FRACTION * free:
        where = jax.local_devices()[0].platform
        note(f"opiq-jax: {num_runs} run(s) keep {total / 2**30:.1f} GiB of training state in {where} memory "
                   f"({free / 2**30:.1f} GiB free), most of it the replay of {static.buffer_size:,} steps per run: "
                   f"--buffer-size makes it smaller{smaller_replay(static, num_runs, LARGE_STATE_FRACTION * free)}")


def smaller_replay(static: StaticConfig, num_runs: int, budget: float) -> str:
    """The ``--buffer-size`` that a large state's note names, as the end of its sentence: the run's own steps when
    the replay could never fill up (a short smoke run), else the largest replay whose states take at most
    ``budget`` bytes ("" when none does)."""
    envs = envs_per_run(static.env, static.envs_per_run)
    filled = max(-(-static.total_steps // envs) * envs, smallest_buffer(static))
    if filled < static.buffer_size and not dataclasses.replace(static, buffer_size=filled).problems():
        total = state_bytes_per_run(dataclasses.replace(static, buffer_size=filled)) * num_runs
        return (f"; a run of {static.total_steps:,} steps fills at most {filled:,} of them: with --buffer-size "
                f"{filled} it keeps {total / 2**30:.2f} GiB")
    buffer = largest_buffer_that_fits(static, num_runs, int(budget), 1.0)
    return "" if buffer is None else f": {buffer} or less keeps it within a quarter of the free memory"
