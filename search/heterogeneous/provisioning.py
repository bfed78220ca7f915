"""Provisioning a schedule (HeterPS Section 5.1, Formulas 13-14 and the Newton step): units per stage.

Given a scheduling plan (its stages S_1..S_K), choose k_i units for every stage so that
Throughput >= Throughput_limit (Formula 11), the units of each type stay within N_{t,limit}, and
the money (Formula 8) is least.

**Formula 14, corrected.** Solving Throughput_i(k) >= θ for k with Formulas 2, 4 and 5 gives::

    k_i >= α_i OCT_i / (B_o / θ - (1 - α_i) OCT_i)   and   k_i >= β_i ODT_i / (B_o / θ - (1 - β_i) ODT_i)

The paper prints the denominator as ``Throughput_limit * B_o`` (units do not match: the per-sample
budget is B_o / θ) and joins the two bounds with ``min``; since ET_i = max{CT_i, DT_i} (Formula
4) both must hold, so we take the max. A denominator <= 0 means the serial part alone is slower
than θ: no number of units reaches it. The sparse tables' memory adds ``k_i >= min_units``.

**Formula 13** (stage i balanced to stage 1's throughput with k_1 units) is the same bound with
θ = Throughput_1(k_1); ``balanced_units`` states it as printed, for the compute-bound case.

**The Newton step.** With real-valued k the money ``M · Σ p_i k_i(θ) / θ`` grows with θ (each
term α OCT / (B_o - (1 - α) OCT θ) increases), which is the paper's observation that the cost
grows with k_1; the largest useful θ (the paper's "maximum value of k_1") is where a type's units
run out: the root of Σ_{i on t} k_i(θ) = N_t. ``max_throughput`` finds it per type with a
bracketed Newton iteration (k_i(θ) is increasing and convex, so Newton from the right converges
monotonically; bisection guards the steps) and takes the smallest over types.

**Integer units (ours, exact for the schedule).** Units are integers, and rounding up can leave a
stage faster than needed; giving a cheap bottleneck stage one more unit can then shorten the
whole job enough to cost less. ``provision`` therefore searches the throughput level θ >= limit:
at θ every stage gets its least integer units k_i(θ); the realised throughput θ_P = min_i
Throughput_i(k_i) >= θ and the money is M · c(θ) / θ_P with c(θ) = Σ p_i k_i(θ), non-decreasing
in θ. Any provisioning with throughput θ' costs at least M · c(θ') / θ', so after the best ratio
r* so far no θ' < c(θ)/r* can win; the search jumps there (and past θ_P), and stops when a stage
cannot reach θ, a type runs out, or the real-valued lower bound Σ p_i k_i(θ)/θ (without the memory
floor) is already >= r*. The result is the least money over all integer provisionings of the
schedule that meet the limit within the counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytical.heterogeneous import HeterogeneousCostModel, StageProfile

EPS = 1e-9  # relative step past a realised throughput (θ must strictly increase)


def _bound(work: float, frac: float, theta: float, b_o: int) -> float:
    """Real-valued units for one Amdahl term to reach θ; inf if its serial part is too slow."""
    if work <= 0 or frac <= 0:
        return 0.0 if (1 - frac) * work <= b_o / theta else math.inf
    denom = b_o / theta - (1 - frac) * work
    return frac * work / denom if denom > 0 else math.inf


def real_units(stage: StageProfile, theta: float) -> float:
    """Formula 14 (corrected): the real-valued units stage S_i needs for throughput θ (no memory floor)."""
    return max(
        _bound(stage.oct, stage.alpha, theta, stage.b_o), _bound(stage.odt, stage.beta, theta, stage.b_o)
    )


def units_needed(stage: StageProfile, theta: float) -> int | None:
    """The least integer k_i with Throughput_i(k_i) >= θ and the tables' memory; None if unreachable."""
    k_real = real_units(stage, theta)
    if math.isinf(k_real) or not stage.fits:
        return None
    k = max(stage.min_units, 1, math.ceil(k_real * (1 - 1e-12)))
    for _ in range(8):  # the closed form and Formula 5 may disagree in the last bit
        if stage.throughput(k) >= theta:
            return k
        k += 1
    return None


def balanced_units(stage: StageProfile, first: StageProfile, k_1: float) -> float:
    """Formula 13 as printed: k_i giving S_i the computation throughput of S_1 with k_1 units."""
    denom = first.oct / stage.oct * (1 - first.alpha + first.alpha / k_1) - (1 - stage.alpha)
    return stage.alpha / denom if denom > 0 else math.inf


def max_throughput(stages: Sequence[StageProfile], counts: Sequence[int]) -> float:
    """The largest θ whose real-valued units fit every type's count (the Newton step); 0 if none."""
    by_type: dict[int, list[StageProfile]] = {}
    for s in stages:
        by_type.setdefault(s.rtype, []).append(s)
    best = math.inf
    for t, group in by_type.items():
        best = min(best, _newton_root(group, counts[t]))
    return best


def _newton_root(group: Sequence[StageProfile], count: int) -> float:
    """Root of g(θ) = Σ k_i(θ) - N_t, bracketed between 0 and the smallest serial-part asymptote."""

    def g(theta: float) -> float:
        return sum(real_units(s, theta) for s in group) - count

    hi = min(_asymptote(s) for s in group)
    if math.isinf(hi):  # no serial part anywhere: units grow linearly; find a bracket by doubling
        hi = 1.0
        while g(hi) < 0:
            hi *= 2.0
    lo = 0.0
    theta = hi * (1 - 1e-6)
    for _ in range(100):
        val = g(theta)
        if val > 0:
            hi = theta
        else:
            lo = theta
        if hi - lo <= 1e-10 * hi:
            break
        h = theta * 1e-7
        slope = (g(theta + h) - g(theta - h)) / (2 * h) if theta > h else math.inf
        step = theta - val / slope if math.isfinite(val) and slope > 0 and math.isfinite(slope) else math.nan
        theta = step if lo < step < hi else (lo + hi) / 2
    return lo


def _asymptote(s: StageProfile) -> float:
    """The θ at which S_i's serial part alone takes the whole per-sample budget."""
    out = math.inf
    for work, frac in ((s.oct, s.alpha), (s.odt, s.beta)):
        serial = (1 - frac) * work
        if serial > 0:
            out = min(out, s.b_o / serial)
    return out


@dataclass(frozen=True)
class Provisioning:
    """The least-money provisioning of a schedule, or why there is none.

    ``units`` is k_i per stage; ``throughput`` the realised Throughput (Formula 6); ``money`` the
    Cost (Formula 8). When infeasible, ``units`` is empty, money and throughput are inf / 0, and
    ``reason`` names the stage (``stage``) and why.
    """

    units: tuple[int, ...]
    throughput: float
    money: float
    reason: str = ""
    stage: int | None = None

    @property
    def feasible(self) -> bool:
        return bool(self.units)


def provision(cm: HeterogeneousCostModel, stages: Sequence[StageProfile]) -> Provisioning:
    """Least-money integer units per stage meeting the throughput limit within the counts (exact)."""
    limit = cm.workload.throughput_limit
    price = cm.price_per_s
    counts = cm.count
    samples = cm.workload.samples
    theta = limit
    best: tuple[float, tuple[int, ...], float] | None = None  # (ratio, units, throughput)
    while True:
        units: list[int] = []
        for i, s in enumerate(stages):
            k = units_needed(s, theta)
            if k is None:
                if best is None:
                    return _infeasible(cm, i, s, theta)
                return _done(best, samples)
            units.append(k)
        used: dict[int, int] = {}
        for s, k in zip(stages, units, strict=True):
            used[s.rtype] = used.get(s.rtype, 0) + k
        over = [t for t, n in used.items() if n > counts[t]]
        if over:
            if best is None:
                t = over[0]
                i = next(j for j, s in enumerate(stages) if s.rtype == t)
                need = used[t]
                return Provisioning(
                    (),
                    0.0,
                    math.inf,
                    f"stage {i} ({_describe(cm, stages[i])}) needs {need} units of {cm.types[t].name!r} "
                    f"(with the other stages of that type) for {limit:g} samples/s; {counts[t]} available",
                    i,
                )
            return _done(best, samples)
        cost = float(sum(price[s.rtype] * k for s, k in zip(stages, units, strict=True)))
        realised = min(s.throughput(k) for s, k in zip(stages, units, strict=True))
        ratio = cost / realised
        if best is None or ratio < best[0] * (1 - 1e-12):
            best = (ratio, tuple(units), realised)
        lower = sum(price[s.rtype] * real_units(s, theta) for s in stages) / theta
        if lower >= best[0] or math.isinf(realised):
            return _done(best, samples)
        theta = max(cost / best[0], realised) * (1 + EPS)


def _done(best: tuple[float, tuple[int, ...], float], samples: float) -> Provisioning:
    ratio, units, thr = best
    return Provisioning(units, thr, ratio * samples)


def _describe(cm: HeterogeneousCostModel, s: StageProfile) -> str:
    return f"layers {s.first}-{s.last - 1} on {cm.types[s.rtype].name!r}"


def _infeasible(cm: HeterogeneousCostModel, i: int, s: StageProfile, theta: float) -> Provisioning:
    if not s.fits:
        why = f"its dense weights do not fit the {cm.types[s.rtype].memory_gb:g} GB of one unit"
    else:
        best = max(s.throughput(1e12), 0.0)
        why = f"no number of units reaches {theta:g} samples/s (its serial part caps it at {best:.4g})"
    return Provisioning((), 0.0, math.inf, f"stage {i} ({_describe(cm, s)}): {why}", i)


def provision_many(
    cm: HeterogeneousCostModel, schedules: Sequence[Sequence[StageProfile]]
) -> list[Provisioning]:
    """``provision`` of many schedules at once, the same numbers to the last bit.

    The level search of ``provision`` runs in lock step for all schedules, one numpy pass per
    level over an array (schedule, stage) padded with empty stages; every value is computed with
    the same operations in the same order as the scalar code (sums left to right over the stages),
    so units, money and throughput are identical. A schedule that turns out infeasible is handed
    to ``provision`` for its reason (it stops at its first level, so this is cheap).
    """
    n = len(schedules)
    if n == 0:
        return []
    lengths = np.array([len(s) for s in schedules])
    width = int(lengths.max())
    shape = (n, width)
    b_o = float(cm.workload.b_o)
    if any(s.b_o != cm.workload.b_o for stages in schedules for s in stages):
        raise ValueError(f"schedules: a stage's b_o differs from the workload's {b_o:g}")
    flat = np.array(
        [
            (s.oct, s.alpha, s.odt, s.beta, s.min_units, s.fits, s.rtype)
            for stages in schedules
            for s in stages
        ],
        dtype=float,
    ).reshape(-1, 7)
    valid = np.arange(width)[None, :] < lengths[:, None]  # row-major order: the stages' order above
    cols = [np.zeros(shape) for _ in range(4)] + [np.ones(shape), np.ones(shape), np.zeros(shape)]
    for c, col in enumerate(cols):
        col[valid] = flat[:, c]
    oct_, alpha, odt, beta, min_units = cols[:5]
    fits = cols[5] > 0
    rtype = cols[6].astype(np.int64)
    price = cm.price_per_s[rtype] * valid  # 0 for padding
    counts = cm.count
    onehot = (rtype[:, :, None] == np.arange(len(counts))[None, None, :]) & valid[:, :, None]
    samples = cm.workload.samples
    theta = np.full(n, float(cm.workload.throughput_limit))
    best_ratio = np.full(n, np.inf)
    best_units = np.zeros(shape)
    best_thr = np.zeros(n)
    has_best = np.zeros(n, dtype=bool)
    infeasible = np.zeros(n, dtype=bool)
    active = np.arange(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while active.size:
            th = theta[active]
            o, a, d, b = oct_[active], alpha[active], odt[active], beta[active]
            ok, pa = valid[active], price[active]
            real = np.maximum(_bound_many(o, a, th[:, None], b_o), _bound_many(d, b, th[:, None], b_o))
            real[~ok] = 0.0
            reach = (np.isfinite(real) & fits[active]) | ~ok
            k = np.maximum(
                np.maximum(min_units[active], 1.0), np.ceil(np.where(reach, real, 0.0) * (1 - 1e-12))
            )
            k[~ok] = 1.0
            thr_k = _throughput_many(o, a, d, b, k, b_o)
            pending = reach & ok & ~(thr_k >= th[:, None])
            for _ in range(7):  # units_needed's last-bit agreement with Formula 5: up to 8 tries
                if not pending.any():
                    break
                k = np.where(pending, k + 1, k)
                thr_k = _throughput_many(o, a, d, b, k, b_o)
                pending &= ~(thr_k >= th[:, None])
            reached = (reach & ~pending).all(axis=1)
            used = (np.where(ok, k, 0.0)[:, :, None] * onehot[active]).sum(axis=1)  # small integers: exact
            over = (used > counts[None, :]).any(axis=1)
            stop = ~reached | over
            # a stop without a best schedule is infeasible (its reason comes from provision)
            infeasible[active[stop & ~has_best[active]]] = True
            # sums left to right, as Python's sum (accumulate is sequential; padding adds 0.0)
            cost = np.cumsum(pa * k, axis=1)[:, -1]
            lower = np.cumsum(pa * real, axis=1)[:, -1] / th
            realised = np.where(ok, thr_k, np.inf).min(axis=1)
            ratio = cost / realised
            go = ~stop
            idx = active[go]
            ratio, realised, cost, lower, k = ratio[go], realised[go], cost[go], lower[go], k[go]
            better = ~has_best[idx] | (ratio < best_ratio[idx] * (1 - 1e-12))
            upd = idx[better]
            best_ratio[upd] = ratio[better]
            best_units[upd] = k[better]
            best_thr[upd] = realised[better]
            has_best[upd] = True
            more = ~((lower >= best_ratio[idx]) | np.isinf(realised))
            active = idx[more]
            theta[active] = np.maximum(cost[more] / best_ratio[active], realised[more]) * (1 + EPS)
    out: list[Provisioning] = []
    for i, stages in enumerate(schedules):
        if infeasible[i]:
            out.append(provision(cm, stages))
        else:
            units = tuple(int(u) for u in best_units[i, : len(stages)])
            out.append(Provisioning(units, float(best_thr[i]), float(best_ratio[i]) * samples))
    return out


def _bound_many(work: np.ndarray, frac: np.ndarray, theta: np.ndarray, b_o: float) -> np.ndarray:
    """``_bound`` elementwise."""
    budget = b_o / theta
    serial = (1 - frac) * work
    trivial = (work <= 0) | (frac <= 0)
    denom = budget - serial
    general = np.where(denom > 0, frac * work / denom, np.inf)
    return np.where(trivial, np.where(serial <= budget, 0.0, np.inf), general)


def _throughput_many(
    oct_: np.ndarray, alpha: np.ndarray, odt: np.ndarray, beta: np.ndarray, k: np.ndarray, b_o: float
) -> np.ndarray:
    """``StageProfile.throughput`` elementwise."""
    ct = oct_ / b_o * (1 - alpha + alpha / k)
    dt = odt / b_o * (1 - beta + beta / k)
    t = np.maximum(ct, dt)
    return np.where(t <= 0, np.inf, 1.0 / t)
