"""Runtime records: the one reader of measured-runtime files (``*.jsonl`` and ``*.jsonl.gz``).

The format is written by ``runtime.collect`` and described in datasets/README.md ("Runtime
records"): one JSON object per line with ``format`` (``FORMAT``), ``model`` and ``cluster`` (zoo
names), ``strategy`` (a Strategy as JSON), ``ok``, ``median_s`` (median seconds per iteration),
``failure`` and the collection's environment. The collector (resuming a collection), the learned
simulators' loader (``simulator.learned.runtimes``) and the benchmarks all read through here.

Decisions: blank lines are skipped; a last line without its newline is a record still being
written (an interrupted or running collection) and is left out, while an unreadable line anywhere
else raises ValueError naming the file and line. ``read_records`` also checks that each record is
an object in this format with ``model``, ``cluster`` and ``strategy``; ``load_records`` yields the
objects as they are (the collector's own files, and tests writing minimal records).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The format this code writes; readers accept any ``FORMAT_PREFIX`` version.
FORMAT = "strategist.runtime/2"
FORMAT_PREFIX = "strategist.runtime/"


def record_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``.jsonl`` and ``.jsonl.gz`` file under the folder ``path``, sorted."""
    if not path.is_dir():
        return [path]
    return sorted([*path.rglob("*.jsonl"), *path.rglob("*.jsonl.gz")])


@dataclass(frozen=True)
class DomainFiles:
    """A domain's folder and its record files."""

    name: str
    files: tuple[Path, ...]


def domain_folders(root: Path) -> list[DomainFiles]:
    """Every ``<model>__<cluster>`` folder under ``root`` with at least one record file: the layout
    of a dataset folder (``datasets/runtimes-v2``), read by ``simulator.learned.runtimes`` and
    checked by the service's ``pretrain_dirs`` / ``pretrain_repeats`` settings (here, not there,
    so that the API process need not import torch to check a folder)."""
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and "__" in p.name):
        files = tuple(sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]))
        if files:
            out.append(DomainFiles(folder.name, files))
    return out


def parsed_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of one file (gzip by its suffix)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                if not line.endswith("\n"):
                    return  # the last line of a file still being written
                raise ValueError(f"{path}:{lineno}: not valid JSON: {e}") from None


def is_reference(rec: dict[str, Any]) -> bool:
    """Whether a record is a drift reference's (``runtime.collect``): a repeated measurement of a
    fixed strategy that tracks the host over a run, not a trial of the collection."""
    return bool(rec.get("reference", False))


def load_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one file, or of every record file under a folder, unchecked."""
    for p in record_files(path):
        for _, rec in parsed_lines(p):
            yield rec


def load_trials(path: Path) -> Iterator[dict[str, Any]]:
    """``load_records`` less the drift reference's records (``is_reference``): the trials."""
    return (rec for rec in load_records(path) if not is_reference(rec))


def reference_times(path: Path) -> list[float]:
    """The drift reference's measured seconds (``median_s`` of its successful records) in one file
    or under a folder, in file order (the order measured within a file); empty without one."""
    return [
        float(rec["median_s"])
        for rec in load_records(path)
        if is_reference(rec) and rec.get("ok") and rec.get("median_s")
    ]


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of one file, checked; a bad record raises ValueError naming file, line and field."""
    out = []
    for lineno, rec in parsed_lines(path):
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{lineno}: a record must be a JSON object")
        fmt = rec.get("format", "")
        if not str(fmt).startswith(FORMAT_PREFIX):
            raise ValueError(f"{path}:{lineno}: format: expected {FORMAT_PREFIX}*, got {fmt!r}")
        for key in ("model", "cluster", "strategy"):
            if key not in rec:
                raise ValueError(f"{path}:{lineno}: {key}: missing")
        out.append(rec)
    return out
