"""The noise ceiling of pairwise accuracy from a retest (simulator.learned.noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.learned.data import Domain
from simulator.learned.noise import bounds, estimate, noise_gap
from simulator.metrics import pairwise_accuracy
from simulator.spec import ClusterSpec, ModelSpec


def test_bounds_by_hand() -> None:
    assert bounds(1.0) == (1.0, 1.0)
    assert bounds(0.5) == (0.5, 0.5)
    # Same flip probability p = 0.1 for every pair: r = 1 - 2 p (1 - p) = 0.82, ceiling 0.9.
    lo, hi = bounds(0.82)
    assert lo == 0.82 and hi == pytest.approx(0.9)
    assert all(math.isnan(x) for x in bounds(float("nan")))


def test_noise_gap_is_the_quantile_of_the_retest_log_ratio() -> None:
    a = np.array([1.0, 1.0, 1.0, 1.0])
    b = np.array([1.0, 1.1, 1.0 / 1.2, 1.0])
    assert noise_gap(a, b, quantile=1.0) == pytest.approx(0.2)
    assert noise_gap(a, a) == 0.0


def test_estimate_recovers_a_perfect_rankers_agreement_on_simulated_noise() -> None:
    rng = np.random.default_rng(0)
    n, sigma = 400, 0.08
    true = rng.normal(0.0, 0.15, n)  # log seconds
    first = true + sigma * rng.standard_normal(n)
    again = true[:60] + sigma * rng.standard_normal(60)
    truth = pairwise_accuracy(true, first)  # what a perfect ranker reaches against one collection
    c = estimate(np.exp(first), np.exp(first[:60]), np.exp(again))
    assert c.matched == 60
    assert c.retest_agreement == pytest.approx(pairwise_accuracy(again, first[:60]))
    assert c.lower <= c.estimate <= c.upper + 0.02
    assert abs(c.estimate - truth) < 0.03, (c.estimate, truth)
    assert 0.5 < c.scale < 2.0
    # Pairs farther apart than the noise gap are ordered right more often, by measurement too.
    i, j = np.triu_indices(n, k=1)
    far = np.abs(first[i] - first[j]) > np.log1p(c.gap)
    far_truth = float(np.mean(np.sign(true[i] - true[j])[far] == np.sign(first[i] - first[j])[far]))
    assert c.resolved_estimate > c.estimate and abs(c.resolved_estimate - far_truth) < 0.03
    # More noise, lower ceiling.
    noisier = estimate(
        np.exp(first), np.exp(first[:60]), np.exp(true[:60] + 3 * sigma * rng.standard_normal(60))
    )
    assert noisier.estimate < c.estimate
    with pytest.raises(ValueError, match="retest"):
        estimate(np.exp(first), np.exp(first[:2]), np.exp(again[:2]))


def test_from_retest_matches_strategies_by_key(model: ModelSpec, cluster: ClusterSpec) -> None:
    from simulator.learned.noise import from_retest

    from .conftest import synthetic_domain

    collection = synthetic_domain(model, cluster, 40, seed=1)
    # The retest: 12 of the strategies in another order, measured again with 5 % noise, and one
    # strategy the collection never measured (left out of the match).
    order = np.random.default_rng(2).permutation(len(collection))[:12]
    stranger = synthetic_domain(model, cluster, 1, seed=99)
    again = collection.subset(order)
    again = Domain(
        model, cluster, (*again.strategies, *stranger.strategies),
        np.concatenate([again.times * np.exp(0.05 * np.random.default_rng(3).standard_normal(12)),
                        stranger.times]),
        (*again.keys, *stranger.keys),
    )  # fmt: skip
    c = from_retest(collection, again)
    assert c is not None and c.matched == 12
    direct = estimate(collection.times, collection.times[order], again.times[:12])
    assert c == direct
    assert from_retest(collection, again.subset([0, 1])) is None  # fewer than 3 matched


def test_a_drift_common_to_the_whole_retest_is_not_pair_noise() -> None:
    rng = np.random.default_rng(5)
    true = rng.normal(0.0, 0.2, 200)
    first = np.exp(true + 0.03 * rng.standard_normal(200))
    again = np.exp(true[:40] + 0.03 * rng.standard_normal(40))
    plain = estimate(first, first[:40], again)
    faster = estimate(first, first[:40], 0.85 * again)  # the retest run 15 % faster throughout
    assert faster.gap == pytest.approx(plain.gap) and faster.estimate == pytest.approx(plain.estimate)
    assert faster.retest_agreement == plain.retest_agreement
    assert noise_gap(first[:40], 0.85 * again) == pytest.approx(noise_gap(first[:40], again))


def test_the_ceiling_against_labels_of_two_runs_is_what_a_perfect_ranker_reaches_there() -> None:
    """runs = 2: the labels average two runs, so the pair noise is the mean of two draws."""
    rng = np.random.default_rng(4)
    n, sigma = 200, 0.08
    true = rng.normal(0.0, 0.15, n)
    first = true + sigma * rng.standard_normal(n)
    again = true + sigma * rng.standard_normal(n)
    merged = (first + again) / 2.0
    single = estimate(np.exp(first), np.exp(first), np.exp(again))
    both = estimate(np.exp(merged), np.exp(first), np.exp(again), runs=2)
    truth = pairwise_accuracy(true, merged)
    assert abs(both.estimate - truth) < 0.02, (both.estimate, truth)
    assert both.estimate > single.estimate + 0.02  # half the noise variance
    # What does not depend on the labels' runs: the retest itself, its bounds, the gap.
    assert (both.retest_agreement, both.lower, both.upper, both.gap) == (
        single.retest_agreement,
        single.lower,
        single.upper,
        single.gap,
    )
    with pytest.raises(ValueError, match="runs"):
        estimate(np.exp(first), np.exp(first), np.exp(again), runs=0)


def test_the_ceiling_against_labels_of_a_partial_repeat_is_what_a_perfect_ranker_reaches_there() -> None:
    """runs per strategy: half the strategies measured again (their labels average two runs), the
    rest once; the ceiling lies between the single-run and the two-run one, near the truth."""
    rng = np.random.default_rng(5)
    n, sigma = 200, 0.08
    true = rng.normal(0.0, 0.15, n)
    first = true + sigma * rng.standard_normal(n)
    again = true + sigma * rng.standard_normal(n)
    runs = np.where(np.arange(n) < n // 2, 2, 1)
    labels = np.where(runs == 2, (first + again) / 2.0, first)
    half = estimate(np.exp(labels), np.exp(first[:100]), np.exp(again[:100]), runs=runs)
    single = estimate(np.exp(first), np.exp(first[:100]), np.exp(again[:100]))
    both = estimate(np.exp(labels), np.exp(first[:100]), np.exp(again[:100]), runs=2)
    assert single.estimate < half.estimate < both.estimate
    truth = pairwise_accuracy(true, labels)
    assert abs(half.estimate - truth) < 0.02, (half.estimate, truth)
    # One count for every strategy is the same as that count given per strategy.
    assert estimate(
        np.exp(labels), np.exp(first), np.exp(again), runs=np.full(n, 2)
    ).estimate == pytest.approx(estimate(np.exp(labels), np.exp(first), np.exp(again), runs=2).estimate)
