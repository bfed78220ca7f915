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

from simulator import zoo
from simulator.learned.data import Domain, SourceFile
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy
from simulator.spec.io import parse_as
from simulator.spec.records import is_reference, read_records


def default_runtimes_dir() -> Path:
    return zoo.datasets_dir() / "runtimes"


@dataclass(frozen=True)
class DomainFiles:
    """A domain's folder and its record files."""

    name: str
    files: tuple[Path, ...]


def domain_folders(root: Path) -> list[DomainFiles]:
    """Every ``<model>__<cluster>`` folder under ``root`` with at least one record file."""
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and "__" in p.name):
        files = tuple(sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]))
        if files:
            out.append(DomainFiles(folder.name, files))
    return out


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
