"""How well can any ranker agree with one noisy measurement? The noise ceiling of pairwise accuracy.

A simulator's pairwise accuracy is judged against one collection of measured times. If a pair's
measured order is wrong (differs from the true order) with probability p_ij, even a perfect
ranker — one that knows the true times — agrees with the measurement on 1 - p_ij of the pair.
The retest collection (the same strategies measured again, e.g. ``datasets/retest-v2``) shows
how large the p's are: two independent measurements agree on a pair with probability
1 - 2 p (1 - p). From the retest agreement r (mean over pairs) alone:

- ``lower`` = r. Since p <= ½, p² <= p/2, so r = 1 - 2E[p] + 2E[p²] <= 1 - E[p] = ceiling.
- ``upper`` = (1 + sqrt(2r - 1)) / 2: exact when every pair has the same p (E[p²] = E[p]²),
  and an upper bound otherwise (Jensen).

Point estimate (``estimate``), from the repeated measurements directly rather than a formula in
r: the noise on one collection's log-time difference of a pair, e_i - e_j, has the law of the
retest's log ratios d_k = log a_k - log b_k (both are differences of two independent draws of
the per-measurement noise), so no normal law is assumed and heavy tails are kept. True log
times are approximated by the domain's measured ones shrunk towards their mean so that their
variance loses the noise variance σ² = var(d) / 2 (x̂ = m + sqrt(1 - σ²/var x) (x - m)). Then

    ceiling = mean over pairs (i, j) of  P(sign(Δ̂_ij + D) = sign(Δ̂_ij)),  D ~ the d_k,

(ties counted half) and the same model's predicted retest agreement, mean over pairs of
P(sign(Δ̂ + D1) = sign(Δ̂ + D2)) with D1, D2 independent draws, is printed next to the observed r
as a check of the model. Assumptions: the noise is the same for every strategy of the domain
and independent between trials; the retest drew its strategies like the collection (the first
30 sampled ones).

Drift between the two runs. A retest run can be uniformly faster or slower than its collection
(runtime/testbed/README.md, "Measurement protocol": the quiet NCF-sparse__A2 retest ran 15 %
faster on 28 of 30 strategies). A factor common to every strategy of one run cancels in every
pair's comparison inside that run, so it is not pair noise: the log ratios are centred on their
median (``centred_log_ratios``) before they serve as noise. Uncentred, the drift counted as noise
and widened the gap (NCF-sparse__A2: 33.9 %) and the noise the ceiling is computed with.

Labels merged from several runs (``runtimes.merge_runs``, ``estimate(..., runs=m)``): a label that
averages m independent measurements has, on a pair's log difference, the mean of m draws of the
retest's noise, and its noise variance is σ²/m; the ceiling is computed against that. With a
repeat run of the whole domain the retest is the repeat itself (every strategy matched). A
partial repeat leaves labels of different run counts (``runs`` per strategy): a pair of labels
averaging m_i and m_j runs has noise variance σ² (1/m_i + 1/m_j). Decision: pairs with m_i = m_j
keep the law of the mean of m draws (as above); a mixed pair takes the retest's draws scaled to
its variance, by sqrt((1/m_i + 1/m_j) / 2) — the retest gives pair differences, not single
measurements, so the exact law of a mixed pair is not available; and the true log times are
shrunk by the mean label noise variance.

Resolved pairs (``noise_gap``): pairs whose measured log times differ by more than the 90th
percentile of |d_k| — a pair that far apart keeps its measured order in a retest with
probability about 0.95 or more (a flip needs the pair's noise beyond the gap, in one direction) —
are the ones a ranker can be judged on without judging the noise; ``resolved_estimate`` is the
same model's ceiling on those pairs (selected by their measured difference, as the benchmark's
resolved-pair accuracy is).

Shapes: times (N,) seconds; retest pairs a, b (K,) seconds of the same K strategies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.metrics import pairwise_accuracy

if TYPE_CHECKING:
    from simulator.learned.data import Domain

#: Quantile of the retest |log ratio| used as the noise gap of resolved pairs.
GAP_QUANTILE = 0.90


@dataclass(frozen=True)
class NoiseCeiling:
    """Retest agreement and the ceiling a perfect ranker could reach (module docstring).

    gap: relative difference (of the smaller time) beyond which a pair counts as resolved.
    """

    matched: int
    retest_agreement: float
    lower: float
    upper: float
    estimate: float
    predicted_retest: float
    scale: float
    gap: float
    resolved_estimate: float  # the ceiling on the pairs more than ``gap`` apart (measured)


def bounds(r: float) -> tuple[float, float]:
    """(lower, upper) bound of the perfect ranker's agreement from retest agreement r."""
    if not math.isfinite(r):
        return float("nan"), float("nan")
    return r, (1.0 + math.sqrt(max(0.0, 2.0 * r - 1.0))) / 2.0


def centred_log_ratios(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(a / b) less its median: the retest's per-strategy noise without the runs' common drift."""
    d = np.log(np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64))
    return d - np.median(d)


def noise_gap(a: np.ndarray, b: np.ndarray, quantile: float = GAP_QUANTILE) -> float:
    """Relative gap (``pairwise_accuracy``'s ``min_gap``) from the quantile of the retest's
    |centred log ratio|."""
    return float(np.expm1(np.quantile(np.abs(centred_log_ratios(a, b)), quantile)))


def _agree(delta: np.ndarray, noise: np.ndarray, chunk: int = 4096) -> float:
    """Mean over pairs and noise draws of P(sign(delta + D) = sign(delta)), ties half."""
    total = 0.0
    for lo in range(0, len(delta), chunk):
        x = delta[lo : lo + chunk, None] + noise[None, :]
        s = np.sign(x) * np.sign(delta[lo : lo + chunk, None])
        total += float(np.where(s == 0, 0.5, (s > 0).astype(np.float64)).sum())
    return total / (len(delta) * len(noise))


def _retest_agree(delta: np.ndarray, noise: np.ndarray, chunk: int = 4096) -> float:
    """Mean over pairs of P(sign(delta + D1) = sign(delta + D2)), D1, D2 independent draws."""
    total = 0.0
    for lo in range(0, len(delta), chunk):
        s = np.sign(delta[lo : lo + chunk, None] + noise[None, :])
        pos, neg = (s > 0).mean(axis=1), (s < 0).mean(axis=1)
        zero = 1.0 - pos - neg
        total += float((pos * pos + neg * neg + 0.5 * (1.0 - (1.0 - zero) ** 2)).sum())  # a tie counts half
    return total / len(delta)


def shrunk_log_times(times: np.ndarray, noise_var: float) -> np.ndarray:
    """Measured log times shrunk towards their mean by the noise variance (module docstring)."""
    x = np.log(np.asarray(times, dtype=np.float64))
    v = float(x.var())
    k = math.sqrt(max(0.0, 1.0 - noise_var / v)) if v > 0 else 0.0
    return x.mean() + k * (x - x.mean())


def averaged_noise(noise: np.ndarray, runs: int, draws: int = 4096, seed: int = 0) -> np.ndarray:
    """Draws of the mean of ``runs`` independent draws of ``noise``: the pair noise of a label
    averaged over that many runs (``runtimes.merge_runs``). ``runs`` = 1 returns ``noise``."""
    if runs < 1:
        raise ValueError(f"runs: must be >= 1, got {runs}")
    if runs == 1:
        return noise
    pick = np.random.default_rng(seed).integers(0, len(noise), (draws, runs))
    return noise[pick].mean(axis=1)


def _noise(a: np.ndarray, b: np.ndarray, scale: float) -> tuple[np.ndarray, float]:
    """(draws of one label's pair noise, the per-measurement noise variance σ²) from the retest's
    log ratios scaled by ``scale``."""
    d = scale * centred_log_ratios(a, b)
    return np.concatenate([d, -d]), float(d.var()) / 2.0  # symmetric: either run may be "first"


def _ceiling(
    times: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    scale: float,
    gap: float,
    m: np.ndarray,
) -> float:
    """A perfect ranker's agreement with labels ``times`` whose strategies average ``m``
    measurements each, over the pairs whose measured times differ by more than ``gap``
    (relative); pairs are grouped by their two run counts (module docstring)."""
    noise, sigma2 = _noise(a, b, scale)
    i, j = np.triu_indices(len(times), k=1)
    measured = np.log(np.asarray(times, dtype=np.float64))
    keep = np.abs(measured[i] - measured[j]) > math.log1p(gap)
    if not keep.any():
        return float("nan")
    x = shrunk_log_times(times, sigma2 * float(np.mean(1.0 / m)))
    i, j = i[keep], j[keep]
    lo, hi = np.minimum(m[i], m[j]), np.maximum(m[i], m[j])
    total = 0.0
    for p, q in sorted(set(zip(lo.tolist(), hi.tolist(), strict=True))):
        group = (lo == p) & (hi == q)
        draws = averaged_noise(noise, p) if p == q else noise * math.sqrt((1 / p + 1 / q) / 2)
        total += _agree(x[i[group]] - x[j[group]], draws) * int(group.sum())
    return total / len(i)


def _predicted_retest(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    """The noise model's agreement of two single measurements of the retested strategies."""
    noise, sigma2 = _noise(a, b, scale)
    xa = shrunk_log_times((a * b) ** 0.5, sigma2 / 2.0)  # the retested strategies, mean of two
    ia, ja = np.triu_indices(len(a), k=1)
    return _retest_agree(xa[ia] - xa[ja], noise)


def estimate(times: np.ndarray, a: np.ndarray, b: np.ndarray, runs: int | np.ndarray = 1) -> NoiseCeiling:
    """The noise ceiling of pairwise accuracy on a domain measured as ``times``, from a retest
    (``a``: the collection's times of the retested strategies, ``b``: the retest's). ``runs``:
    how many runs each of ``times`` averages, one count for all or one per strategy
    (``runtimes.merge_runs``' ``runs``; a repeat run is then the retest): the pair noise of such
    labels is the mean of that many draws of the retest's (module docstring), and the ceiling and
    its resolved-pair figure are computed with it; the retest agreement, the bounds (single
    measurements) and the gap (the retest's quantile) are not.

    Calibration: the noise model (module docstring) predicts a retest agreement; when it differs
    from the observed r (on 30 strategies the retest's |log ratios| and the shrinkage are rough),
    the log ratios are scaled by the factor s that makes the prediction equal r (bisection on
    s in [0.25, 8]), and the ceiling is computed with that noise. ``scale`` = s (1: the raw
    retest noise explains the retest agreement); ``predicted_retest`` = the prediction at s = 1.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    counts = np.broadcast_to(np.asarray(runs, dtype=np.int64), (len(times),))
    if counts.size and counts.min() < 1:
        raise ValueError(f"runs: must be >= 1, got {int(counts.min())}")
    if len(a) != len(b) or len(a) < 3:
        raise ValueError(f"retest: need >= 3 strategies measured twice, got {len(a)} / {len(b)}")
    r = pairwise_accuracy(b, a)
    lower, upper = bounds(r)
    raw_retest = _predicted_retest(a, b, 1.0)
    lo, hi = 0.25, 8.0
    for _ in range(30):  # predicted retest agreement falls as the noise grows
        mid = math.sqrt(lo * hi)
        if _predicted_retest(a, b, mid) > r:
            lo = mid
        else:
            hi = mid
    scale = math.sqrt(lo * hi)
    gap = noise_gap(a, b)
    return NoiseCeiling(
        matched=len(a),
        retest_agreement=r,
        lower=lower,
        upper=upper,
        estimate=_ceiling(times, a, b, scale, 0.0, counts),
        predicted_retest=raw_retest,
        scale=scale,
        gap=gap,
        resolved_estimate=_ceiling(times, a, b, scale, gap, counts),
    )


def matched_times(collection: Domain, retest: Domain) -> tuple[np.ndarray, np.ndarray]:
    """(collection's, retest's) seconds of the strategies measured in both, matched by key, in the
    retest's order (both as ``runtimes.load_domain`` reads them, repeated trials merged)."""
    first = dict(zip(collection.keys, collection.times, strict=True))
    pairs = [(first[k], t) for k, t in zip(retest.keys, retest.times, strict=True) if k in first]
    a, b = zip(*pairs, strict=True) if pairs else ((), ())
    return np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)


def from_retest(
    collection: Domain, retest: Domain, times: np.ndarray | None = None, runs: int | np.ndarray = 1
) -> NoiseCeiling | None:
    """``estimate`` for a domain's collection and its retest (``matched_times``); None when fewer
    than 3 strategies were measured in both. ``times`` / ``runs``: the labels judged against, when
    not the collection's own (e.g. the collection merged with the retest as a repeat run: times
    of the merged domain and ``merge_runs``' run counts)."""
    a, b = matched_times(collection, retest)
    labels = collection.times if times is None else times
    return estimate(labels, a, b, runs) if len(a) >= 3 else None
