"""Compiled loops of the vectorised scorer (numba): a batch's collective calls and its Eq. 1-3 sums.

``number_calls`` numbers the collective calls of a sampler's rows (``batch.make_sampled_batch``);
``sync_times`` is the per-row part of ``vectorised.score``: each row's Eq. 2/3 seconds, summed
into its server or call, T_sync^PS and T_sync^CC, and E of the overlap model (``overlap``'s
module docstring) — strategy by strategy, so a strategy's rows, calls and ready-level table stay
in cache and no (T,) temporary is written.

Why compiled (issue 16): a 10,000-strategy BERT-large round scores ~10 M shard rows. The numpy
scorer made a few dozen whole-array passes over them (masks, mixed-radix keys, bincounts, the
(channel, ready level) table of the overlap model) and took ~0.6 s of a round's CPU time.

Same numbers: every sum is taken in the numpy scorer's order (np.bincount adds in row order from
0.0; a channel's suffix sums run from its latest ready level down; T_sync^PS's share divides the
busiest server by ``np.sum``'s total, reproduced by ``_numpy_sum``), and no multiply-add is fused
(numba does not contract without fastmath), so the predictions equal the numpy scorer's to the
last bit (tests/simulator/analytical/test_analytical_kernels.py: equal on sampled and encoded
batches of several domains and every CostParams branch).

Compile cost and cache: like ``search.samplers.kernels`` (``cache=True``: in ``NUMBA_CACHE_DIR``,
else next to this file, else numba's per-user cache). The kernels specialise on the integer
widths of the columns they read (the array sampler narrows them per model).
"""

from __future__ import annotations

import numba
import numpy as np

#: Collective op of a sparse variable's rows (``arrays.OP_ALLGATHER``).
_ALLGATHER = 2


@numba.njit(cache=True, nogil=True)
def number_calls(
    offsets: np.ndarray,
    variable: np.ndarray,
    is_ps: np.ndarray,
    group: np.ndarray,
    algorithm: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    lowrank: np.ndarray,
    sparse: np.ndarray,
    powersgd_allreduces: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each collective row's call and each call's strategy, group, op and repeats.

    A call is the executor's unit (merge group, algorithm, compressor, rank) and op (all-gather
    for a sparse variable, else the algorithm's all-reduce), numbered strategy by strategy and,
    within a strategy, in the order of ``make_batch``'s mixed-radix key (group, algorithm,
    compressor, rank, op): ``make_batch``'s numbering. Repeats: 1 for an all-gather, else 1 for
    an uncompressed part plus ``powersgd_allreduces`` for a PowerSGD part (``lowrank`` rows).
    Collective rows must hold group >= 0 and rank >= 0 (the samplers' rows do).

    Returns call (T,) int64 (-1 on PS rows), call_strategy, call_group, call_op (G,) int64 and
    call_repeats (G,) float64.
    """
    t = len(variable)
    n = len(offsets) - 1
    gspan = 1
    top_rank = 0
    for r in range(t):
        if not is_ps[r]:
            gspan = max(gspan, group[r] + 1)
            top_rank = max(top_rank, rank[r])
    # ranks by their index among the ranks present (same order, a small key space)
    rank_index = np.zeros(top_rank + 1, dtype=np.int64)
    for r in range(t):
        if not is_ps[r]:
            rank_index[rank[r]] = 1
    rspan = 0
    for q in range(top_rank + 1):
        seen = rank_index[q]
        rank_index[q] = rspan
        rspan += seen
    width = 18 * rspan  # keys per group: 2 algorithms x 3 compressors x rspan ranks x 3 ops
    # key -> slot in this strategy (-1 unseen); PS rows look up the last cell, slot t (no call),
    # so that the row loop has no branch on is_ps (PS and collective rows alternate at random)
    slot = np.full(gspan * width + 1, -1, dtype=np.int64)
    slot[gspan * width] = t
    call = np.empty(t, dtype=np.int64)
    keys = np.empty(t, dtype=np.int64)  # this strategy's distinct keys, first-seen order
    flags = np.zeros(t + 1, dtype=np.int64)  # per slot: 1 an uncompressed row, 2 a PowerSGD row
    order_of = np.empty(t + 1, dtype=np.int64)
    order_of[t] = -1
    call_strategy = np.empty(t, dtype=np.int64)
    call_group = np.empty(t, dtype=np.int64)
    call_op = np.empty(t, dtype=np.int64)
    call_repeats = np.empty(t)
    ps_key = gspan * width
    g = 0
    for s in range(n):
        m = 0
        for r in range(offsets[s], offsets[s + 1]):
            a = algorithm[r]
            op = _ALLGATHER if sparse[variable[r]] else a
            key = (((group[r] * 2 + a) * 3 + compressor[r]) * rspan + rank_index[max(rank[r], 0)]) * 3 + op
            key = ps_key if is_ps[r] else key
            k = slot[key]
            if k < 0:
                k = m
                slot[key] = m
                keys[m] = key
                flags[m] = 0
                m += 1
            flags[k] |= 2 if lowrank[r] else 1
            call[r] = k
        if m == 0:
            for r in range(offsets[s], offsets[s + 1]):
                call[r] = -1
            continue
        order = np.argsort(keys[:m])
        for i in range(m):
            k = order[i]
            order_of[k] = g + i
            key = keys[k]
            slot[key] = -1
            op = key % 3
            call_strategy[g + i] = s
            call_group[g + i] = key // width
            call_op[g + i] = op
            if op == _ALLGATHER:
                call_repeats[g + i] = 1.0
            else:
                call_repeats[g + i] = (flags[k] & 1) + powersgd_allreduces * (flags[k] >> 1)
        for r in range(offsets[s], offsets[s + 1]):
            call[r] = order_of[call[r]]
        g += m
    return call, call_strategy[:g].copy(), call_group[:g].copy(), call_op[:g].copy(), call_repeats[:g].copy()


@numba.njit(cache=True, nogil=True)
def _numpy_sum(a: np.ndarray) -> float:  # pragma: no cover - compiled
    """``np.sum`` of a contiguous float64 row, in numpy's order (its pairwise summation: one
    running sum below 8 elements, eight partial sums up to 128, halves above)."""
    n = len(a)
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
        i = 8
        while i < n - n % 8:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[i]
            i += 1
        return res
    half = n // 2
    half -= half % 8
    return _numpy_sum(a[:half]) + _numpy_sum(a[half:])


@numba.njit(cache=True, nogil=True)
def sync_times(
    offsets: np.ndarray,
    variable: np.ndarray,
    is_ps: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    algorithm: np.ndarray,
    call: np.ndarray,
    sent_bytes: np.ndarray,
    call_strategy: np.ndarray,
    call_op: np.ndarray,
    call_repeats: np.ndarray,
    sparse: np.ndarray,
    var_level: np.ndarray,
    level_ready: np.ndarray,
    code_transfer: np.ndarray,
    code_const: np.ndarray,
    ps_const: np.ndarray,
    call_const: np.ndarray,
    unit_overhead: float,
    j: int,
    combine_sum: bool,
    bucket: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Eq. 2/3 per row, summed; T_sync^PS, T_sync^CC and the overlap model's E per strategy.

    Rows of strategy s are ``offsets[s]:offsets[s+1]``; its calls (``call``, numbered strategy
    by strategy as ``make_batch`` does; ``call_strategy`` ascending) are contiguous. A row's code
    is 2·server + I_p (PS) or 2·J + op (collective; op from ``sparse`` and ``algorithm``); its
    seconds are sent_bytes·code_transfer[code] + const, const = ``ps_const[variable]`` for a PS
    row when ``ps_const`` is not empty (a measured α per PS round), else ``code_const[code]``. A
    call takes its rows' seconds + call_const[op]·repeats (+ ``unit_overhead``). ``var_level`` is
    each variable's index in ``level_ready`` (ascending ready times, ``overlap``); ``bucket``
    False skips E (``overlap='full'``). ``combine_sum``: one channel (CostParams.combine 'sum'),
    else a collective channel and one per server.

    The row loop has no branch on is_ps (PS and collective rows alternate at random): a row adds
    into bin ``server`` or J + its call's index in the strategy, and a PS row's half-time and level
    are appended to a buffer that the channel pass reads.

    Returns server_time (N, J), call_time (G,), t_ps, t_cc, end (N,) (end 0 without ``bucket``).
    """
    n = len(offsets) - 1
    g = len(call_op)
    nl = len(level_ready)
    by_alpha = len(ps_const) > 0
    most = 0  # the most rows of one strategy
    for s in range(n):
        most = max(most, offsets[s + 1] - offsets[s])
    acc = np.zeros(j + most)  # bins of one strategy: servers, then its calls
    top_level = np.full(j + most, -1, dtype=np.int64)
    ps_half = np.empty(most)  # one strategy's PS rows: half their seconds (push; pull)
    ps_level = np.empty(most, dtype=np.int64)
    ps_channel = np.empty(most, dtype=np.int64)
    server_time = np.zeros((n, j))
    call_time = np.zeros(g)
    t_ps = np.zeros(n)
    t_cc = np.zeros(n)
    end = np.zeros(n)
    channels = 1 if combine_sum else 1 + j  # channel 0: calls (and, summed, PS); 1 + server
    later = np.zeros((channels, nl))  # duration of the units at each ready level, per channel
    present = np.zeros((channels, nl), dtype=np.bool_)
    top = np.full(channels, -1, dtype=np.int64)  # each channel's latest ready level so far
    tail = np.zeros(channels)  # the tail of that level's last unit
    lo_level = np.full(channels, nl, dtype=np.int64)
    c0 = 0
    for s in range(n):
        c1 = c0
        while c1 < g and call_strategy[c1] == s:
            c1 += 1
        m = 0
        for r in range(offsets[s], offsets[s + 1]):
            v = variable[r]
            ps = is_ps[r]
            srv = server[r]
            code = 2 * srv + (1 if local_replication[r] else 0)
            code = code if ps else 2 * j + (_ALLGATHER if sparse[v] else algorithm[r])
            const = ps_const[v] if by_alpha and ps else code_const[code]
            seconds = sent_bytes[r] * code_transfer[code] + const
            b = srv if ps else j + call[r] - c0
            acc[b] += seconds
            level = var_level[v]
            top_level[b] = max(top_level[b], level)
            ps_half[m] = seconds / 2
            ps_level[m] = level
            ps_channel[m] = 1 + srv
            m += 1 if ps else 0
        busiest = 0.0
        for q in range(j):
            server_time[s, q] = acc[q]
            busiest = max(busiest, acc[q])
        t_ps[s] = busiest
        cc = 0.0
        for c in range(c0, c1):
            b = j + c - c0
            ct = acc[b] + call_const[call_op[c]] * call_repeats[c]
            if unit_overhead != 0.0:
                ct = ct + unit_overhead
            call_time[c] = ct
            cc += ct
        t_cc[s] = cc
        if bucket:
            # units in the numpy scorer's order: the strategy's calls, then its PS rows; a
            # channel's tail is that of its latest-ready unit (ties: the last), 0 for a call
            for c in range(c0, c1):
                level = top_level[j + c - c0]
                later[0, level] += call_time[c]
                present[0, level] = True
                if level >= top[0]:
                    top[0] = level
                    tail[0] = 0.0
                lo_level[0] = min(lo_level[0], level)
            share = 1.0  # combine 'sum': a shard's share of the busiest server's time
            if combine_sum:
                total = _numpy_sum(server_time[s])
                share = busiest / total if total > 0 else 0.0
            for i in range(m):
                ch = 0 if combine_sum else ps_channel[i]
                d = ps_half[i] * share if combine_sum else ps_half[i]
                level = ps_level[i]
                later[ch, level] += d
                present[ch, level] = True
                if level >= top[ch]:
                    top[ch] = level
                    tail[ch] = d
                lo_level[ch] = min(lo_level[ch], level)
            # E = max over channels of max_r (r + D(>= r)) + tail; the tables are cleared as read
            e = 0.0
            for ch in range(channels):
                if top[ch] < 0:
                    continue
                suffix = 0.0
                ce = 0.0
                for level in range(top[ch], lo_level[ch] - 1, -1):
                    suffix += later[ch, level]
                    if present[ch, level]:
                        ce = max(ce, level_ready[level] + suffix)
                    later[ch, level] = 0.0
                    present[ch, level] = False
                e = max(e, ce + tail[ch])
                top[ch] = -1
                tail[ch] = 0.0
                lo_level[ch] = nl
            end[s] = e
        for b in range(j + c1 - c0):
            acc[b] = 0.0
            top_level[b] = -1
        c0 = c1
    return server_time, call_time, t_ps, t_cc, end
