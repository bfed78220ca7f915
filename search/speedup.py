"""Speed-ups that cannot mislead (issue 14): like against like, tuned baselines, with an interval.

Inputs are measured runs: a label, the space of the strategy (``search.space.space_of``:
lossless or lossy) and the per-iteration times of its trial. Rules:

- A baseline family's *tuned* run is its fastest measured member (by median iteration time), so
  tuned is never slower than the family's untuned member; :func:`family_results` asserts it.
- The lossless winner (the fastest lossless candidate) is compared with the lossless families
  (horovod, ps); the lossy winner with the lossy families (horovod-fp16, ddp-powersgd). A lossy
  winner is never compared with a lossless baseline here: its step-time speed-up says nothing
  about training until a time-to-accuracy run (``runtime.accuracy``) confirms it, and it is
  labelled "lossy, accuracy not verified" until then.
- Ratio = baseline median / winner median (> 1: the winner is faster), with a 95 % percentile
  bootstrap interval: both trials' iteration times are resampled with replacement
  (``BOOTSTRAP`` times, fixed seed) and the ratio of medians recomputed. Iterations of one trial
  are treated as exchangeable; they are not fully independent (a slow phase of the machine spans
  several), so the interval is a lower bound on the real uncertainty, which a second trial of the
  same strategy would show better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from search.baselines import family_of, is_lossy_baseline
from search.space import SpaceKind

BOOTSTRAP = 2000
LOSSLESS_FAMILIES = ("horovod", "ps")
LOSSY_FAMILIES = ("horovod-fp16", "ddp-powersgd")
NOT_VERIFIED = "lossy, accuracy not verified"


@dataclass(frozen=True)
class Measured:
    """One measured run: what it was, its space, its per-iteration times (s)."""

    label: str
    space: SpaceKind
    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.times))


@dataclass(frozen=True)
class FamilyResult:
    """A baseline family as measured: its tuned (fastest) member and its untuned member."""

    family: str
    lossy: bool
    tuned: Measured | None
    untuned: Measured | None
    measured: int  # members with a measurement
    members: tuple[str, ...]  # every member name seen (measured or not)


@dataclass(frozen=True)
class Ratio:
    """Winner vs one family's tuned baseline: baseline median / winner median and its 95 % interval."""

    family: str
    baseline: str
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class SpaceReport:
    """The winner of one space (lossless or lossy) against that space's baseline families."""

    space: SpaceKind
    winner: Measured | None
    ratios: tuple[Ratio, ...]
    accuracy: str  # "lossless" | NOT_VERIFIED | the time-to-accuracy verdict


def bootstrap_ratio(
    baseline: Sequence[float] | NDArray[np.float64],
    winner: Sequence[float] | NDArray[np.float64],
    n: int = BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of median(baseline) / median(winner)."""
    b = np.asarray(baseline, dtype=np.float64)
    w = np.asarray(winner, dtype=np.float64)
    if b.size == 0 or w.size == 0:
        raise ValueError("bootstrap_ratio: both runs need at least one iteration time")
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, b.size, size=(n, b.size))], axis=1)
    mw = np.median(w[rng.integers(0, w.size, size=(n, w.size))], axis=1)
    lo, hi = np.percentile(mb / mw, [2.5, 97.5])
    return float(lo), float(hi)


def family_results(baselines: Sequence[Measured], failed: Sequence[str] = ()) -> tuple[FamilyResult, ...]:
    """Group measured baseline members (and the names of failed ones) into families.

    The untuned member is the family's first (``search.baselines``); a legacy single baseline
    named after its family (``horovod``, ``ps``) counts as that family's only member.
    """
    from search.baselines import baseline_families

    untuned_of = {f.name: f.untuned for f in baseline_families("all")}
    fams: dict[str, list[Measured]] = {}
    names: dict[str, list[str]] = {}
    for m in baselines:
        fams.setdefault(family_of(m.label), []).append(m)
        names.setdefault(family_of(m.label), []).append(m.label)
    for name in failed:
        fams.setdefault(family_of(name), [])
        names.setdefault(family_of(name), []).append(name)
    out = []
    for fam in sorted(fams, key=_family_order):
        runs = fams[fam]
        tuned = min(runs, key=lambda m: (m.median, m.label), default=None)
        untuned = next((m for m in runs if m.label in (untuned_of.get(fam), fam)), None)
        if tuned is not None and untuned is not None:
            assert tuned.median <= untuned.median, f"{fam}: tuned slower than untuned"
        out.append(FamilyResult(fam, is_lossy_baseline(fam), tuned, untuned, len(runs), tuple(names[fam])))
    return tuple(out)


def space_reports(
    candidates: Sequence[Measured], families: Sequence[FamilyResult], verified: dict[str, str] | None = None
) -> tuple[SpaceReport, ...]:
    """Per space present among candidates or families: winner vs that space's tuned baselines.

    ``verified`` maps a lossy winner's label to its time-to-accuracy verdict; without one the
    lossy report says ``NOT_VERIFIED``.
    """
    out = []
    spaces: tuple[tuple[SpaceKind, bool], ...] = (("lossless", False), ("lossy", True))
    for space, lossy in spaces:
        fams = [f for f in families if f.lossy == lossy]
        runs = [c for c in candidates if c.space == space]
        if not fams and not runs:
            continue
        winner = min(runs, key=lambda m: (m.median, m.label), default=None)
        ratios = []
        for f in fams:
            if winner is None or f.tuned is None:
                continue
            lo, hi = bootstrap_ratio(f.tuned.times, winner.times)
            ratios.append(Ratio(f.family, f.tuned.label, f.tuned.median / winner.median, lo, hi))
        if not lossy:
            accuracy = "lossless"
        elif winner is None:
            accuracy = NOT_VERIFIED
        else:
            accuracy = (verified or {}).get(winner.label, NOT_VERIFIED)
        out.append(SpaceReport(space, winner, tuple(ratios), accuracy))
    return tuple(out)


def format_ratio(r: Ratio) -> str:
    """``'1.42x [1.31, 1.55] vs horovod (horovod@16MiB)'``; a winner slower than the baseline says so."""
    text = f"{r.ratio:.2f}x [{r.low:.2f}, {r.high:.2f}] vs tuned {r.family} ({r.baseline})"
    return text if r.ratio >= 1 else text + f": not faster, {r.baseline} stays the choice (1.00x)"


def _family_order(name: str) -> tuple[int, str]:
    order = (*LOSSLESS_FAMILIES, *LOSSY_FAMILIES)
    return (order.index(name) if name in order else len(order), name)
