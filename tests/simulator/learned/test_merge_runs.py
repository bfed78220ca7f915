"""Merging whole runs of a domain (simulator.learned.runtimes.merge_runs)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.learned.data import Domain
from simulator.learned.runtimes import MIN_MATCHED, merge_runs
from simulator.spec import ClusterSpec, ModelSpec

from .conftest import synthetic_domain


def _again(first: Domain, factor: np.ndarray, extra: Domain | None = None) -> Domain:
    """``first`` measured again in reverse order, times multiplied by ``factor`` (+ ``extra``)."""
    back = first.subset(np.arange(len(first))[::-1])
    strategies, times, keys = back.strategies, back.times * factor, back.keys
    if extra is not None:
        strategies, times, keys = (
            (*strategies, *extra.strategies),
            np.concatenate([times, extra.times]),
            (*keys, *extra.keys),
        )
    return Domain(first.model, first.cluster, strategies, times, keys)


def test_a_repeat_is_divided_by_its_drift_and_averaged_geometrically(
    model: ModelSpec, cluster: ClusterSpec
) -> None:
    first = synthetic_domain(model, cluster, 30, seed=1)
    noise = np.exp(0.05 * np.random.default_rng(2).standard_normal(len(first)))
    stranger = synthetic_domain(model, cluster, 1, seed=99)
    repeat = _again(first, 1.2 * noise, stranger)  # 20 % slower run, plus one new strategy
    merged = merge_runs(first, repeat)
    drift = float(np.median(np.log(1.2 * noise)))
    assert merged.drift == (0.0, pytest.approx(drift))
    d = merged.domain
    assert d.name == first.name and len(d) == len(first) + 1
    at = {k: i for i, k in enumerate(d.keys)}
    # In the first run's scale: sqrt(t1 x t2 / e^drift) for a strategy measured twice.
    want = np.sqrt(first.times * first.times * (1.2 * noise)[::-1] / np.exp(drift))
    assert np.allclose([d.times[at[k]] for k in first.keys], want)
    assert d.times[at[stranger.keys[0]]] == pytest.approx(stranger.times[0] / np.exp(drift))
    assert merged.runs[at[stranger.keys[0]]] == 1 and merged.runs.sum() == 2 * len(first) + 1
    assert d.sources == first.sources + repeat.sources
    # A run merged with itself is itself, and with no repeat too.
    assert np.allclose(merge_runs(first, first).domain.times, first.times)
    assert merge_runs(first).domain.keys == first.keys


def test_a_repeat_of_another_domain_or_too_few_strategies_is_refused(
    model: ModelSpec, cluster: ClusterSpec
) -> None:
    first = synthetic_domain(model, cluster, 30, seed=1)
    few = first.subset(range(MIN_MATCHED - 1))
    with pytest.raises(ValueError, match=f"shares {MIN_MATCHED - 1} strategies"):
        merge_runs(first, few)
    other = Domain(
        first.model.model_copy(update={"name": "other"}),
        first.cluster,
        first.strategies,
        first.times,
        first.keys,
    )
    with pytest.raises(ValueError, match="is not"):
        merge_runs(first, other)
