"""Tests for opiq_jax.reporting.stats against hand-computed numbers and brute-force references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from opiq_jax.reporting.stats import (
    bootstrap_replicates,
    iqm,
    probability_of_improvement,
    probability_of_improvement_ci,
    rank_correlation,
    stratified_bootstrap_ci,
    summarise,
)


def _trim_mean_reference(x: np.ndarray, proportion: float = 0.25) -> float:
    """scipy.stats.trim_mean semantics, written out: sort, cut int(p * n) from each end."""
    s = np.sort(x)
    cut = int(proportion * s.size)
    return float(np.mean(s[cut : s.size - cut]))


# ----------------------------------------------------------------------------------------- iqm


def test_iqm_one_to_eight():
    # n = 8, cut floor(0.25 * 8) = 2 each end -> [3, 4, 5, 6], mean 18 / 4 = 4.5
    assert iqm(np.arange(1, 9)) == 4.5


def test_iqm_skewed_eight():
    # sorted [0, 0, 0, 0, 10, 10, 10, 100]; cut 2 each end -> [0, 0, 10, 10], mean 20 / 4 = 5
    # (the plain mean is 130 / 8 = 16.25: the outlier seed is trimmed away)
    assert iqm([10, 0, 100, 0, 10, 0, 10, 0]) == 5.0


def test_iqm_trims_a_quarter_not_a_fifth():
    # [0, 1, 2, 4, 8, 16, 32, 64], n = 8: cut 2 -> [2, 4, 8, 16], 30 / 4 = 7.5.
    # Trimming 0.2 would cut floor(1.6) = 1 -> [1, 2, 4, 8, 16, 32], 63 / 6 = 10.5.
    # No trimming: 127 / 8 = 15.875.
    assert iqm([64, 0, 32, 1, 16, 2, 8, 4]) == 7.5


def test_iqm_n_five():
    # n = 5: cut floor(1.25) = 1 -> sorted [1, 2, 3, 4, 100] -> [2, 3, 4], 9 / 3 = 3
    assert iqm([100, 3, 1, 4, 2]) == 3.0


def test_iqm_n_seven_floors_the_cut():
    # n = 7: cut floor(1.75) = 1 -> [1, 2, 4, 8, 16], 31 / 5 = 6.2.
    # Rounding instead (round(1.75) = 2) would give [2, 4, 8], 14 / 3 = 4.667.
    assert iqm([0, 1, 2, 4, 8, 16, 32]) == pytest.approx(6.2)


def test_iqm_n_nine():
    # n = 9: cut floor(2.25) = 2 -> [2, 4, 8, 16, 32], 62 / 5 = 12.4.
    # Trimming 0.2 would cut floor(1.8) = 1 -> [1, ..., 64], 127 / 7 = 18.14.
    assert iqm([0, 1, 2, 4, 8, 16, 32, 64, 128]) == pytest.approx(12.4)


def test_iqm_small_n_keeps_everything():
    # n < 4 cuts floor(n / 4) = 0 values: plain mean.
    assert iqm([5.0]) == 5.0
    assert iqm([1.0, 2.0, 6.0]) == 3.0


@pytest.mark.parametrize("n", range(1, 22))
def test_iqm_matches_trim_mean_reference(n):
    x = np.random.default_rng(n).lognormal(size=n)
    assert iqm(x) == pytest.approx(_trim_mean_reference(x), rel=1e-12)


def test_iqm_ignores_nan():
    # NaN dropped -> [1, 2, 3, 4], cut 1 -> [2, 3], 2.5.
    # Counting the NaN in n = 5 would also cut 1 but keep [2, 3, 4] -> 3.
    assert iqm([4, np.nan, 1, 3, 2]) == 2.5


def test_iqm_all_nan_and_empty_are_nan():
    assert math.isnan(iqm([np.nan, np.nan]))
    assert math.isnan(iqm(np.array([])))


def test_iqm_axis_and_columns_with_nan():
    # column 0: 1..8 -> 4.5; column 1: [0, 1, 2, 4, 8, 16, 32, 64] -> 7.5;
    # column 2: [1, 2, 3, 4] + 4 NaN -> [2, 3] -> 2.5; column 3: all NaN -> NaN
    col1 = [0, 1, 2, 4, 8, 16, 32, 64]
    col2 = [1, 2, 3, 4] + [np.nan] * 4
    a = np.stack([np.arange(1, 9), col1, col2, [np.nan] * 8], axis=1)
    out = iqm(a, axis=0)
    np.testing.assert_array_equal(out[:3], [4.5, 7.5, 2.5])
    assert np.isnan(out[3])
    np.testing.assert_array_equal(iqm(a.T, axis=1)[:3], [4.5, 7.5, 2.5])
    assert iqm(np.arange(1, 9).reshape(2, 4), axis=None) == 4.5


# --------------------------------------------------------------------- probability of improvement


def test_poi_dominance():
    # every x beats every y: 4 wins / 4 pairs = 1; reversed: 0 / 4 = 0
    assert probability_of_improvement([3, 4], [1, 2]) == 1.0
    assert probability_of_improvement([1, 2], [3, 4]) == 0.0


def test_poi_ties_count_half():
    # 4 pairs, all tied: 4 * 0.5 / 4 = 0.5 (ties as 0 -> 0, ties as 1 -> 1)
    assert probability_of_improvement([1, 1], [1, 1]) == 0.5


def test_poi_mixed_case():
    # x = [2, 3, 5], y = [1, 3, 4]; 9 pairs:
    #   2: beats 1, loses to 3, 4           -> 1
    #   3: beats 1, ties 3, loses to 4      -> 1.5
    #   5: beats 1, 3, 4                    -> 3
    # U = 5.5, P = 5.5 / 9 = 0.6111 (ties as 0: 5/9, ties as 1: 6/9)
    assert probability_of_improvement([2, 3, 5], [1, 3, 4]) == pytest.approx(5.5 / 9)
    # and P(Y > X) = 3.5 / 9, so the two add to 1
    assert probability_of_improvement([1, 3, 4], [2, 3, 5]) == pytest.approx(3.5 / 9)


def test_poi_unequal_sizes_and_nan():
    # x = [2] (NaN dropped), y = [1, 2, 3, 4]: beats 1, ties 2 -> 1.5 / 4 = 0.375
    assert probability_of_improvement([np.nan, 2], [1, 2, 3, 4]) == 0.375
    assert math.isnan(probability_of_improvement([np.nan], [1, 2]))


def test_poi_ci_degenerate_and_contains_point():
    # disjoint supports: every resample has P = 1
    assert probability_of_improvement_ci([3, 4, 5], [0, 1, 2]) == (1.0, 1.0, 1.0)
    x = np.random.default_rng(1).normal(0.5, 1.0, size=30)
    y = np.random.default_rng(2).normal(0.0, 1.0, size=20)
    point, low, high = probability_of_improvement_ci(x, y, reps=1000, seed=3)
    assert low <= point <= high and 0.0 <= low < high <= 1.0
    assert probability_of_improvement_ci(x, y, reps=1000, seed=3) == (point, low, high)
    assert probability_of_improvement_ci(x, y, reps=1000, seed=4) != (point, low, high)


def test_poi_ci_matches_loop_reference():
    x = np.array([0.1, 0.5, 0.5, 0.9, 1.3])
    y = np.array([0.0, 0.5, 0.7])
    reps, confidence, seed = 300, 0.8, 11
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, x.size, size=(reps, x.size))
    iy = rng.integers(0, y.size, size=(reps, y.size))
    slow = []
    for r in range(reps):
        xr, yr = x[ix[r]], y[iy[r]]
        wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in xr for b in yr)
        slow.append(wins / (x.size * y.size))
    expected = np.quantile(slow, [0.1, 0.9])
    _, low, high = probability_of_improvement_ci(x, y, reps, confidence, seed)
    assert (low, high) == pytest.approx(tuple(expected), abs=1e-12)


# --------------------------------------------------------------------------------- bootstrap CI


def test_bootstrap_ci_contains_point_and_is_reproducible():
    x = np.random.default_rng(0).lognormal(size=40)
    point, low, high = stratified_bootstrap_ci(x, iqm, seed=5)
    assert point == iqm(x)
    assert low < point < high
    assert stratified_bootstrap_ci(x, iqm, seed=5) == (point, low, high)
    assert stratified_bootstrap_ci(x, iqm, seed=6) != (point, low, high)


def test_bootstrap_ci_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(size=10), rng.normal(size=1000)
    _, lo_s, hi_s = stratified_bootstrap_ci(small, iqm, reps=1000)
    _, lo_l, hi_l = stratified_bootstrap_ci(large, iqm, reps=1000)
    # width scales like 1 / sqrt(n): about 10x narrower for 100x the seeds
    assert (hi_l - lo_l) < (hi_s - lo_s) / 4


def test_bootstrap_ci_constant_is_degenerate():
    point, low, high = stratified_bootstrap_ci(np.full(7, 0.1), iqm)
    assert low == high == point == pytest.approx(0.1)
    assert stratified_bootstrap_ci([3.0] * 5, np.mean) == (3.0, 3.0, 3.0)


def test_bootstrap_confidence_widens_interval():
    x = np.random.default_rng(2).normal(size=25)
    _, lo50, hi50 = stratified_bootstrap_ci(x, np.mean, confidence=0.5)
    _, lo99, hi99 = stratified_bootstrap_ci(x, np.mean, confidence=0.99)
    assert lo99 < lo50 < hi50 < hi99


def test_stratification_keeps_each_stratum_whole():
    # Each stratum is constant, so every stratified resample is [0, 0, 1, 1]: mean 0.5 always.
    # Pooled (unstratified) resampling of [0, 0, 1, 1] would give means from 0 to 1.
    assert stratified_bootstrap_ci({"a": [0, 0], "b": [1, 1]}, np.mean) == (0.5, 0.5, 0.5)
    _, low, high = stratified_bootstrap_ci([0, 0, 1, 1], np.mean)
    assert low < 0.5 < high


def test_stratified_one_constant_stratum():
    # a = [7, 7, 7] always resamples to sum 21; b = [0, 3] resamples to sum 0, 3 or 6 with
    # probabilities 1/4, 1/2, 1/4. Replicate mean = (21 + sum_b) / 5 in {4.2, 4.8, 5.4}.
    point, reps = bootstrap_replicates({"a": [7, 7, 7], "b": [0, 3]}, np.mean, reps=20000)
    assert point == pytest.approx(24 / 5)  # (21 + 3) / 5
    values, counts = np.unique(np.round(reps, 9), return_counts=True)
    np.testing.assert_allclose(values, [4.2, 4.8, 5.4])
    np.testing.assert_allclose(counts / reps.size, [0.25, 0.5, 0.25], atol=0.015)
    _, low, high = stratified_bootstrap_ci({"a": [7, 7, 7], "b": [0, 3]}, np.mean)
    assert (low, high) == pytest.approx((4.2, 5.4))


def test_bootstrap_matches_exact_enumeration():
    # x = [0, 1, 5]: all 27 equally likely resamples, enumerated. The mean's exact bootstrap
    # distribution has P(<= 0) = 1/27 and P(<= 1/3) = 4/27, so its 5 % quantile is 1/3;
    # P(< 11/3) = 24/27 and P(<= 11/3) = 26/27, so its 95 % quantile is 11/3.
    x = np.array([0.0, 1.0, 5.0])
    exact = np.array([x[list(i)].mean() for i in itertools.product(range(3), repeat=3)])
    point, low, high = stratified_bootstrap_ci(x, np.mean, reps=50000, confidence=0.9)
    assert point == 2.0
    assert (low, high) == pytest.approx((1 / 3, 11 / 3))
    assert (low, high) == pytest.approx(tuple(np.quantile(exact, [0.05, 0.95])))
    _, draws = bootstrap_replicates(x, np.mean, reps=50000)
    assert draws.mean() == pytest.approx(exact.mean(), abs=0.02)
    assert draws.var() == pytest.approx(exact.var(), rel=0.03)


def test_bootstrap_matches_loop_reference_with_same_draws():
    strata = {"t1": np.array([0.0, 2.0, 3.0, 10.0, 4.0]), "t2": np.array([1.0, 1.5, 7.0])}
    reps, confidence, seed = 400, 0.9, 7
    rng = np.random.default_rng(seed)
    idx = [rng.integers(0, s.size, size=(reps, s.size)) for s in strata.values()]
    slow = []
    for r in range(reps):
        sample = np.concatenate([s[i[r]] for s, i in zip(strata.values(), idx, strict=True)])
        slow.append(_trim_mean_reference(sample))
    expected = np.quantile(slow, [0.05, 0.95])
    point, low, high = stratified_bootstrap_ci(
        strata, iqm, reps=reps, confidence=confidence, seed=seed
    )
    assert point == pytest.approx(_trim_mean_reference(np.concatenate(list(strata.values()))))
    assert (low, high) == pytest.approx(tuple(expected), abs=1e-12)
    # the row-by-row path gives the same interval
    slow_path = stratified_bootstrap_ci(
        strata, _trim_mean_reference, reps=reps, confidence=confidence, seed=seed, vectorised=False
    )
    assert slow_path == pytest.approx((point, low, high), abs=1e-12)


def test_bootstrap_drops_nan_and_rejects_empty_stratum():
    with_nan = stratified_bootstrap_ci([1.0, np.nan, 2.0, 5.0], iqm, seed=1)
    assert with_nan == stratified_bootstrap_ci([1.0, 2.0, 5.0], iqm, seed=1)
    with pytest.raises(ValueError):
        stratified_bootstrap_ci({"a": [1.0], "b": [np.nan]}, iqm)
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([1.0, 2.0], iqm, confidence=1.0)


def test_bootstrap_applies_its_statistic_to_every_replicate_at_once():
    """Vectorised: the statistic is called twice (the point estimate, then all 2,000 replicates as one matrix), not
    once per replicate, and gives the interval the row-by-row loop gives."""
    x = np.random.default_rng(0).normal(size=100)
    shapes = []

    def counted_iqm(values, axis=0):
        shapes.append(np.shape(values))
        return iqm(values, axis=axis)

    vectorised = stratified_bootstrap_ci(x, counted_iqm, reps=2000)
    assert shapes == [(1, 100), (2000, 100)]
    assert vectorised == pytest.approx(stratified_bootstrap_ci(x, iqm, reps=2000, vectorised=False), rel=1e-12)


# ------------------------------------------------------------------------------------ summarise


def test_summarise_hand_values():
    # finite scores 1..8 (NaN dropped): n = 8, mean 4.5, iqm 4.5, median (4 + 5) / 2 = 4.5;
    # linear quantiles: q25 at position 0.25 * 7 = 1.75 -> 2 + 0.75 = 2.75; q75 at 5.25 -> 6.25
    s = summarise([8, 1, np.nan, 7, 2, 6, 3, 5, 4])
    assert s["n"] == 8
    assert (s["median"], s["q25"], s["q75"], s["mean"], s["iqm"]) == pytest.approx(
        (4.5, 2.75, 6.25, 4.5, 4.5)
    )
    assert s["iqm_low"] < 4.5 < s["iqm_high"]
    assert set(s) == {"n", "median", "q25", "q75", "mean", "iqm", "iqm_low", "iqm_high"}


def test_summarise_all_nan_and_strata():
    empty = summarise([np.nan, np.nan])
    assert empty["n"] == 0 and all(math.isnan(v) for k, v in empty.items() if k != "n")
    s = summarise({"a": [0, 0], "b": [1, 1], "c": [np.nan]})
    # pooled [0, 0, 1, 1]: iqm cuts 1 each end -> [0, 1] -> 0.5; constant strata -> degenerate CI
    assert s["n"] == 4
    assert (s["iqm"], s["iqm_low"], s["iqm_high"]) == (0.5, 0.5, 0.5)


# ------------------------------------------------------------------------------------ permutation test


def test_permutation_p_of_fully_separated_groups_is_the_smallest_possible():
    from opiq_jax.reporting.stats import permutation_p

    # of the 70 ways to split 8 seeds 4/4, only the observed one and its mirror are as far apart
    assert permutation_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert permutation_p([5, 5, 5], [5, 5, 5]) == 1.0
    assert np.isnan(permutation_p([np.nan], [1.0, 2.0]))


def test_permutation_p_equals_a_brute_force_count_over_every_relabelling():
    import itertools

    from opiq_jax.reporting.stats import permutation_p

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=3), rng.normal(0.8, size=4)
    pooled = np.concatenate([x, y])
    observed = abs(x.mean() - y.mean())
    splits = [np.array(c) for c in itertools.permutations(range(7))]  # every ordering: each split 3! 4! times
    count = sum(abs(pooled[c[:3]].mean() - pooled[c[3:]].mean()) >= observed - 1e-12 for c in splits)
    assert permutation_p(x, y) == pytest.approx(count / len(splits))
    # the rooms of OPIQ and OPIQ w/o OB at 3M steps in results/montezuma-5m: a lead that is not established
    assert permutation_p([3, 2, 2, 2], [5, 5, 1, 5]) == pytest.approx(10 / 70)


def test_permutation_p_draws_random_splits_for_many_seeds():
    from opiq_jax.reporting.stats import permutation_p

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=12), rng.normal(2.0, size=12)  # C(24, 12) = 2.7M splits: drawn
    p = permutation_p(x, y, draws=20_000)
    assert 0 < p < 0.01
    assert permutation_p(x, x + 0.01, draws=20_000) > 0.5


def test_rank_correlation_reads_ranks_not_values():
    assert rank_correlation([1, 10, 1000], [0.1, 0.2, 5.0]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3, 4], [9, 7, 5, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)  # 1 - 6 * 2 / (3 * 8)
    assert math.isnan(rank_correlation([1.0], [2.0]))
    with pytest.raises(ValueError, match="paired values"):
        rank_correlation([1, 2], [1, 2, 3])
