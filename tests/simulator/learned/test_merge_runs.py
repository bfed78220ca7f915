"""Merging whole runs of a domain (simulator.learned.runtimes.merge_runs, load_dataset)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.learned.data import Domain
from simulator.learned.runtimes import MIN_MATCHED, load_dataset, merge_runs
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


def _write(root: Path, name: str, domain: Domain, times: np.ndarray) -> None:
    """``domain``'s strategies as format-2 runtime records under ``root/name``."""
    folder = root / name
    folder.mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "format": "strategist.runtime/2",
                "model": domain.model.name,
                "cluster": domain.cluster.name,
                "ok": True,
                "median_s": float(t),
                "strategy": s.model_dump(mode="json"),
            }
        )
        for s, t in zip(domain.strategies, times, strict=True)
    ]
    (folder / "random-seed1-none.jsonl").write_text("\n".join(lines) + "\n")


def test_a_dataset_merges_the_domains_its_repeat_folder_has(
    model: ModelSpec, cluster: ClusterSpec, tmp_path: Path
) -> None:
    first = synthetic_domain(model, cluster, 20, seed=1)
    name = f"{model.name}__{cluster.name}"
    _write(tmp_path / "runs", name, first, first.times)
    _write(tmp_path / "repeat", name, first, first.times * 1.1)
    specs = {"model_of": lambda _: model, "cluster_of": lambda _: cluster}
    (single,) = load_dataset(tmp_path / "runs", **specs)
    assert single.merged is None and np.allclose(np.sort(single.domain.times), np.sort(first.times))
    (both,) = load_dataset(tmp_path / "runs", tmp_path / "repeat", **specs)
    assert both.merged is not None and both.merged.drift == (0.0, pytest.approx(np.log(1.1)))
    assert [len(run) for run in both.merged.inputs] == [20, 20]
    assert np.allclose(np.sort(both.domain.times), np.sort(first.times))  # a uniform drift is removed
    assert len(both.domain.sources) == 2
    # A repeat of a domain the dataset has not measured is a pairing mistake.
    _write(tmp_path / "repeat", "other__B1", first, first.times)
    with pytest.raises(ValueError, match=r"repeat: .* has other__B1, which .* has not measured"):
        load_dataset(tmp_path / "runs", tmp_path / "repeat", **specs)
