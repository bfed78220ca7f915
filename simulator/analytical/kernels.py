"""Compiled loops of the vectorised scorer (numba): a batch's collective calls and its Eq. 1-3 sums.

``sync_times`` is the per-row part of ``vectorised.score``: each row's Eq. 2/3 seconds, summed
into its server or collective call, T_sync^PS and T_sync^CC, and E of the overlap model
(``overlap``'s module docstring), strategy by strategy, so that a strategy's rows, calls and
ready-level table stay in cache and no (T,) temporary is written. On a batch whose calls are
numbered it reads ``call``; on a sampler's rows (``batch.make_sampled_batch``) it numbers each
strategy's calls itself (``_calls_of``), and ``number_calls`` numbers them the same way for the
batch's ``call`` fields, which are computed only when read.

Why compiled (issue 16): a 10,000-strategy BERT-large round scores ~10 M shard rows. The numpy
scorer made a few dozen whole-array passes over them (masks, mixed-radix keys, bincounts, the
(channel, ready level) table of the overlap model): 0.44 s of the round's CPU time, 0.16 s with
these loops (benchmarks/results/round_throughput-2026-11-28b.txt), of which ``sync_times`` ~0.12 s
(~12 ns a row: numbering, Eq. 2/3 and the channel tables) and the sampler's shard-size gather
(``ChoiceArrays.batch``'s geometry) ~0.03 s.

Same numbers: every sum is taken in the numpy scorer's order (np.bincount adds in row order from
0.0; a channel's suffix sums run from its latest ready level down; T_sync^PS's share divides the
busiest server by ``np.sum``'s total, reproduced by ``_numpy_sum``), and no multiply-add is fused
(numba does not contract without fastmath), so the predictions equal the numpy scorer's to the
last bit (tests/simulator/analytical/test_analytical_kernels.py: equal on sampled and encoded
batches of several domains and every CostParams branch).

Compile cost and cache: like ``search.samplers.kernels`` (``cache=True``: in ``NUMBA_CACHE_DIR``,
else next to this file, else numba's per-user cache); with an empty cache these kernels add
~2 s of CPU to the first round (search.samplers.warm's round: 7.0 s before them, 9.1 s with them,
on the loaded 2-core development VM). They specialise on the integer widths of the columns they
read: the sampler's narrow columns (one signature for every model at present) and int64 for
batches from ``make_batch``/``encode`` (``AnalyticalSimulator.predict``).
"""

from __future__ import annotations

import numba
import numpy as np

#: Collective op of a sparse variable's rows (``arrays.OP_ALLGATHER``).
_ALLGATHER = 2


@numba.njit(cache=True, nogil=True)
def _key_space(
    is_ps: np.ndarray, group: np.ndarray, rank: np.ndarray, lowrank: np.ndarray, most: int
) -> tuple[np.ndarray, int, int, bool, np.ndarray]:  # pragma: no cover - compiled
    """The call keys of a chunk's collective rows: (rank_index, rspan, width, any_lowrank, slot).

    A row's key is make_batch's mixed radix of (group, algorithm, compressor, rank, op), the rank
    replaced by its index among the ranks present (``rank_index``, ``rspan`` of them; same order):
    ``width`` = 18·rspan keys per group. ``slot`` maps a key to its call among the strategy's (-1:
    not seen yet); its last cell, every PS row's key, holds ``most`` (a scratch slot, never a call).
    """
    gspan = 1
    top_rank = 0
    any_lowrank = False
    for r in range(len(is_ps)):
        if not is_ps[r]:
            gspan = max(gspan, int(group[r]) + 1)
            top_rank = max(top_rank, int(rank[r]))
        any_lowrank |= lowrank[r]
    rank_index = np.zeros(top_rank + 1, dtype=np.int64)
    for r in range(len(is_ps)):
        if not is_ps[r]:
            rank_index[rank[r]] = 1
    rspan = 0
    for q in range(top_rank + 1):
        seen = rank_index[q]
        rank_index[q] = rspan
        rspan += seen
    width = 18 * rspan  # 2 algorithms x 3 compressors x rspan ranks x 3 ops
    slot = np.full(gspan * width + 1, -1, dtype=np.int64)
    slot[gspan * width] = most
    return rank_index, rspan, width, any_lowrank, slot


@numba.njit(cache=True, nogil=True)
def _calls_of(
    lo: int,
    hi: int,
    variable: np.ndarray,
    is_ps: np.ndarray,
    group: np.ndarray,
    algorithm: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    lowrank: np.ndarray,
    sparse: np.ndarray,
    rank_index: np.ndarray,
    rspan: int,
    any_lowrank: bool,
    slot: np.ndarray,
    scratch: np.ndarray,
    local: np.ndarray,
    call_key: np.ndarray,
    call_flags: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Number the collective calls of rows lo:hi (one strategy) in key order; returns their count m.

    Afterwards ``local[r - lo]`` is row r's call among the strategy's (0 on a PS row: unused),
    ``call_key[i]`` and ``call_flags[i]`` call i's key and flags (1: an uncompressed row, 2: a
    PowerSGD row); ``slot`` is clear again. ``scratch`` is (4, most + 1) int64 with
    ``scratch[3, most]`` = 0; ``local``, ``call_key``, ``call_flags`` hold ``most`` cells.
    """
    ps_key = len(slot) - 1
    keys, flags, order, position = scratch[0], scratch[1], scratch[2], scratch[3]
    m = 0
    for r in range(lo, hi):
        # selects by arithmetic, not branches (PS and collective rows alternate at random)
        ps = int(is_ps[r])
        a = int(algorithm[r])
        op = a + int(sparse[variable[r]]) * (_ALLGATHER - a)
        key = (int(group[r]) * 2 + a) * 3 + int(compressor[r])
        if rspan > 1:
            key = key * rspan + rank_index[max(int(rank[r]), 0)]
        key = ps * ps_key + (1 - ps) * (key * 3 + op)
        k = slot[key]
        if k < 0:  # a new call (slots in first-seen order)
            k = m
            slot[key] = m
            keys[m] = key
            flags[m] = 0 if any_lowrank else 1  # without PowerSGD rows every call is plain
            m += 1
        if any_lowrank:
            flags[k] |= 1 + int(lowrank[r])
        local[r - lo] = k
    for i in range(m):  # slots by key (insertion sort: a strategy has a few dozen calls)
        q = i
        while q > 0 and keys[order[q - 1]] > keys[i]:
            order[q] = order[q - 1]
            q -= 1
        order[q] = i
    for i in range(m):
        k = order[i]
        position[k] = i
        call_key[i] = keys[k]
        call_flags[i] = flags[k]
        slot[keys[k]] = -1
    for r in range(lo, hi):
        local[r - lo] = position[local[r - lo]]
    return m


@numba.njit(cache=True, nogil=True)
def _most_rows(offsets: np.ndarray) -> int:  # pragma: no cover - compiled
    most = 0
    for s in range(len(offsets) - 1):
        most = max(most, offsets[s + 1] - offsets[s])
    return most


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
    most = _most_rows(offsets)
    rank_index, rspan, width, any_lowrank, slot = _key_space(is_ps, group, rank, lowrank, most)
    scratch = np.zeros((4, most + 1), dtype=np.int64)
    local = np.empty(most, dtype=np.int64)
    call_key = np.empty(most, dtype=np.int64)
    call_flags = np.empty(most, dtype=np.int64)
    call = np.empty(t, dtype=np.int64)
    call_strategy = np.empty(t, dtype=np.int64)
    call_group = np.empty(t, dtype=np.int64)
    call_op = np.empty(t, dtype=np.int64)
    call_repeats = np.empty(t)
    g = 0
    for s in range(n):
        lo, hi = offsets[s], offsets[s + 1]
        m = _calls_of(
            lo, hi, variable, is_ps, group, algorithm, compressor, rank, lowrank, sparse,
            rank_index, rspan, any_lowrank, slot, scratch, local, call_key, call_flags,
        )  # fmt: skip
        for r in range(lo, hi):
            call[r] = -1 if is_ps[r] else g + local[r - lo]
        for i in range(m):
            call_strategy[g + i] = s
            call_group[g + i] = call_key[i] // width
            call_op[g + i] = call_key[i] % 3
            call_repeats[g + i] = _repeats(call_key[i] % 3, call_flags[i], powersgd_allreduces)
        g += m
    return call, call_strategy[:g].copy(), call_group[:g].copy(), call_op[:g].copy(), call_repeats[:g].copy()


@numba.njit(cache=True, nogil=True)
def _repeats(op: int, flags: int, powersgd_allreduces: float) -> float:  # pragma: no cover - compiled
    """How many times a call runs its op: 1 for an all-gather; else 1 for an uncompressed part
    (flags bit 1) plus ``powersgd_allreduces`` for a PowerSGD part (bit 2)."""
    if op == _ALLGATHER:
        return 1.0
    return (flags & 1) + powersgd_allreduces * (flags >> 1)


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
    server: np.ndarray,
    local_replication: np.ndarray,
    algorithm: np.ndarray,
    is_ps: np.ndarray,
    sent_bytes: np.ndarray,
    numbered: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    unnumbered: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sparse: np.ndarray,
    var_level: np.ndarray,
    level_ready: np.ndarray,
    code_transfer: np.ndarray,
    code_const: np.ndarray,
    ps_const: np.ndarray,
    lr_const: np.ndarray,
    call_const: np.ndarray,
    unit_overhead: float,
    powersgd_allreduces: float,
    j: int,
    combine_sum: bool,
    bucket: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Eq. 2/3 per row, summed; T_sync^PS, T_sync^CC and the overlap model's E per strategy.

    Rows of strategy s are ``offsets[s]:offsets[s+1]``. Its collective calls: ``numbered`` =
    (call, call_strategy, call_op, call_repeats), the batch's, numbered strategy by strategy as
    ``make_batch`` does (``call_strategy`` ascending); or, when ``numbered[0]`` is empty, from
    ``unnumbered`` = (group, compressor, rank, lowrank) by ``_calls_of`` (``number_calls``'
    numbering). A row's code is 2·server + I_p (PS) or 2·J + op (collective; op from ``sparse``
    and ``algorithm``); its seconds are sent_bytes·code_transfer[code] + const, const =
    ``ps_const[variable]`` (+ ``lr_const[variable]`` with I_p) for a PS row when ``ps_const`` is
    not empty (a measured α per PS round, and per call inside a node), else ``code_const[code]``.
    A call takes its rows' seconds + call_const[op]·repeats (+ ``unit_overhead``). ``var_level`` is each variable's index in ``level_ready`` (ascending
    ready times, ``overlap``); ``bucket`` False skips E (``overlap='full'``). ``combine_sum``:
    one channel (CostParams.combine 'sum'), else a collective channel and one per server.

    The row loop has no branch on is_ps (PS and collective rows alternate at random): a row adds
    into bin ``server`` or J + its call's index in the strategy, and a PS row's half-time and level
    are appended to a buffer that the channel pass reads.

    Returns server_time (N, J), call_time (G,), t_ps, t_cc, end (N,) (end 0 without ``bucket``).
    """
    call, call_strategy, call_op, call_repeats = numbered
    group, compressor, rank, lowrank = unnumbered
    has_calls = len(call) > 0
    t = len(variable)
    n = len(offsets) - 1
    nl = len(level_ready)
    by_alpha = len(ps_const) > 0
    most = _most_rows(offsets)
    # numbering scratch (``_calls_of``), used without ``numbered``
    rank_index, rspan, _, any_lowrank, slot = _key_space(
        is_ps[:0] if has_calls else is_ps, group, rank, lowrank, most
    )
    scratch = np.zeros((4, most + 1), dtype=np.int64)
    local = np.zeros(most, dtype=np.int64)  # each row's call among the strategy's
    call_key = np.empty(most, dtype=np.int64)
    call_flags = np.empty(most, dtype=np.int64)
    # one strategy's bins (servers, then its calls) and PS rows (half their seconds: push; pull)
    acc = np.zeros(j + most)
    top_level = np.full(j + most, -1, dtype=np.int64)
    ps_half = np.empty(most)
    ps_level = np.empty(most, dtype=np.int64)
    ps_channel = np.empty(most, dtype=np.int64)
    op_of = np.empty(most, dtype=np.int64)  # the strategy's calls: op and repeats
    repeats_of = np.empty(most)
    server_time = np.zeros((n, j))
    call_time = np.zeros(len(call_op) if has_calls else t)
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
        lo, hi = offsets[s], offsets[s + 1]
        if has_calls:
            c1 = c0
            while c1 < len(call_strategy) and call_strategy[c1] == s:
                op_of[c1 - c0] = call_op[c1]
                repeats_of[c1 - c0] = call_repeats[c1]
                c1 += 1
            for r in range(lo, hi):
                local[r - lo] = max(call[r] - c0, 0)
        else:
            m = _calls_of(
                lo, hi, variable, is_ps, group, algorithm, compressor, rank, lowrank, sparse,
                rank_index, rspan, any_lowrank, slot, scratch, local, call_key, call_flags,
            )  # fmt: skip
            for i in range(m):
                op_of[i] = call_key[i] % 3
                repeats_of[i] = _repeats(op_of[i], call_flags[i], powersgd_allreduces)
            c1 = c0 + m
        m = 0
        for r in range(lo, hi):
            # selects by arithmetic on ps (0 or 1), not branches: PS and collective rows
            # alternate at random, and a mispredicted branch per row cost more than the row
            v = variable[r]
            ps = int(is_ps[r])
            srv = int(server[r])
            a = int(algorithm[r])
            op = a + int(sparse[v]) * (_ALLGATHER - a)
            code = ps * (2 * srv + int(local_replication[r])) + (1 - ps) * (2 * j + op)
            const = code_const[code]
            if by_alpha and ps:
                const = ps_const[v] + lr_const[v] * local_replication[r]
            seconds = sent_bytes[r] * code_transfer[code] + const
            b = ps * srv + (1 - ps) * (j + local[r - lo])
            acc[b] += seconds
            level = var_level[v]
            top_level[b] = max(top_level[b], level)
            ps_half[m] = seconds / 2
            ps_level[m] = level
            ps_channel[m] = 1 + srv
            m += ps
        busiest = 0.0
        for q in range(j):
            server_time[s, q] = acc[q]
            busiest = max(busiest, acc[q])
        t_ps[s] = busiest
        cc = 0.0
        for c in range(c0, c1):
            ct = acc[j + c - c0] + call_const[op_of[c - c0]] * repeats_of[c - c0]
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
    return server_time, call_time if has_calls else call_time[:c0].copy(), t_ps, t_cc, end
