"""Statistics for reporting RL results across seeds (Agarwal et al., 2021, "Deep RL at the edge of
the statistical precipice").

Few seeds make the mean noisy and the median wasteful, so the paper recommends the interquartile
mean (IQM) with a stratified percentile-bootstrap confidence interval, and the probability of
improvement P(X > Y) for comparing two methods. Plain numpy, no scipy: the paper's own library,
``rliable``, would bring heavy dependencies (scipy, arch, pandas, seaborn) for the few functions used
here, which are short and tested against brute-force references instead.

NaN rule (everywhere in this module): NaN marks a missing or diverged seed and is dropped before
anything is computed; it is never a sample. A slice with no finite values gives NaN (``iqm``,
``probability_of_improvement``, ``summarise``), while the bootstrap functions raise ``ValueError``
on a stratum with nothing left, because an interval over no data is a caller error. Infinities are
ordinary values.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

Scores = ArrayLike | Mapping[str, ArrayLike]
Statistic = Callable[..., Any]

# Bound on reps * n * m booleans held at once by the probability-of-improvement bootstrap.
_POI_CHUNK_ELEMENTS = 1 << 22


def _finite_1d(values: ArrayLike, name: str = "scores") -> np.ndarray:
    """A float copy of a 1-D array with NaN removed (the module's NaN rule)."""
    a = np.asarray(values, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D per-seed scores, got shape {a.shape}")
    return a[~np.isnan(a)]


def _check_ci_args(reps: int, confidence: float) -> None:
    """Reject bootstrap settings that make no interval."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """Equal-tailed percentile interval of bootstrap replicates."""
    alpha = 1.0 - confidence
    low, high = np.quantile(replicates, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def iqm(values: ArrayLike, axis: int | None = 0) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50 % of values along ``axis``.

    Same as ``scipy.stats.trim_mean(x, 0.25)`` (as rliable uses it): sort, cut floor(n / 4)
    values from each end, average the rest. Robust to outlier seeds, yet uses half the data,
    unlike the median. NaN values are ignored per slice (n counts finite values only); an
    all-NaN or empty slice gives NaN. ``axis=None`` flattens. Returns a float for 1-D input.
    """
    a = np.asarray(values, dtype=float)
    if axis is None:
        a, axis = a.ravel(), 0
    a = np.moveaxis(a, axis, -1)
    ordered = np.sort(a, axis=-1)  # NaN sorts last, so the finite values lead each slice
    n = np.sum(~np.isnan(a), axis=-1, keepdims=True)
    cut = n // 4  # floor(0.25 * n), exact for integers
    pos = np.arange(a.shape[-1])
    keep = (pos >= cut) & (pos < n - cut)
    total = np.where(keep, ordered, 0.0).sum(axis=-1)
    count = keep.sum(axis=-1)
    out = np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)
    return float(out) if out.ndim == 0 else out


def _strata(scores: Scores) -> list[np.ndarray]:
    """The finite scores of each stratum: a mapping gives one per key, an array gives one."""
    if isinstance(scores, Mapping):
        items = [(str(k), v) for k, v in scores.items()]
    else:
        items = [("scores", scores)]
    if not items:
        raise ValueError("no strata given")
    strata = []
    for name, values in items:
        finite = _finite_1d(values, name)
        if finite.size == 0:
            raise ValueError(f"stratum {name!r} has no finite scores")
        strata.append(finite)
    return strata


def _apply(statistic: Statistic, samples: np.ndarray, vectorised: bool) -> np.ndarray:
    """Apply ``statistic`` to each row of ``samples`` ([reps, n] -> [reps])."""
    if vectorised:
        return np.asarray(statistic(samples, axis=-1), dtype=float).reshape(samples.shape[0])
    return np.array([float(statistic(row)) for row in samples])


def bootstrap_replicates(
    scores: Scores,
    statistic: Statistic,
    *,
    reps: int = 2000,
    seed: int = 0,
    vectorised: bool = True,
) -> tuple[float, np.ndarray]:
    """Point estimate and ``reps`` stratified bootstrap replicates of ``statistic``.

    Each stratum (a mapping's values, or the one array) is resampled with replacement to its own
    size, independently of the others, and the statistic is applied to the concatenation; this
    keeps every task's weight fixed, as in Agarwal et al. Index draws are one [reps, n_s] matrix
    per stratum, in the mapping's order, from ``np.random.default_rng(seed)``. With
    ``vectorised`` the statistic is called as ``statistic(matrix, axis=-1)`` (np.mean, np.median
    and ``iqm`` all qualify); otherwise once per 1-D row (slow). NaN scores are dropped first.
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    strata = _strata(scores)
    rng = np.random.default_rng(seed)
    draws = [s[rng.integers(0, s.size, size=(reps, s.size))] for s in strata]
    original = np.concatenate(strata)[None, :]
    point = float(_apply(statistic, original, vectorised)[0])
    return point, _apply(statistic, np.concatenate(draws, axis=1), vectorised)


def stratified_bootstrap_ci(
    scores: Scores,
    statistic: Statistic,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    vectorised: bool = True,
) -> tuple[float, float, float]:
    """Percentile bootstrap CI of ``statistic`` over seeds: (point_estimate, low, high).

    ``scores`` is a 1-D array of per-seed scores (one stratum) or a mapping
    {stratum_name: 1-D per-seed scores}; see ``bootstrap_replicates`` for the resampling. The
    interval is the equal-tailed (1 - confidence) / 2 and (1 + confidence) / 2 quantiles of the
    replicates. Deterministic for a given seed.
    """
    _check_ci_args(reps, confidence)
    point, replicates = bootstrap_replicates(
        scores, statistic, reps=reps, seed=seed, vectorised=vectorised
    )
    low, high = _percentile_interval(replicates, confidence)
    return point, low, high


def _poi_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + 0.5 P(X = Y) for each row pair of x [r, n] and y [r, m]."""
    greater = (x[:, :, None] > y[:, None, :]).mean(axis=(1, 2))
    equal = (x[:, :, None] == y[:, None, :]).mean(axis=(1, 2))
    return greater + 0.5 * equal


def probability_of_improvement(x: ArrayLike, y: ArrayLike) -> float:
    """P(X > Y) for per-seed scores of methods X and Y, ties counting one half.

    This is the Mann-Whitney U statistic of x against y divided by n * m: the chance that a random
    run of X beats a random run of Y, which says more than a difference of means when runs are
    few and skewed. NaN scores are dropped; if either side is left empty the result is NaN.
    """
    xs, ys = _finite_1d(x, "x"), _finite_1d(y, "y")
    if xs.size == 0 or ys.size == 0:
        return float("nan")
    return float(_poi_rows(xs[None, :], ys[None, :])[0])


def probability_of_improvement_ci(
    x: ArrayLike,
    y: ArrayLike,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``probability_of_improvement`` with a percentile bootstrap CI: (point, low, high).

    x and y are resampled with replacement independently (two strata), each to its own size:
    index matrices [reps, n] for x, then [reps, m] for y, from ``np.random.default_rng(seed)``.
    Replicates are computed in chunks to bound memory. NaN scores are dropped first; an empty
    side raises ``ValueError``.
    """
    _check_ci_args(reps, confidence)
    xs, ys = _finite_1d(x, "x"), _finite_1d(y, "y")
    if xs.size == 0 or ys.size == 0:
        raise ValueError("x and y each need at least one finite score")
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, xs.size, size=(reps, xs.size))
    iy = rng.integers(0, ys.size, size=(reps, ys.size))
    chunk = max(1, _POI_CHUNK_ELEMENTS // (xs.size * ys.size))
    replicates = np.concatenate(
        [_poi_rows(xs[ix[i : i + chunk]], ys[iy[i : i + chunk]]) for i in range(0, reps, chunk)]
    )
    point = probability_of_improvement(xs, ys)
    low, high = _percentile_interval(replicates, confidence)
    return point, low, high


def summarise(
    scores: Scores,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Summary of one method's per-seed scores for a results table.

    Keys: n, median, q25, q75, mean, iqm, iqm_low, iqm_high, where [iqm_low, iqm_high] is the
    stratified percentile bootstrap CI of the IQM (95 % by default). ``scores`` is a 1-D array or
    a mapping {task: 1-D scores}; quantiles, mean and IQM then pool all tasks. NaN scores are
    dropped and not counted in n (a task left with none is left out of the bootstrap); with no
    finite score at all, n is 0 and every other value is NaN.
    Quantiles use numpy's default linear interpolation.
    """
    strata = scores if isinstance(scores, Mapping) else {"scores": scores}
    finite = {k: _finite_1d(v, str(k)) for k, v in strata.items()}
    finite = {k: v for k, v in finite.items() if v.size > 0}
    pooled = np.concatenate(list(finite.values())) if finite else np.empty(0)
    keys = ("median", "q25", "q75", "mean", "iqm", "iqm_low", "iqm_high")
    if pooled.size == 0:
        return {"n": 0, **{k: float("nan") for k in keys}}
    q25, median, q75 = np.quantile(pooled, [0.25, 0.5, 0.75])
    point, low, high = stratified_bootstrap_ci(
        finite, iqm, reps=reps, confidence=confidence, seed=seed
    )
    values = (median, q25, q75, pooled.mean(), point, low, high)
    return {"n": int(pooled.size), **{k: float(v) for k, v in zip(keys, values, strict=True)}}


EXACT_PERMUTATIONS = 200_000
"""Above this many ways to split the pooled seeds, :func:`permutation_p` draws random splits instead of all."""


def permutation_p(x: ArrayLike, y: ArrayLike, *, draws: int = 100_000, seed: int = 0) -> float:
    """The two-sided permutation p-value of the difference of means of x and y (per-seed scores).

    Every way of splitting the pooled seeds into groups of the sizes of x and y is one relabelling (all of them
    when there are at most :data:`EXACT_PERMUTATIONS`, else ``draws`` random ones); p is the share of relabellings
    whose |mean difference| is at least the observed one, the observed split included, so it is never 0. With 4
    seeds against 4 there are 70 splits and the smallest p is 2/70 = 0.029. NaN scores are dropped; NaN if either
    side is left empty.
    """
    xs, ys = _finite_1d(x, "x"), _finite_1d(y, "y")
    if xs.size == 0 or ys.size == 0:
        return float("nan")
    pooled, n = np.concatenate([xs, ys]), xs.size
    observed = abs(xs.mean() - ys.mean())
    if math.comb(pooled.size, n) <= EXACT_PERMUTATIONS:
        groups = np.array(list(itertools.combinations(range(pooled.size), n)))
    else:
        rng = np.random.default_rng(seed)
        groups = np.array([rng.permutation(pooled.size)[:n] for _ in range(draws)])
    in_x = np.zeros((groups.shape[0], pooled.size), bool)
    np.put_along_axis(in_x, groups, True, axis=1)
    means_x = (in_x * pooled).sum(1) / n
    means_y = (~in_x * pooled).sum(1) / (pooled.size - n)
    # a relabelling ties the observed split when equal up to rounding (sums taken in another order)
    extreme = np.abs(means_x - means_y) >= observed - 1e-12 * max(1.0, observed)
    return float(extreme.mean())


def rank_correlation(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rank correlation of paired values (ties ranked in order of appearance); NaN below two pairs."""
    xs, ys = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"rank_correlation needs paired values, got {xs.size} and {ys.size}")
    if xs.size < 2:
        return float("nan")
    return float(np.corrcoef(np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys)))[0, 1])


def iqm_curve_ci(
    values: ArrayLike,
    *,
    reps: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, the IQM across seeds and its percentile bootstrap CI: (point, low, high), each [steps].

    ``values[seed, step]`` holds one learning curve per seed. A curve's seeds are one stratum, so the
    stratified bootstrap resamples seeds with replacement; whole curves are resampled (one index
    matrix [reps, seeds] from ``np.random.default_rng(seed)`` for all steps), so every replicate is a
    set of real runs and the band is smooth. Vectorised over steps, in chunks that bound memory.
    NaN (no episode ended yet) is dropped per step; a replicate left with no finite value at a step
    is left out of that step's interval, and a step with no finite value at all gives NaN.
    """
    _check_ci_args(reps, confidence)
    a = np.asarray(values, dtype=float)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"values must be [seeds, steps] with at least one seed, got shape {a.shape}")
    n, steps = a.shape
    index = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    chunk = max(1, _POI_CHUNK_ELEMENTS // max(1, n * steps))
    replicates = np.concatenate([iqm(a[index[i : i + chunk]], axis=1) for i in range(0, reps, chunk)])
    alpha = 1.0 - confidence
    with warnings.catch_warnings():  # all-NaN steps stay NaN quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(replicates.reshape(reps, steps), [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    return np.asarray(iqm(a, axis=0), dtype=float).reshape(steps), low, high
