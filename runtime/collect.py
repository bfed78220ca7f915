"""Runtime dataset collection: run strategies on the testbed and append one JSON record per trial.

Records go to ``datasets/runtimes/<model>__<cluster>/<name>.jsonl`` (gzip-compressed to
``.jsonl.gz`` at the end when the file is large); the format is documented in datasets/README.md,
"Runtime records". The baselines of ``simulator.analytical.baselines`` are measured first in every
collection and flagged ``"baseline": true``. This module takes the strategies to run as an
iterable, so ``runtime`` stays independent of ``search`` (the CLI draws them with a sampler).
"""

from __future__ import annotations

import gzip
import json
import platform
import shutil
import socket
import statistics
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.testbed import make_launcher
from simulator.analytical import BASELINES, baseline
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.measurement import Measurement

FORMAT = "strategist.runtime/1"
REPO_ROOT = Path(__file__).resolve().parents[1]
GZIP_ABOVE_BYTES = 4 << 20  # files larger than this are compressed when the collection ends


@dataclass(frozen=True)
class Trial:
    """One strategy to measure and where it came from."""

    strategy: Strategy
    source: str  # "baseline:<name>" or "sampler:<kind>"
    index: int  # position within its source (draw index of the sampler; 0 for baselines)


def git_commit() -> str:
    """The repository's HEAD commit (with "-dirty" if tracked files changed), or "unknown"."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "runtime", "simulator"],
                               cwd=REPO_ROOT, timeout=10).returncode  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def collection_environment() -> dict[str, Any]:
    """Where and with what a collection ran (stored in every record)."""
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git_commit": git_commit(),
    }


def record(
    model: ModelSpec, cluster: ClusterSpec, trial: Trial, m: Measurement, env: dict[str, Any]
) -> dict[str, Any]:
    """The JSON record of one measured trial (see datasets/README.md, "Runtime records")."""
    ok = m.ok
    return {
        "format": FORMAT,
        "model": model.name,
        "cluster": cluster.name,
        "source": trial.source,
        "baseline": trial.source.startswith("baseline:"),
        "index": trial.index,
        "strategy": trial.strategy.model_dump(mode="json"),
        "scale": m.scale,
        "compute": m.compute_mode,
        "ok": ok,
        "failure": m.failure,
        "median_s": m.median if ok else None,
        "spread": m.spread if ok else None,
        "compute_s": _median(m.compute_times) if ok else None,
        "sync_wait_s": _median(m.sync_wait_times) if ok else None,
        "measurement": m.model_dump(mode="json"),
        "environment": {**env, "time_utc": datetime.now(UTC).isoformat(timespec="seconds")},
    }


def _median(xs: tuple[float, ...]) -> float | None:
    return statistics.median(xs) if xs else None


def baseline_trials(model: ModelSpec, cluster: ClusterSpec) -> list[Trial]:
    """Every analytical baseline (horovod, ps, ps-naive, allreduce-single) as a trial."""
    return [Trial(baseline(name, model, cluster), f"baseline:{name}", 0) for name in BASELINES]


def output_path(root: Path, model: ModelSpec, cluster: ClusterSpec, name: str) -> Path:
    """``<root>/<model>__<cluster>/<name>.jsonl`` (the folder is created)."""
    folder = root / f"{model.name}__{cluster.name}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.jsonl"


def collect(
    model: ModelSpec,
    cluster: ClusterSpec,
    trials: Iterable[Trial],
    out: Path,
    *,
    config: ExecutorConfig,
    allow_fallback: bool = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Measure every trial on the testbed for ``cluster`` (scale = ``config.scale``), one session.

    Each record is appended to ``out`` and flushed as soon as it is measured, so an interrupted
    collection keeps what it measured. Returns the final path (``.jsonl.gz`` if compressed).
    """
    env = collection_environment()
    with (
        make_launcher(cluster, config.scale, allow_fallback=allow_fallback) as launcher,
        ExecutorSession(model, cluster, launcher, config) as session,
        out.open("a") as f,
    ):
        for trial in trials:
            rec = record(model, cluster, trial, session.run(trial.strategy), env)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            if on_record is not None:
                on_record(rec)
    return compress_if_large(out)


def compress_if_large(path: Path, above: int = GZIP_ABOVE_BYTES) -> Path:
    """Gzip ``path`` to ``path.gz`` (removing it) when it is larger than ``above`` bytes."""
    if not path.is_file() or path.stat().st_size <= above:
        return path
    gz = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz


def load_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one ``.jsonl`` or ``.jsonl.gz`` file, or of every such file under a folder."""
    files = sorted([*path.rglob("*.jsonl"), *path.rglob("*.jsonl.gz")]) if path.is_dir() else [path]
    for p in files:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
