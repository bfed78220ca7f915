"""An exact scheduler: dynamic programming over layers, A* within the counts, inside a search over throughput levels.

HeterPS has no exact method besides brute force (T^L schedules). The objective does *not*
decompose over stages as it stands: money = M · Σ_i p_i k_i / min_i Throughput_i(k_i) is a ratio
whose denominator is a minimum over all stages, and the counts N_t couple every stage of one
type (Formula 11: Σ_{i: t_i = t} k_i <= N_t). What does decompose is the money *rate* at a fixed
throughput level θ: with every stage given its least integer units k_i(θ) for θ
(``provisioning.units_needed``), the rate c(θ) = Σ_i p_{t_i} k_i(θ) is a sum of stage terms, and a
stage's term depends only on its layers, its type and the types of the stages before and after it
(its boundary transfers, which the cost model charges on both sides of a cut).

**At one level θ: a resource-constrained shortest path (decision).** DP(θ) = min over schedules
of c(θ) subject to the counts. Without the count sums it is a shortest path whose state is
(layer j, type t of the stage starting at j, type p of the stage before it): f(j, t, p) = min over
the stage's end e and the next type n != t of rate(j, e, t, n, p) + f(e, n, t), O(L^2 T^3) per θ
in numpy, where each stage only obeys k_i <= N_t (the "plain DP"). The previous type is part of
the state because a stage's units depend on what it receives. When the plain DP's plan respects
every count summed over its stages, it is optimal for θ (it solves a relaxation). When it does
not (MATCHNET on HeterPS-2GPU, whose best plan is cores - T4 - cores - T4), an A* search over
partial schedules from layer 0 finds the least rate within the counts: a node is (j, t, p, units
used so far of every type), a child closes the stage at e with its k units (refused if a sum
would exceed N_t), and the heuristic is the plain DP's suffix f(j, t, p). That heuristic is
admissible (it drops only the count sums) and consistent (it is the DP's own Bellman minimum),
so the first complete schedule popped is optimal and no node is expanded twice; nodes whose key
reaches r* θ (r* the best ratio so far) are not expanded, since they cannot improve on r* at θ;
nor is A* run when the plain DP's value, a lower bound, already reaches r* θ (the search then
jumps to plain DP(θ)/r*, see below). The plain DP is usually tight, so A* expands few nodes (MATCHNET on HeterPS-2GPU: 158 nodes over
22 levels). Rejected alternatives: a DP whose state adds the free units of each type whose count
bound (tried: exact, but its R = Π (N_b + 1) = 193 x 17 states per node for cores and T4s made
MATCHNET take 4.2 s); a MILP per level (not tried: ~4·10^4 stage variables at 20 layers and 5
types, each solve expected well over the 0.1 s budget of a whole run); a Lagrangian relaxation
inside branch and bound (not tried: integer units leave a duality gap, so it needs the branching
A* does anyway). A* is exponential in the worst case (bounded by the DP's state
space times the count vectors), never fast-failing: it stays exact, only slower.

**The search over θ is exact.** The best plan is optimal at its own realised throughput θ*: at
θ* every stage needs at most the units it has, so DP(θ*) <= its rate (and the least units
respect the counts whenever the plan's do); hence min_θ DP(θ)/θ is the optimum. DP is
non-decreasing in θ (units only grow, the feasible set only shrinks), and the plan found at θ
stays feasible up to its realised throughput θ_P, so DP is constant on [θ, θ_P]. Once a ratio r*
is known no θ' < DP(θ)/r* can beat it (DP(θ')/θ' >= DP(θ)/θ' > r*), and the search jumps to
max(DP(θ)/r*, θ_P) (as the per-schedule provisioning does). It stops when the real-valued
lower bound (a plain DP without rounding, memory floors or count sums; Σ p k_real(θ)/θ grows with
θ) divided by θ reaches r*, or when no schedule reaches θ within the counts. The result is
proven optimal (``exact=True``); the only exception is the iteration cap (10^5 levels, never
reached in the benchmarks), after which the result says ``exact=False`` with a note.

Shapes:
    segment arrays (L+1, L+1, T, T+1, T+1) packed as (span (first, end > first), type, next type,
    previous type); DP table (L+1, T+1, T+1) = (layer, type, previous type)
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from search.heterogeneous.base import Assignment, Objective, Scheduler
from search.heterogeneous.provisioning import EPS
from simulator.analytical.heterogeneous import SegmentArrays

MAX_LEVELS = 100_000

Stage = tuple[int, int, int, int, int]  # (first, end, type, next type, previous type)
Plan = tuple[list[Stage], list[int]]  # stages and their units


class ExactScheduler(Scheduler):
    """Plain DP plus A* within the counts at each throughput level; see the module doc."""

    name = "exact"

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        cm = objective.cm
        seg = _Prepared(cm.segment_arrays())
        n, nt = cm.num_layers, cm.num_types
        counts = cm.count
        price = cm.price_per_s[None, :, None, None]
        count = counts[None, :, None, None]
        theta = cm.workload.throughput_limit
        best_ratio = math.inf
        best: Assignment | None = None
        levels = searches = expanded = 0
        proven = False
        while levels < MAX_LEVELS:
            levels += 1
            real = seg.real_units(theta)
            k = seg.units(real, theta)
            rates = np.empty((2, *k.shape))  # the integer units' rate and the real-valued bound's
            np.multiply(price, k, out=rates[0])
            rates[0][k > count] = np.inf
            np.multiply(price, real, out=rates[1])
            rate = rates[0]
            value, h, plan, lower = _relaxed(rates, k, seg.offs, n, nt)
            if plan is None or lower / theta >= best_ratio:
                # no schedule reaches θ, nor any higher θ (units only grow); or none can beat r*
                proven = True
                break
            if _over(plan, counts):
                if value >= best_ratio * theta:
                    # not even the relaxation beats r* here: skip to where it might
                    theta = value / best_ratio * (1 + EPS)
                    continue
                searches += 1
                value, plan, nodes = _constrained(rate, k, h, seg.offs, counts, best_ratio * theta)
                expanded += nodes
                if plan is None:
                    if math.isinf(value):  # no schedule reaches θ within the counts
                        proven = True
                        break
                    theta = value / best_ratio * (1 + EPS)  # value: a lower bound >= r* θ
                    continue
            stages, units = plan
            realised = min(seg.throughput(st, kk) for st, kk in zip(stages, units, strict=True))
            ratio = value / realised
            if ratio < best_ratio * (1 - 1e-12):
                best_ratio = ratio
                best = tuple(t for (a, b, t, _, _) in stages for _ in range(a, b))
            if lower / theta >= best_ratio or math.isinf(realised):  # checked again with the new r*
                proven = True
                break
            theta = max(value / best_ratio, realised) * (1 + EPS)
        notes = [f"{levels} throughput levels"]
        if searches:
            notes.append(
                f"the plain DP's plan exceeded a type's count summed over its stages at {searches} levels: "
                f"A* within the counts expanded {expanded} nodes"
            )
        if not proven:
            notes.append(f"stopped after {MAX_LEVELS} throughput levels: not proven optimal")
        extra: dict[str, object] = {"exact": proven, "notes": tuple(notes)}
        if best is None:
            extra["reason"] = (
                f"no schedule reaches {cm.workload.throughput_limit:g} samples/s within the counts"
            )
        return best, extra


def _over(plan: Plan, counts: np.ndarray) -> bool:
    """Whether the plan's units of some type, summed over its stages, exceed the type's count."""
    used = np.zeros(len(counts), dtype=np.int64)
    for (_a, _b, t, _, _), kk in zip(*plan, strict=True):
        used[t] += kk
    return bool(np.any(used > counts))


class _Prepared:
    """The segment arrays packed as (stage span, type, next type, previous type), with Amdahl's parts.

    A span is a pair (first layer j, end layer e > j); the spans are ordered by j, then e, so the
    spans starting at j are the contiguous block ``offs[j] : offs[j] + L - j`` (the (L+1)^2 grid
    of the segment arrays would compute the e <= j half for nothing at every level).
    Computation (OCT, α), the memory floor and the fit do not depend on the neighbours' types:
    they are kept with size-1 next / previous axes and broadcast, which halves the work per level.
    """

    def __init__(self, seg: SegmentArrays) -> None:
        self.b_o = seg.b_o
        n = seg.odt.shape[0] - 1
        first, end = np.triu_indices(n + 1, k=1)  # row-major: by first layer, then end layer
        self.offs = np.concatenate([[0], np.cumsum(np.arange(n, 0, -1))]).astype(np.int64)

        def lay(a: np.ndarray, full: bool) -> np.ndarray:
            a = a[first, end]  # (spans, T, T+1, T+1)
            return np.ascontiguousarray(a if full else a[..., :1, :1])

        self.par = [lay(seg.alpha * seg.oct, False), lay(seg.beta * seg.odt, True)]
        self.ser = [lay((1 - seg.alpha) * seg.oct, False), lay((1 - seg.beta) * seg.odt, True)]
        # A next stage of the same type would not be maximal: an infinite serial part makes such a
        # stage unreachable at every θ (its units and both rates inf), once here instead of per layer
        # of every DP pass.
        nt = self.ser[1].shape[1]
        for t in range(nt):
            self.ser[1][:, t, t, :] = np.inf
        self.fits = lay(seg.fits, False)
        self.min_units = lay(seg.min_units, False).astype(float)

    def real_units(self, theta: float) -> np.ndarray:
        """Formula 14 (corrected), real-valued, for every stage at once; inf where unreachable."""
        budget = self.b_o / theta
        with np.errstate(divide="ignore", invalid="ignore"):
            ks = []
            for par, ser in zip(self.par, self.ser, strict=True):
                denom = budget - ser
                ks.append(np.where(denom > 0, par / denom, np.inf))
            comp = np.where(self.fits, ks[0], np.inf)
        return np.maximum(ks[1], comp)

    def units(self, real: np.ndarray, theta: float) -> np.ndarray:
        """Least integer units per stage for θ (with the memory floor); inf where unreachable."""
        with np.errstate(invalid="ignore"):
            k = np.maximum(np.ceil(real * (1 - 1e-12)), self.min_units)  # inf where real is inf
            # Agree with Formula 5 in the last bit: only a k within rounding of the real root can
            # fall short of θ (the throughput grows with k), so only those are checked, one more
            # unit each; one still short is unreachable.
            near = np.nonzero((k <= real * (1 + 1e-9)) & (real < np.inf))
        if near[0].size:
            kn = k[near]
            short = self._thr(kn, near) < theta
            if short.any():
                kn = np.where(short, kn + 1, kn)
                kn[self._thr(kn, near) < theta] = np.inf
                k[near] = kn
        return k

    def _thr(self, k: np.ndarray, at: tuple[np.ndarray, ...]) -> np.ndarray:
        """Formula 5 for the stages at the indices ``at`` with units ``k`` (one per index)."""
        zero = np.zeros_like(at[0])
        c = (at[0], at[1], zero, zero)  # computation: the size-1 neighbour axes
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.maximum(self.ser[0][c] + self.par[0][c] / k, self.ser[1][at] + self.par[1][at] / k)
            t = t / self.b_o
            return np.where(t > 0, 1.0 / t, np.inf)

    def span(self, first: int, end: int) -> int:
        return int(self.offs[first]) + end - first - 1

    def throughput(self, stage: Stage, k: int) -> float:
        a, b, t, u, p = stage
        i = self.span(a, b)
        c, s = (i, t, 0, 0), (i, t, u, p)
        m = max(self.ser[0][c] + self.par[0][c] / k, self.ser[1][s] + self.par[1][s] / k) / self.b_o
        return math.inf if m <= 0 else 1.0 / float(m)


def _suffix(rates: np.ndarray, offs: np.ndarray, n: int, nt: int) -> np.ndarray:
    """The plain DP (each stage only obeys k_i <= N_t) for S rate arrays at once: suffix values.

    ``rates`` has shape (S, spans, T, T+1, T+1) = (array, span (j, e) as ``_Prepared`` packs it,
    type, next type, previous type; T = none); stages are maximal (the next type differs; ``_Prepared`` gives
    the others infinite rates). Returns f (S, L+1, T+1, T+1): f[s, e, u, p] = least rate to cover
    layers e..n-1 with a stage of type u starting at e after a stage of type p (p = T: none; u = T:
    done, only at e = L). One pass serves several arrays because the per-layer numpy calls, not
    the arithmetic, set the time at these sizes; the choices are recovered along the one plan
    wanted (``_walk``) instead of being stored at every layer.
    """
    ns = rates.shape[0]
    f = np.full((ns, n + 1, nt + 1, nt + 1), np.inf)
    f[:, n, nt, :] = 0.0
    for j in range(n - 1, -1, -1):
        # after[s, t, e, u] = f[s, e, u, t]: the rest, given that this stage (type t) precedes it.
        after = f[:, j + 1 :, :, :nt].transpose(0, 3, 1, 2)[..., None]  # (S, T, E, T+1, 1)
        span = rates[:, offs[j] : offs[j] + n - j].transpose(0, 2, 1, 3, 4)  # (S, T, E, T+1, P=T+1)
        total = span + after
        f[:, j, :nt, :] = total.reshape(ns, nt, -1, nt + 1).min(axis=2)
    return f


def _walk(rate: np.ndarray, f: np.ndarray, offs: np.ndarray, start: int, n: int, nt: int) -> list[Stage]:
    """The stages of the plain DP's plan from layer 0 with a first stage of type ``start``: at each
    stage, the argmin of the same sums ``_suffix`` minimised (same operands, same order: the same
    choice, first on ties)."""
    stages: list[Stage] = []
    j, t, p = 0, start, nt
    while j < n:
        total = rate[offs[j] : offs[j] + n - j, t, :, p] + f[j + 1 :, :, t]  # (E, T+1)
        c = int(total.argmin())
        e, u = j + 1 + c // (nt + 1), c % (nt + 1)
        stages.append((j, e, t, u, p))
        j, t, p = e, u, t
    return stages


def _relaxed(
    rates: np.ndarray, units: np.ndarray, offs: np.ndarray, n: int, nt: int
) -> tuple[float, np.ndarray, Plan | None, float]:
    """The plain DP on ``rates[0]`` (value, suffix table, plan; None: no schedule reaches θ) and
    the least total of ``rates[1]`` (the real-valued lower bound's rate)."""
    f = _suffix(rates, offs, n, nt)
    lower = float(np.min(f[1, 0, :nt, nt]))
    start = int(np.argmin(f[0, 0, :nt, nt]))
    value = float(f[0, 0, start, nt])
    if not math.isfinite(value):
        return value, f[0], None, lower
    stages = _walk(rates[0], f[0], offs, start, n, nt)
    ks = [int(units[offs[a] + e - a - 1, t, u, p]) for (a, e, t, u, p) in stages]
    return value, f[0], (stages, ks), lower


def _constrained(
    rate: np.ndarray,
    units: np.ndarray,
    h: np.ndarray,
    offs: np.ndarray,
    counts: np.ndarray,
    bound: float,
) -> tuple[float, Plan | None, int]:
    """A* over partial schedules with the counts summed over stages; the plain DP's suffix ``h`` is the heuristic.

    A node is (layer j, type t of the stage starting at j, previous type p, units used of every
    type); its key is g (the rate of the stages so far) + h[j, t, p]. h is admissible (the plain
    DP drops only the count sums) and consistent (it is the DP's own Bellman minimum), so the first
    complete schedule popped is the least rate within the counts, and a node popped once is never
    improved. Nodes whose key reaches ``bound`` are not queued or expanded: when no complete
    schedule is found below it, the least such key (>= bound; inf when there is none, i.e. no
    schedule within the counts at all) is returned as a lower bound with no plan.
    Returns (value or lower bound, plan or None, nodes expanded).
    """
    n = h.shape[0] - 1
    nt = h.shape[1] - 1
    cap = [int(c) for c in counts]
    zero = (0,) * nt
    # entries (key, tie-break, g, j, t, p, used, trail index); trail[i] = (stage, units, parent index)
    heap: list[tuple[float, int, float, int, int, int, tuple[int, ...], int]] = []
    trail: list[tuple[Stage, int, int]] = []
    tick = 0
    for t in range(nt):
        key = float(h[0, t, nt])
        if key < math.inf:
            heapq.heappush(heap, (key, tick, 0.0, 0, t, nt, zero, -1))
            tick += 1
    closed: set[tuple[int, int, int, tuple[int, ...]]] = set()
    expanded = 0
    cut = math.inf  # the least key not queued because it reached the bound
    while heap:
        key, _, g, j, t, p, used, back = heapq.heappop(heap)
        if key >= bound:
            return min(key, cut), None, expanded
        if j == n:
            stages: list[Stage] = []
            ks: list[int] = []
            node = back
            while node >= 0:
                stage, kk, node = trail[node]
                stages.append(stage)
                ks.append(kk)
            return g, (stages[::-1], ks[::-1]), expanded
        state = (j, t, p, used)
        if state in closed:
            continue
        closed.add(state)
        expanded += 1
        # children: this stage ends at e (> j) and the next has type u
        block = slice(offs[j], offs[j] + n - j)  # the spans (j, e) for e = j+1..n
        k = units[block, t, :, p]  # (E, T+1)
        child_g = g + rate[block, t, :, p]
        child_key = child_g + h[j + 1 :, :, t]
        fits = k <= cap[t] - used[t]
        fits[:, t] = False  # the next stage of the same type would not be maximal
        ok = fits & (child_key < bound)
        over = child_key[fits & ~ok]
        if over.size:
            cut = min(cut, float(over.min()))
        for ei, u in zip(*np.nonzero(ok), strict=True):
            e = j + 1 + int(ei)
            kk = int(k[ei, u])
            nused = (*used[:t], used[t] + kk, *used[t + 1 :])
            trail.append(((j, e, t, int(u), p), kk, back))
            heapq.heappush(
                heap,
                (float(child_key[ei, u]), tick, float(child_g[ei, u]), e, int(u), t, nused, len(trail) - 1),
            )
            tick += 1
    return cut, None, expanded
