"""Compiled loops of the array sampler (numba): turning a chunk's uniforms into choice rows.

``ArraySampler._draw_chunk`` draws its uniforms with numpy (the stream: same calls, shapes and
order as before these kernels existed) and hands them to: ``layouts`` (each variable's partition),
``choice_rows`` (one pass over the rows: PS or collective, replication, compressor and rank,
algorithm), ``load_balance_rows`` (Algorithm 1, c_lb), ``adjacent_merge_rows`` (Algorithm 2,
c_am) and ``fits_rows`` (the memory check); ``identity_rows`` is ``ChoiceArrays.identity``.

Why compiled (issue 16): a 10,000-strategy BERT-large round is ~10 M shard rows. Algorithm 1 is
sequential within a strategy (each shard's server depends on the loads the larger shards left);
in numpy it ran in lockstep over a chunk's strategies (one step per shard rank, ~17 numpy calls a
step) and cost ~0.85 s of a ~2.5 s round, and the other rules made dozens of passes over the
rows. Each kernel here does the former numpy code's arithmetic once per row.

Same draws: every kernel does the former numpy operations in the same order and precision
(float32 uniforms against float32 thresholds, float64 where numpy promoted to float64, the same
left-to-right sums), so the same seed gives the same strategies (``tests/search/test_round.py``
pins digests of the numpy implementation's draws). The one operation that can differ is ``exp``
in Algorithm 1: numba calls the C library's ``exp`` (as the scalar reference
``search.constraints.load_balance`` does through ``math.exp``), while numpy's vectorised ``exp``
differs from it in the last bit for a few per cent of arguments; a server can differ only where
a uniform falls within ~1e-16 of a cumulative-weight boundary. On 2,000-10,000-strategy draws of
BERT-large/B7, NCF-sparse/A2, ResNet50/A2 and CTRDNN/B7 (both priors, temperature 1 and 0,
constrained and random) every column was equal to the numpy implementation's.

Compile cost and cache: the kernels compile on first use in a process (~8 s of CPU for all of
them in a BERT-large round on this project's 2-core development VM, round_throughput-2026-11-27a) and are cached on disk (``cache=True``): in
``NUMBA_CACHE_DIR`` when that is set, else next to this file (``search/samplers/__pycache__``)
when writable, else in numba's per-user cache directory. A process that finds the cache loads
the kernels in well under a second. ``benchmarks/round_throughput.py`` prints numba's import time
and the first (warm-up) round's CPU time, which holds the compile or the cache load.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def load_balance_rows(
    row_draw: np.ndarray,
    is_ps: np.ndarray,
    entry: np.ndarray,
    msg: np.ndarray,
    brank: np.ndarray,
    u: np.ndarray,
    share: np.ndarray,
    temperature: float,
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 1
    """Algorithm 1 for every strategy of a chunk: the server of each PS row (-1 on other rows).

    Rows are grouped by strategy (``row_draw`` non-decreasing); row r's shard is ``entry[r]`` of
    the tables ``msg`` (bytes) and ``brank`` (size rank). A strategy's PS rows are visited
    by ``brank`` ascending (size descending; ties in row order) and take the uniforms ``u`` in that
    order, strategy after strategy. Sizes are in units of temperature x the strategy's mean PS
    shard (so the logits need no division); ``temperature`` 0 is the argmax rule (ties uniform).

    The order within a strategy comes from a counting sort by ``brank`` when there are few
    distinct sizes (at most twice the strategy's rows: BERT-large has 136), else from a stable
    sort; both give (brank, row) order.
    """
    n = len(row_draw)
    j = len(share)
    out = np.full(n, -1, dtype=np.int16)
    n_rank = 0
    for r in range(n):
        if is_ps[r] and brank[entry[r]] + 1 > n_rank:
            n_rank = brank[entry[r]] + 1
    count = np.zeros(n_rank + 1, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)  # one strategy's PS rows, by (brank, row)
    loads = np.zeros(j)
    w = np.empty(j)
    used = 0  # uniforms used so far
    lo = 0
    while lo < n:
        hi = lo + 1
        while hi < n and row_draw[hi] == row_draw[lo]:
            hi += 1
        # the strategy's PS rows sorted by (brank, row), and their mean size (summed in row order)
        m = 0
        total_msg = 0.0
        if n_rank <= 2 * (hi - lo):  # counting sort: few distinct sizes (BERT-large: 136)
            count[:] = 0
            for r in range(lo, hi):
                if is_ps[r]:
                    count[brank[entry[r]] + 1] += 1
                    total_msg += msg[entry[r]]
                    m += 1
            for q in range(n_rank):
                count[q + 1] += count[q]
            for r in range(lo, hi):
                if is_ps[r]:
                    k = brank[entry[r]]
                    rows[count[k]] = r
                    count[k] += 1
        else:  # many distinct sizes: a stable sort of the strategy's PS rows
            for r in range(lo, hi):
                if is_ps[r]:
                    rows[m] = r
                    total_msg += msg[entry[r]]
                    m += 1
            keys = np.empty(m, dtype=np.int64)
            for t in range(m):
                keys[t] = brank[entry[rows[t]]]
            order = np.argsort(keys, kind="mergesort")
            rows[:m] = rows[:m][order]
        lo = hi
        if m == 0:
            continue
        unit = total_msg / m * temperature
        inv = 1.0 / unit if unit > 0 else 0.0
        for q in range(j):
            loads[q] = 0.0
        total = 0.0
        for t in range(m):
            r = rows[t]
            s = msg[entry[r]] * inv if temperature > 0 else msg[entry[r]]
            top = -np.inf
            for q in range(j):
                w[q] = share[q] * total - loads[q]  # how far server q lags its bandwidth share
                top = max(top, w[q])
            if temperature > 0:
                for q in range(j):
                    w[q] = math.exp(w[q] - top)
            else:
                tol = top - 1e-9 * max(1.0, abs(top))
                for q in range(j):
                    w[q] = 1.0 if w[q] >= tol else 0.0
            for q in range(1, j):
                w[q] = w[q - 1] + w[q]
            target = u[used] * w[j - 1]
            used += 1
            # inverse CDF: servers whose cumulative weight is <= target are passed (the last
            # takes what rounding leaves)
            pick = 0
            for q in range(j - 1):
                pick += w[q] <= target
            out[r] = pick
            loads[pick] += s
            total += s
    return out


@numba.njit(cache=True, nogil=True)
def layouts(
    p_split: np.ndarray,
    uv: np.ndarray,
    n_axes: np.ndarray,
    n_axes_f: np.ndarray,
    last_axis: np.ndarray,
    kmax_tab: np.ndarray,
    base: np.ndarray,
    whole: np.ndarray,
    lay_k: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled; tests/search/test_round.py
    """Each (strategy, variable)'s layout and the strategies' row offsets.

    Per variable: split with probability p_split[d] when it has a splittable axis, the axis
    uniformly among them (float32 product, as drawn), the shard count uniformly in 2..k_max
    (the float32 uniform times k_max - 1, in float64). ``uv`` (3, b, v) float32 uniforms.
    """
    b, v = uv.shape[1], uv.shape[2]
    lay = np.empty(b * v, dtype=np.int64)
    offsets = np.zeros(b + 1, dtype=np.int64)
    for d in range(b):
        rows = 0
        for i in range(v):
            a_i = min(np.int64(uv[1, d, i] * n_axes_f[i]), last_axis[i])
            if n_axes[i] > 0 and uv[0, d, i] < p_split[d]:
                km = kmax_tab[i, a_i]
                k = 2 + min(np.int64(np.float64(uv[2, d, i]) * np.float64(km - 1)), km - 2)
                lay[d * v + i] = base[i, a_i] + k - 2
            else:
                lay[d * v + i] = whole[i]
            rows += lay_k[lay[d * v + i]]
        offsets[d + 1] = offsets[d] + rows
    return lay, offsets


@numba.njit(cache=True, nogil=True)
def choice_rows(
    lay: np.ndarray,
    offsets: np.ndarray,
    v: int,
    lay_axis: np.ndarray,
    lay_k: np.ndarray,
    lay_start: np.ndarray,
    p_ps: np.ndarray,
    p_replication: np.ndarray,
    u_ps: np.ndarray,
    u_lr: np.ndarray,
    kinds: np.ndarray,
    kw: np.ndarray,
    u_kind: np.ndarray,
    u_rank: np.ndarray,
    fp16: np.ndarray,
    min_side: np.ndarray,
    ranks: np.ndarray,
    algorithms: np.ndarray,
    frac: np.ndarray,
    u_alg: np.ndarray,
) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled; tests/search/test_round.py
    """The per-shard choices of every row (``ArraySampler._draw_chunk``'s factor-by-factor rules).

    ``kinds`` (3,): the column of kw holding the none / fp16 / PowerSGD weight, -1 when that kind
    is not on offer; all -1 (or ``u_kind`` empty) draws no compressor. ``frac`` (b, A-1) float32
    cumulative algorithm weights (empty: the single algorithm ``algorithms[0]``). Comparisons are
    the numpy rules' own: float32 uniforms against float32 thresholds, or, where a float32 uniform
    meets float64 weights or an integer count, in float64.

    Returns row_draw, variable, axis, num_shards, shard_index, entry, is_ps, local_replication,
    compressor, rank, algorithm and the strategies' collective row counts.
    """
    b = len(offsets) - 1
    n = offsets[b]
    row_draw = np.empty(n, dtype=np.int32)
    variable = np.empty(n, dtype=np.int32)
    axis = np.empty(n, dtype=np.int8)
    num_shards = np.empty(n, dtype=np.int16)
    shard_index = np.empty(n, dtype=np.int16)
    entry = np.empty(n, dtype=np.int32)
    is_ps = np.empty(n, dtype=np.bool_)
    lr = np.empty(n, dtype=np.bool_)
    compressor = np.zeros(n, dtype=np.int8)
    rank = np.zeros(n, dtype=np.int16)
    algorithm = np.empty(n, dtype=np.int8)
    n_cc = np.zeros(b, dtype=np.int64)
    squeeze = len(u_kind) > 0
    n_frac = frac.shape[1]
    n_r = len(ranks)
    r = 0
    for d in range(b):
        w_none = kw[d, kinds[0]] if squeeze and kinds[0] >= 0 else 0.0
        w_fp16 = kw[d, kinds[1]] if squeeze and kinds[1] >= 0 else 0.0
        w_psgd = kw[d, kinds[2]] if squeeze and kinds[2] >= 0 else 0.0
        for i in range(v):
            lay_i = lay[d * v + i]
            k = lay_k[lay_i]
            for q in range(k):
                row_draw[r] = d
                variable[r] = i
                axis[r] = lay_axis[lay_i]
                num_shards[r] = k
                shard_index[r] = q
                e = lay_start[lay_i] + q
                entry[r] = e
                ps = u_ps[r] < p_ps[d]
                is_ps[r] = ps
                lr[r] = ps and u_lr[r] < p_replication[d]
                if squeeze and not ps:
                    fp_ok = fp16[e]
                    allowed = 0
                    for c in range(n_r):
                        if ranks[c] < min_side[e]:
                            allowed += 1
                    ps_ok = allowed > 0
                    w_fp = w_fp16 if fp_ok else 0.0
                    w_ps = w_psgd if ps_ok else 0.0
                    target = np.float64(u_kind[r]) * (w_none + w_fp + w_ps)
                    if target < w_none:
                        kind = 0
                    elif fp_ok and target < w_none + w_fp:
                        kind = 1
                    elif ps_ok:
                        kind = 2
                    else:
                        kind = 1 if fp_ok else 0
                    compressor[r] = kind
                    if kind == 2:
                        pick = min(np.int64(np.float64(u_rank[r]) * np.float64(allowed)), allowed - 1)
                        seen = 0
                        for c in range(n_r):
                            if ranks[c] < min_side[e]:
                                if seen == pick:
                                    rank[r] = ranks[c]
                                    break
                                seen += 1
                if ps:
                    algorithm[r] = 0
                else:
                    n_cc[d] += 1
                    alg = 0
                    for c in range(n_frac):
                        if u_alg[r] >= frac[d, c]:
                            alg += 1
                    algorithm[r] = algorithms[alg]
                r += 1
    return (
        row_draw,
        variable,
        axis,
        num_shards,
        shard_index,
        entry,
        is_ps,
        lr,
        compressor,
        rank,
        algorithm,
        n_cc,
    )


@numba.njit(cache=True, nogil=True)
def adjacent_merge_rows(
    offsets: np.ndarray, cc: np.ndarray, msg: np.ndarray, n_groups: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 2
    """Algorithm 2 for every strategy: the merge group of each collective row (-1 on PS rows).

    A strategy's collective shards in back-propagation order (the reverse of row order); a group
    closes at the first shard where the cumulative bytes reach the group's start plus total / N.
    The cumulative bytes run over the whole chunk in reverse row order (the former numpy code's
    one cumsum, summed in the same order), so the boundaries are the same to the last bit.
    """
    b = len(offsets) - 1
    n = len(cc)
    out = np.full(n, -1, dtype=np.int16)
    m = 0
    for r in range(n):
        if cc[r]:
            m += 1
    rows = np.empty(m, dtype=np.int64)  # collective rows, reversed
    cum = np.zeros(m + 1)
    seg_start = np.zeros(b, dtype=np.int64)
    seg_end = np.zeros(b, dtype=np.int64)
    p = 0
    for d in range(b - 1, -1, -1):
        seg_start[d] = p
        for r in range(offsets[d + 1] - 1, offsets[d] - 1, -1):
            if cc[r]:
                rows[p] = r
                cum[p + 1] = cum[p] + msg[r]
                p += 1
        seg_end[d] = p
    for d in range(b):
        lo, hi = seg_start[d], seg_end[d]
        if hi == lo:
            continue
        g = n_groups[d]
        avg = (cum[hi] - cum[lo]) / max(g, 1)
        group = 0
        cur = lo
        nxt_mark = -1  # position of the next boundary (a new group starts there)
        boundaries = 0
        pos = lo
        while pos < hi:
            if nxt_mark < 0 and boundaries < g - 1:
                # first position >= cur + 1 whose cumulative bytes reach cum[cur] + avg
                target = cum[cur] + avg
                nxt = cur + 1
                while nxt < hi and cum[nxt] < target:
                    nxt += 1
                nxt_mark = nxt if nxt < hi else hi
            if pos == nxt_mark:
                group += 1
                boundaries += 1
                cur = pos
                nxt_mark = -1
                continue
            out[rows[pos]] = group
            pos += 1
    return out


@numba.njit(cache=True, nogil=True)
def fits_rows(
    offsets: np.ndarray,
    entry: np.ndarray,
    is_ps: np.ndarray,
    server: np.ndarray,
    compressor: np.ndarray,
    param: np.ndarray,
    model_bytes: float,
    state_factor: float,
    headroom: float,
    cap: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py
    """Per strategy: fits in device and PS-host memory (``MemoryModel.check``'s rule).

    Device: optimizer state of the collective shards (the model's bytes less the PS bytes) and
    PowerSGD's buffers within ``headroom``; per PS server: its shards x (2 + state factor) within
    its capacity. Byte counts are integers, exact in float64 whatever the summation order.
    """
    b = len(offsets) - 1
    j = len(cap)
    ok = np.empty(b, dtype=np.bool_)
    hosted = np.zeros(j)
    for d in range(b):
        for q in range(j):
            hosted[q] = 0.0
        lowrank = 0.0
        for r in range(offsets[d], offsets[d + 1]):
            if is_ps[r]:
                hosted[server[r]] += param[entry[r]]
            elif compressor[r] == 2:
                lowrank += param[entry[r]]
        ps_bytes = 0.0
        fits = True
        for q in range(j):
            ps_bytes += hosted[q]
            if hosted[q] * (2.0 + state_factor) > cap[q]:
                fits = False
        fits = fits and state_factor * (model_bytes - ps_bytes) + lowrank <= headroom
        ok[d] = fits
    return ok


_M0 = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xC2B2AE3D27D4EB4F)
_M2 = np.uint64(0x165667B19E3779F9)
_M3 = np.uint64(0xD6E8FEB86659FD93)
_FIN = np.uint64(0xBF58476D1CE4E5B9)


@numba.njit(cache=True, nogil=True)
def identity_rows(
    offsets: np.ndarray,
    c0: np.ndarray,
    c1: np.ndarray,
    c2: np.ndarray,
    c3: np.ndarray,
    c4: np.ndarray,
    c5: np.ndarray,
    c6: np.ndarray,
    c7: np.ndarray,
    c8: np.ndarray,
    c9: np.ndarray,
    c10: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py checks it against numpy
    """``ChoiceArrays.identity``: per strategy, the wrapping sum over its rows of a mixed row hash.

    Row hash: x = 0, then for the 11 choice columns in order (``arrays.COLUMNS``) x = x * MIX[i % 4] + value (as
    uint64: -1 wraps to 2^64 - 1, whatever the column's integer width), then x ^= x >> 31,
    x *= 0xBF58476D1CE4E5B9, x ^= x >> 29. All arithmetic mod 2^64.
    """
    b = len(offsets) - 1
    out = np.zeros(b, dtype=np.uint64)
    s31 = np.uint64(31)
    s29 = np.uint64(29)
    for d in range(b):
        acc = np.uint64(0)
        for r in range(offsets[d], offsets[d + 1]):
            x = np.uint64(c0[r])
            x = x * _M1 + np.uint64(c1[r])
            x = x * _M2 + np.uint64(c2[r])
            x = x * _M3 + np.uint64(c3[r])
            x = x * _M0 + np.uint64(c4[r])
            x = x * _M1 + np.uint64(c5[r])
            x = x * _M2 + np.uint64(c6[r])
            x = x * _M3 + np.uint64(c7[r])
            x = x * _M0 + np.uint64(c8[r])
            x = x * _M1 + np.uint64(c9[r])
            x = x * _M2 + np.uint64(c10[r])
            x ^= x >> s31
            x *= _FIN
            x ^= x >> s29
            acc += x
        out[d] = acc
    return out
