"""Runtime dataset collection: run strategies on the testbed and append one JSON record per trial.

Records go to ``datasets/runtimes/<model>__<cluster>/<name>.jsonl`` (gzip-compressed to
``.jsonl.gz`` at the end when the file is large); the format is documented in datasets/README.md,
"Runtime records". This module takes the strategies to run as an iterable, so ``runtime`` stays
independent of ``search`` (the CLI draws them with a sampler).

The measurement protocol (issue 13; runtime/testbed/README.md, "Measurement protocol"):

- **Resumable**: a collection appends to its file and skips every strategy already measured there
  (by ``strategy_key``), so an interrupted collection is continued by running the same command.
- **Interleaved**: ``interleave`` puts the baselines at seeded random positions among the sampled
  strategies, so slow drift of the host cannot favour either side.
- **Clean tree**: ``require_clean_tree`` refuses to write into the repository's datasets/ from a
  tree with uncommitted code changes; every record names the commit it was measured at.
- **Quiet host**: a trial during which other processes used more than ``max_foreign_share`` of
  the host's CPU (``runtime.executor.hostload``) is measured again, up to ``retries`` times, after
  a pause; the attempt with the least background load is kept and flagged ``"noisy"`` if even
  that one was over the limit.
- Each record stores the median, its 95 % bootstrap interval, the time dilation and the
  per-call overhead measured in that trial.
- **Drift reference** (optional): a fixed strategy measured again before the first trial, after
  every N trials and after the last, flagged ``"reference": true``. Two runs on this host can
  differ by a factor common to all their trials (a retest 15 % faster throughout; the foreign-CPU
  check does not see it); the reference's times show that factor over a run
  (``reference_drift``), so runs can be compared in absolute time. Reference records are not
  trials: resuming does not count them as measured and the readers that build domains leave
  them out (``simulator.spec.records.is_reference``).
"""

from __future__ import annotations

import gzip
import json
import platform
import random
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.testbed import make_launcher
from simulator.analytical import BASELINES, baseline
from simulator.metrics import median_ci95
from simulator.spec import ClusterSpec, ModelSpec, Strategy, domain_name, strategy_key
from simulator.spec.measurement import Measurement
from simulator.spec.records import FORMAT, load_trials, reference_times

REPO_ROOT = Path(__file__).resolve().parents[1]
GZIP_ABOVE_BYTES = 4 << 20  # files larger than this are compressed when the collection ends
#: Share of the host's CPU that other processes may use during a trial before it is measured again.
MAX_FOREIGN_SHARE = 0.25
#: Measurements again of a noisy trial (the least noisy attempt is kept).
RETRIES = 2
#: Seconds to wait before measuring a noisy trial again.
SETTLE_S = 10.0
#: Source prefix of a drift reference's records (``collect``'s ``reference``).
REFERENCE = "reference:"


class DirtyTreeError(RuntimeError):
    """The repository has uncommitted code changes; records would not name the code they came from."""


@dataclass(frozen=True)
class Trial:
    """One strategy to measure and where it came from."""

    strategy: Strategy
    source: str  # "baseline:<name>", "sampler:<kind>" or "reference:<name>"
    index: int  # position within its source (draw index of the sampler; 0 for baselines)


def git_commit() -> str:
    """The repository's HEAD commit (with "-dirty" if tracked files changed), or "unknown"."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)datasets"],
                               cwd=REPO_ROOT, timeout=10).returncode  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def require_clean_tree(out: Path) -> None:
    """Refuse to write under the repository's ``datasets/`` from a tree with uncommitted changes
    (tracked files outside ``datasets/``): every record must name code that exists in the history."""
    try:
        out.resolve().relative_to((REPO_ROOT / "datasets").resolve())
    except ValueError:
        return  # elsewhere (a scratch folder, a test): the commit is recorded as it is
    commit = git_commit()
    if commit == "unknown" or commit.endswith("-dirty"):
        raise DirtyTreeError(
            f"refusing to write into {out}: the working tree has uncommitted changes outside datasets/ "
            f"(commit: {commit}); commit them first so every record names the code that measured it"
        )


def interleave(baselines: Sequence[Trial], sampled: Sequence[Trial], seed: int) -> list[Trial]:
    """The sampled trials in order, with the baselines inserted at seeded random positions."""
    rng = random.Random(seed)
    out = list(sampled)
    for b in baselines:
        out.insert(rng.randint(0, len(out)), b)
    return out


def gz_of(path: Path) -> Path:
    """Where ``compress_if_large`` puts ``path`` once it is large."""
    return path.with_name(path.name + ".gz")


def stored(path: Path) -> list[Path]:
    """``path`` and its ``.gz``, those that exist: a collection's records, plain and compressed."""
    return [p for p in (path, gz_of(path)) if p.is_file()]


def measured_keys(path: Path) -> set[str]:
    """Strategy keys already measured in ``path`` (or its ``.gz``), for resuming a collection."""
    return {strategy_key(r["strategy"]) for p in stored(path) for r in load_trials(p)}


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
    model: ModelSpec,
    cluster: ClusterSpec,
    trial: Trial,
    m: Measurement,
    env: dict[str, Any],
    *,
    max_foreign_share: float = MAX_FOREIGN_SHARE,
) -> dict[str, Any]:
    """The JSON record of one measured trial (see datasets/README.md, "Runtime records")."""
    ok = m.ok
    env_m = m.environment
    ci = median_ci95(m.iteration_times) if ok else None
    return {
        "format": FORMAT,
        "model": model.name,
        "cluster": cluster.name,
        "source": trial.source,
        "baseline": trial.source.startswith("baseline:"),
        "reference": trial.source.startswith(REFERENCE),
        "index": trial.index,
        "strategy": trial.strategy.model_dump(mode="json"),
        "scale": m.scale,
        "compute": m.compute_mode,
        "ok": ok,
        "failure": m.failure,
        "median_s": m.median if ok else None,
        "median_ci95_s": list(ci) if ci else None,
        "spread": m.spread if ok else None,
        "dilation": env_m.get("dilation", 1.0),
        "per_call_overhead_s": env_m.get("per_call_overhead_s"),
        "foreign_cpu_share": env_m.get("foreign_cpu_share"),
        "noisy": _noisy(m, max_foreign_share),
        "compute_s": _median(m.compute_times) if ok else None,
        "sync_wait_s": _median(m.sync_wait_times) if ok else None,
        "measurement": m.model_dump(mode="json"),
        "environment": {**env, "time_utc": datetime.now(UTC).isoformat(timespec="seconds")},
    }


def _median(xs: tuple[float, ...]) -> float | None:
    return statistics.median(xs) if xs else None


def _noisy(m: Measurement, limit: float) -> bool:
    share = m.environment.get("foreign_cpu_share")
    return share is not None and share > limit


def baseline_trials(model: ModelSpec, cluster: ClusterSpec) -> list[Trial]:
    """Every analytical baseline (horovod, ps, ps-naive, allreduce-single) as a trial."""
    return [Trial(baseline(name, model, cluster), f"baseline:{name}", 0) for name in BASELINES]


def output_path(root: Path, model: ModelSpec, cluster: ClusterSpec, name: str) -> Path:
    """``<root>/<model>__<cluster>/<name>.jsonl`` (the folder is created)."""
    folder = root / domain_name(model.name, cluster.name)
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
    max_foreign_share: float = MAX_FOREIGN_SHARE,
    retries: int = RETRIES,
    settle_s: float = SETTLE_S,
    reference: Trial | None = None,
    reference_every: int = 0,
) -> Path:
    """Measure every trial not yet in ``out`` on the testbed for ``cluster``, in one session.

    Bandwidth is divided by ``config.link_scale`` (scale × dilation). Each record is appended to
    ``out`` and flushed as soon as it is measured, so an interrupted collection keeps what it
    measured and the same call later continues it. Returns the final path (``.jsonl.gz`` if
    compressed). Raises DirtyTreeError before measuring anything when ``out`` lies in the
    repository's datasets/ and the code has uncommitted changes. With ``reference`` (its source
    must start with ``REFERENCE``) and ``reference_every`` = N >= 1, the reference strategy is
    measured before the first trial still to do, after every N of them and after the last (module
    docstring); its records go to ``out`` like the trials' and to ``on_record`` too.
    """
    if reference is not None and (reference_every < 1 or not reference.source.startswith(REFERENCE)):
        raise ValueError(
            f"reference: needs reference_every >= 1 and a source starting with {REFERENCE!r}, "
            f"got {reference_every} and {reference.source!r}"
        )
    require_clean_tree(out)
    env = collection_environment()
    gz = gz_of(out)
    if gz.is_file():  # resuming a compressed collection: append to its plain form
        with gzip.open(gz, "rb") as src, out.open("ab") as dst:
            shutil.copyfileobj(src, dst)
        gz.unlink()
    done = measured_keys(out)
    todo = [t for t in trials if strategy_key(t.strategy) not in done]
    if not todo:
        return compress_if_large(out)
    with (
        make_launcher(cluster, config.link_scale, allow_fallback=allow_fallback) as launcher,
        ExecutorSession(model, cluster, launcher, config) as session,
        out.open("a") as f,
    ):

        def measure(trial: Trial) -> None:
            m = session.run(trial.strategy)
            attempts = 1
            while m.ok and _noisy(m, max_foreign_share) and attempts <= retries:
                time.sleep(settle_s)
                again = session.run(trial.strategy)
                attempts += 1
                share = again.environment.get("foreign_cpu_share", 1.0)
                if again.ok and share < m.environment.get("foreign_cpu_share", 1.0):
                    m = again
            rec = record(model, cluster, trial, m, env, max_foreign_share=max_foreign_share)
            rec["attempts"] = attempts
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            if on_record is not None:
                on_record(rec)

        for k, trial in enumerate(todo):
            if reference is not None and k % reference_every == 0:
                measure(reference)
            measure(trial)
        if reference is not None:
            measure(reference)
    return compress_if_large(out)


def reference_drift(path: Path) -> list[float]:
    """The drift reference's measured seconds in ``path`` (or its ``.gz``), in the order measured:
    each divided by their median, so 1.10 = that stretch of the run was 10 % slower (empty when
    the collection had no reference)."""
    times = [t for p in stored(path) for t in reference_times(p)]
    mid = statistics.median(times) if times else 1.0
    return [t / mid for t in times]


def compress_if_large(path: Path, above: int = GZIP_ABOVE_BYTES) -> Path:
    """Gzip ``path`` to ``path.gz`` (removing it) when it is larger than ``above`` bytes."""
    if not path.is_file() or path.stat().st_size <= above:
        return path
    gz = gz_of(path)
    with path.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz
