"""An exact polynomial scheduler: dynamic programming over layers inside a search over throughput levels.

HeterPS has no exact method besides brute force (T^L schedules). The objective does *not*
decompose over stages as it stands: money = M · Σ_i p_i k_i / min_i Throughput_i(k_i) is a ratio
whose denominator is a minimum over all stages, and the counts N_t couple every stage of one
type. What does decompose is the money *rate* at a fixed throughput level θ: with every stage
given its least integer units k_i(θ) for θ (``provisioning.units_needed``), the rate
c(θ) = Σ_i p_{t_i} k_i(θ) is a sum of stage terms, and a stage's term depends only on its layers,
its type and the types of the stages before and after it (its boundary transfers, which the cost
model charges on both sides of a cut). So

    DP(θ) = min over schedules of c(θ)

is a shortest path whose state is (layer j, type t of the stage starting at j, type p of the stage
before it): f(j, t, p) = min over the stage's end e and the next type n != t of
rate(j, e, t, n, p) + f(e, n, t). The previous type is part of the state because a stage's units
(hence its rate) depend on what it receives; the next type is chosen by the transition and handed
on as the next state's "previous". O(L^2 T^3) per θ. The search
over θ is exact: the best plan is optimal at its own realised throughput θ*, where
DP(θ*) <= its rate, so min_θ DP(θ)/θ is the optimum; DP is non-decreasing in θ, so once a
ratio r* is known no θ < DP(θ_prev)/r* can beat it, and the search jumps there (as the
per-schedule provisioning does), stopping when the real-valued lower bound (another DP, without
rounding or memory floors) divided by θ reaches r*, or no schedule reaches θ.

What stays inexact: a type's count N_t caps each stage in the DP, not the sum over several
stages of one type (e.g. CPU-GPU-CPU). When the DP's plan uses more units of a type than exist
in total, the result is marked ``exact=False`` and the plan is re-provisioned by the per-schedule
method (which respects the sums); a note says so.

Shapes:
    segment arrays (L+1, L+1, T, T+1, T+1); DP table (L+1, T+1, T+1) = (layer, type, previous type)
"""

from __future__ import annotations

import math

import numpy as np

from search.heterogeneous.base import Assignment, Objective, Scheduler
from search.heterogeneous.provisioning import EPS
from simulator.analytical.heterogeneous import SegmentArrays


class ExactScheduler(Scheduler):
    """Dynamic programming over (layer, stage type, previous stage type) at each throughput level; see the module doc."""

    name = "exact"

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        cm = objective.cm
        seg = _Prepared(cm.segment_arrays())
        n, nt = cm.num_layers, cm.num_types
        price = cm.price_per_s[None, :, None, None, None]
        count = cm.count[None, :, None, None, None]
        theta = cm.workload.throughput_limit
        best_ratio = math.inf
        best: Assignment | None = None
        coupled = False
        iterations = 0
        for iterations in range(1, 100_001):  # noqa: B007 (reported below)
            real = seg.real_units(theta)
            k = seg.units(real, theta)
            rate = np.where(k <= count, price * k, np.inf)
            value, plan = _shortest(rate, n, nt, k)
            if plan is None:
                break
            stages, units = plan
            assignment = tuple(
                t for (a, b, t, _, _), _k in zip(stages, units, strict=True) for _ in range(a, b)
            )
            used = np.zeros(nt, dtype=np.int64)
            for (_a, _b, t, _, _), kk in zip(stages, units, strict=True):
                used[t] += kk
            realised = min(seg.throughput(st, kk) for st, kk in zip(stages, units, strict=True))
            if np.all(used <= cm.count):
                ratio = value / realised
                if ratio < best_ratio * (1 - 1e-12):
                    best_ratio, best = ratio, assignment
            else:
                coupled = True
                money = objective.money(assignment)
                if money / cm.workload.samples < best_ratio * (1 - 1e-12):
                    best_ratio, best = money / cm.workload.samples, assignment
            lower, _ = _shortest(price * real, n, nt, None)
            if lower / theta >= best_ratio:
                break
            nxt = value / best_ratio if math.isfinite(best_ratio) else realised
            theta = max(nxt, realised) * (1 + EPS)
        notes = [f"{iterations} throughput levels"]
        extra: dict[str, object] = {"exact": not coupled}
        if coupled:
            notes.append(
                "a DP plan used more units of a type over several stages than exist; not proven optimal"
            )
        if best is None:
            extra["reason"] = (
                f"no schedule reaches {cm.workload.throughput_limit:g} samples/s within the counts"
            )
        extra["notes"] = tuple(notes)
        return best, extra


class _Prepared:
    """The segment arrays laid out as (first layer, type, end layer, next type, previous type), with Amdahl's parts."""

    def __init__(self, seg: SegmentArrays) -> None:
        order = (0, 2, 1, 3, 4)
        self.b_o = seg.b_o
        self.par = [
            np.ascontiguousarray((f * w).transpose(order))
            for w, f in ((seg.oct, seg.alpha), (seg.odt, seg.beta))
        ]
        self.ser = [
            np.ascontiguousarray(((1 - f) * w).transpose(order))
            for w, f in ((seg.oct, seg.alpha), (seg.odt, seg.beta))
        ]
        self.fits = np.ascontiguousarray(seg.fits.transpose(order))
        self.min_units = np.ascontiguousarray(seg.min_units.transpose(order)).astype(float)

    def real_units(self, theta: float) -> np.ndarray:
        """Formula 14 (corrected), real-valued, for every stage at once; inf where unreachable."""
        out = np.zeros(self.fits.shape)
        budget = self.b_o / theta
        with np.errstate(divide="ignore", invalid="ignore"):
            for par, ser in zip(self.par, self.ser, strict=True):
                denom = budget - ser
                k = np.where(denom > 0, par / denom, np.inf)
                np.maximum(out, k, out=out)
        out[~self.fits] = np.inf
        return out

    def units(self, real: np.ndarray, theta: float) -> np.ndarray:
        """Least integer units per stage for θ (with the memory floor); inf where unreachable."""
        finite = np.isfinite(real)
        k = np.maximum(np.ceil(np.where(finite, real, 0) * (1 - 1e-12)), self.min_units)
        short = finite & (self._thr(k) < theta)  # agree with Formula 5 in the last bit
        if short.any():
            k = np.where(short, k + 1, k)
            finite &= self._thr(k) >= theta
        return np.where(finite, k, np.inf)

    def _thr(self, k: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.maximum(self.ser[0] + self.par[0] / k, self.ser[1] + self.par[1] / k) / self.b_o
            return np.where(t > 0, 1.0 / t, np.inf)

    def throughput(self, stage: tuple[int, int, int, int, int], k: int) -> float:
        a, b, t, u, p = stage
        s = (a, t, b, u, p)
        m = max(self.ser[0][s] + self.par[0][s] / k, self.ser[1][s] + self.par[1][s] / k) / self.b_o
        return math.inf if m <= 0 else 1.0 / float(m)


def _shortest(
    rate: np.ndarray, n: int, nt: int, units: np.ndarray | None
) -> tuple[float, tuple[list[tuple[int, int, int, int, int]], list[int]] | None]:
    """min over schedules of Σ rate[stage]; stages are maximal (next type differs).

    ``rate`` has shape (L+1, T, L+1, T+1, T+1) = (first layer, type, end layer, next type,
    previous type; T = none). With ``units`` (the k of every stage, same shape), also the best
    plan's stages (first, end, type, next type, previous type) and their units.
    """
    # f[e, u, p]: least rate to cover layers e..n-1 with a stage of type u starting at e after a
    # stage of type p (p = nt: none); u = nt: done (only at e = n).
    f = np.full((n + 1, nt + 1, nt + 1), np.inf)
    f[n, nt, :] = 0.0
    choice = np.zeros((n + 1, nt, nt + 1), dtype=np.int64)
    # A next stage of the same type would not be maximal: its rate is made infinite.
    same = np.where(np.eye(nt, nt + 1, dtype=bool), np.inf, 0.0)[:, None, :, None]  # (T, 1, T+1, 1)
    for j in range(n - 1, -1, -1):
        # after[t, e, u] = f[e, u, t]: the rest, given that this stage (type t) precedes it.
        after = f[j + 1 :, :, :nt].transpose(2, 0, 1)[..., None]  # (T, E, T+1, 1)
        total = rate[j, :, j + 1 :, :, :] + after + same  # (T, E, T+1, P=T+1)
        flat = total.reshape(nt, -1, nt + 1)
        idx = flat.argmin(axis=1)  # (T, P)
        f[j, :nt, :] = np.take_along_axis(flat, idx[:, None, :], axis=1)[:, 0, :]
        choice[j] = idx
    start = int(np.argmin(f[0, :nt, nt]))
    value = float(f[0, start, nt])
    if not math.isfinite(value) or units is None:
        return value, None
    stages: list[tuple[int, int, int, int, int]] = []
    ks: list[int] = []
    j, t, p = 0, start, nt
    while j < n:
        c = int(choice[j, t, p])
        e, u = j + 1 + c // (nt + 1), c % (nt + 1)
        stages.append((j, e, t, u, p))
        ks.append(int(units[j, t, e, u, p]))
        j, t, p = e, u, t
    return value, (stages, ks)
