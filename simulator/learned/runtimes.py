"""Reading measured runtimes from ``datasets/runtimes/<model>__<cluster>/*.jsonl[.gz]`` as Domains.

The records are read by ``simulator.spec.records.read_records`` (the one reader; the format is
there). Failed trials carry no time and are left out (they are counted). Model and cluster
specs are looked up by name (the zoo by default). Only measured times are used: nothing here
makes a label up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator import zoo
from simulator.learned.data import Domain, SourceFile
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy
from simulator.spec.io import parse_as
from simulator.spec.records import DomainFiles, domain_folders, is_reference, read_records


def default_runtimes_dir() -> Path:
    return zoo.datasets_dir() / "runtimes"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_domain(
    folder: DomainFiles,
    model_of: Callable[[str], ModelSpec] = zoo.model,
    cluster_of: Callable[[str], ClusterSpec] = zoo.cluster,
) -> tuple[Domain, int]:
    """The successful measurements of one domain folder, and the number of failed records (a drift
    reference's records, ``runtime.collect``, are neither: they are left out)."""
    samples: list[tuple[Strategy, float]] = []
    sources = []
    failed = 0
    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    for path in folder.files:
        records = read_records(path)
        sources.append(SourceFile(path=str(path), records=len(records), sha256=_sha256(path)))
        for i, rec in enumerate(records):
            where = f"{path}: record {i + 1}"
            if model is None:
                model, cluster = model_of(rec["model"]), cluster_of(rec["cluster"])
            assert cluster is not None
            if (rec["model"], rec["cluster"]) != (model.name, cluster.name):
                raise ValueError(
                    f"{where}: model/cluster: {rec['model']}/{rec['cluster']} in a folder of "
                    f"{model.name}/{cluster.name}"
                )
            if is_reference(rec):  # a drift reference's repeat, not a trial of the domain
                continue
            seconds = rec.get("median_s")
            if not rec.get("ok", False) or seconds is None:
                failed += 1
                continue
            if not (isinstance(seconds, int | float) and seconds > 0):
                raise ValueError(f"{where}: median_s: must be a number > 0, got {seconds!r}")
            try:
                strategy = parse_as(Strategy, rec["strategy"])
            except SpecError as e:
                raise ValueError(f"{where}: strategy: {e}") from None
            samples.append((strategy, float(seconds)))
    if model is None or cluster is None:
        raise ValueError(f"{folder.name}: no records")
    domain = Domain.from_measurements(model, cluster, samples, sources=tuple(sources))
    return domain, failed


#: Strategies a repeat run must share with the first run for its drift to be estimated.
MIN_MATCHED = 10


@dataclass(frozen=True)
class MergedRuns:
    """``merge_runs``' answer: the merged domain, each later run's drift against the first (log
    ratio, first run 0.0), per strategy how many runs measured it (in the domain's order), and the
    runs merged (the first run first)."""

    domain: Domain
    drift: tuple[float, ...]
    runs: np.ndarray
    inputs: tuple[Domain, ...]


def merge_runs(first: Domain, *repeats: Domain) -> MergedRuns:
    """One domain from whole runs of the same strategies: a collection and its repeats.

    A repeat run is the same ``strategist collect`` command again into another dataset folder
    (e.g. ``datasets/repeat-v2``), so every strategy is measured once per run. Runs differ by a
    drift common to all their strategies (runtime/testbed/README.md, "Measurement protocol": up
    to 18 % between quiet back-to-back runs), which is not a property of any strategy: run k's
    drift is the median over the strategies both runs measured of log(t_k / t_first), and a
    strategy's merged time is the geometric mean of its runs' times, each divided by its run's
    drift — so the merged times are in the first run's scale, and a strategy measured by one run
    only keeps that run's (drift-corrected) time.

    Decision: the drift is estimated from the matched strategies, not from the drift reference
    (``strategist collect --reference-every``): over ~200 matched strategies the median's
    sampling error is about 1.25 σ / sqrt(n) ≈ 0.7 % at this testbed's per-measurement noise of
    5-8 %, while the reference's median left a 3 % mean residual (four quiet runs, 2026-11-29).
    A repeat with fewer than ``MIN_MATCHED`` strategies in common with the first run is refused
    (its drift would be a guess). The geometric mean, not the median of the two, because with two
    runs the median is the mean anyway, and the noise is multiplicative (log ratios are
    symmetric). Averaging m runs divides the label's noise variance by m
    (``noise.estimate(..., runs=m)`` is the ceiling against such labels).
    """
    for r in repeats:
        if (r.model.name, r.cluster.name) != (first.model.name, first.cluster.name):
            raise ValueError(f"repeat: domain {r.name} is not {first.name}")
    base = dict(zip(first.keys, np.log(first.times), strict=True))
    logs: dict[str, list[float]] = {k: [v] for k, v in base.items()}
    strategies = dict(zip(first.keys, first.strategies, strict=True))
    drift = [0.0]
    for r in repeats:
        here = dict(zip(r.keys, np.log(r.times), strict=True))
        common = [k for k in here if k in base]
        if len(common) < MIN_MATCHED:
            raise ValueError(
                f"repeat: {r.name} shares {len(common)} strategies with the first run; "
                f"need >= {MIN_MATCHED} to estimate its drift"
            )
        d = float(np.median([here[k] - base[k] for k in common]))
        drift.append(d)
        for k, v, s in zip(r.keys, np.log(r.times), r.strategies, strict=True):
            logs.setdefault(k, []).append(float(v) - d)
            strategies.setdefault(k, s)
    keys = tuple(sorted(logs))
    domain = Domain(
        model=first.model,
        cluster=first.cluster,
        strategies=tuple(strategies[k] for k in keys),
        times=np.exp([float(np.mean(logs[k])) for k in keys]),
        keys=keys,
        sources=first.sources + tuple(s for r in repeats for s in r.sources),
        name=first.name,
    )
    return MergedRuns(domain, tuple(drift), np.array([len(logs[k]) for k in keys]), (first, *repeats))


@dataclass(frozen=True)
class DatasetDomain:
    """One domain of a dataset folder as ``load_dataset`` reads it: its folder, its measurements
    (merged with its repeat run's when there is one), failed records, and the merge (or None)."""

    folder: DomainFiles
    domain: Domain
    failed: int
    merged: MergedRuns | None = None


def load_dataset(
    root: Path,
    repeat: Path | None = None,
    model_of: Callable[[str], ModelSpec] = zoo.model,
    cluster_of: Callable[[str], ClusterSpec] = zoo.cluster,
) -> list[DatasetDomain]:
    """Every domain of the dataset folder ``root``; where ``repeat`` (a folder of the same layout
    holding whole repeat runs of ``root``'s collections, e.g. ``datasets/repeat-v2`` of
    ``datasets/runtimes-v2``) has the domain, the collection and its repeat merged (``merge_runs``).

    A repeat domain with no collection in ``root`` raises ValueError naming it: a repeat of nothing
    is a mistake in the pairing, not data to drop silently.
    """
    again = {f.name: f for f in domain_folders(repeat)} if repeat is not None else {}
    folders = domain_folders(root)
    orphans = sorted(set(again) - {f.name for f in folders})
    if orphans:
        raise ValueError(f"repeat: {repeat} has {', '.join(orphans)}, which {root} has not measured")
    out = []
    for folder in folders:
        domain, failed = load_domain(folder, model_of, cluster_of)
        merged = None
        if folder.name in again:
            merged = merge_runs(domain, load_domain(again[folder.name], model_of, cluster_of)[0])
            domain = merged.domain
        out.append(DatasetDomain(folder, domain, failed, merged))
    return out


def load_runtimes(
    root: Path | None = None,
    names: Sequence[str] | None = None,
    model_of: Callable[[str], ModelSpec] = zoo.model,
    cluster_of: Callable[[str], ClusterSpec] = zoo.cluster,
) -> list[Domain]:
    """Every measured domain under ``root`` (default ``datasets/runtimes``), or those in ``names``.

    Raises KeyError naming the known domains when a requested one is missing.
    """
    folders = {f.name: f for f in domain_folders(root or default_runtimes_dir())}
    wanted = list(names) if names is not None else sorted(folders)
    missing = [n for n in wanted if n not in folders]
    if missing:
        raise KeyError(
            f"no runtime records for {', '.join(missing)}; known: {', '.join(sorted(folders)) or 'none'}"
        )
    return [load_domain(folders[n], model_of, cluster_of)[0] for n in wanted]
