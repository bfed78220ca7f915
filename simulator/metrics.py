"""Ranking metrics every simulator is judged by: pairwise accuracy, Kendall tau, top-k regret.

Simulators are rankers (docs/architecture.md, "Simulators are judged as rankers"): what matters is whether they order strategies the way the
measured runtimes do. All functions take ``predicted`` (any score where lower means faster) and
``measured`` (seconds per iteration) of the same N strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


def _pair(predicted: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(predicted, dtype=np.float64).reshape(-1)
    m = np.asarray(measured, dtype=np.float64).reshape(-1)
    if p.shape != m.shape:
        raise ValueError(f"predicted has shape {p.shape} but measured has {m.shape}")
    if not (np.isfinite(p).all() and np.isfinite(m).all()):
        raise ValueError("predicted and measured must be finite")
    return p, m


def pairwise_accuracy(predicted: np.ndarray, measured: np.ndarray, min_gap: float = 0.0) -> float:
    """Fraction of strategy pairs the prediction orders like the measurement (AutoSync §5.1).

    Pairs with equal measured times carry no order and are skipped; a pair the prediction ties
    counts as half right (a coin flip). NaN when no pair has distinct measured times. With
    ``min_gap`` > 0 only pairs whose measured times differ by more than that fraction of the
    smaller one count: on a domain whose strategies differ by less than the measurement's noise,
    the all-pairs figure measures the noise (``resolved_pairs`` says how many pairs are left).
    """
    p, m = _pair(predicted, measured)
    i, j = np.triu_indices(len(p), k=1)
    dm = np.sign(m[i] - m[j])
    keep = (dm != 0) & (np.abs(m[i] - m[j]) > min_gap * np.minimum(m[i], m[j]))
    if not keep.any():
        return float("nan")
    dp = np.sign(p[i] - p[j])[keep]
    dm = dm[keep]
    return float(np.mean(np.where(dp == 0, 0.5, (dp == dm).astype(np.float64))))


def resolved_pairs(measured: np.ndarray, min_gap: float) -> float:
    """Share of pairs whose measured times differ by more than ``min_gap`` of the smaller one."""
    m = np.asarray(measured, dtype=np.float64)
    i, j = np.triu_indices(len(m), k=1)
    if len(i) == 0:
        return float("nan")
    return float(np.mean(np.abs(m[i] - m[j]) > min_gap * np.minimum(m[i], m[j])))


def kendall_tau(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Kendall's tau-b between prediction and measurement (scipy); NaN for fewer than 2 points."""
    p, m = _pair(predicted, measured)
    if len(p) < 2:
        return float("nan")
    tau = stats.kendalltau(p, m).statistic
    return float(tau)


def top_k_regret(predicted: np.ndarray, measured: np.ndarray, k: int = 5) -> float:
    """How much slower the best of the predicted top k is than the true best, relative.

    regret = (min measured among the k lowest predictions - min measured) / min measured;
    0 when the true best is among the predicted top k.
    """
    p, m = _pair(predicted, measured)
    if len(p) == 0:
        return float("nan")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    top = np.argsort(p, kind="stable")[:k]
    best = m.min()
    return float((m[top].min() - best) / best)


@dataclass(frozen=True)
class RankingMetrics:
    """The three numbers `strategist simulator eval` reports for one simulator on one split."""

    pairwise_accuracy: float
    kendall_tau: float
    top5_regret: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def ranking_metrics(predicted: np.ndarray, measured: np.ndarray) -> RankingMetrics:
    """Pairwise accuracy, Kendall tau and top-5 regret of one prediction."""
    return RankingMetrics(
        pairwise_accuracy=pairwise_accuracy(predicted, measured),
        kendall_tau=kendall_tau(predicted, measured),
        top5_regret=top_k_regret(predicted, measured, k=5),
    )


def median_ci95(times: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of ``times`` (resampled with replacement)."""
    x = np.asarray(times, dtype=np.float64)
    if x.size == 0:
        raise ValueError("median_ci95: no times")
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(n, x.size))], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(lo), float(hi)
