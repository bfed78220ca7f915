"""Compiled loops of the array sampler (numba): turning a chunk's uniforms into choice rows.

``ArraySampler._draw_chunk`` draws its uniforms with numpy (the stream: same calls, shapes and
order as before these kernels existed) and hands them to ``layouts`` (each variable's partition),
``prepass`` (the chunk's PS count, i.e. how many uniforms Algorithm 1 takes, and Algorithm 2's
running bytes) and ``draw_rows``: one pass over the chunk, strategy by strategy, that writes each
strategy's rows (PS or collective, replication, compressor and rank, algorithm), its servers
(``size_order`` + ``place``: Algorithm 1, c_lb), its groups (``merge_groups``: Algorithm 2, c_am),
checks its memory (``fits``) and hashes it (``identity_by_entry``), straight into the sample's kept
columns; a strategy that does not fit is written over by the next. ``load_balance_rows``,
``adjacent_merge_rows``, ``fits_rows`` and ``identity_rows`` run the same per-strategy functions
over given rows (the tests' entry points, and ``ChoiceArrays.identity`` of other arrays).

Why compiled, and why one pass (issue 16): a 10,000-strategy BERT-large round is ~10 M shard rows.
Algorithm 1 is sequential within a strategy (each shard's server depends on the loads the larger
shards left); in numpy it ran in lockstep over a chunk's strategies and cost ~0.85 s of a ~2.5 s
round. Separate kernels per rule then made ~60 MB of temporaries per chunk and re-read every row
per rule; one pass per strategy keeps its ~1,000 rows in cache from the draw to the hash, and
writes each row once. Where PS-or-collective (a coin flip per row) picks a value, the code loads
first and then selects: a conditional load stays a branch, mispredicted half the time. Hot
indices are cast to unsigned: numba adds a negative-index wraparound to every signed one (with
them, ``draw_rows`` took ~37 ms a BERT-large chunk instead of ~30).

Same draws: every rule does the former numpy operations in the same order and precision (float32
uniforms against float32 thresholds, float64 where numpy promoted to float64, the same
left-to-right sums; Algorithm 2's cumulative bytes run over the whole chunk in reverse row order,
as numpy's one cumsum did), so the same seed gives the same strategies
(``tests/search/test_round.py`` pins digests of the numpy implementation's draws). The one
operation that can differ is ``exp`` in Algorithm 1: numba calls the C library's ``exp`` (as the
scalar reference ``search.constraints.load_balance`` does through ``math.exp``), while numpy's
vectorised ``exp`` differs from it in the last bit for a few per cent of arguments; a server can
differ only where a uniform falls within ~1e-16 of a cumulative-weight boundary. On
600-2,000-strategy draws of BERT-large/B7, NCF-sparse/A2, ResNet50/A2 (both priors, temperature
1, 0.3 and 0, constrained and random, with and without lossy compressors) and NCF-sparse/A2,
ResNet50/A2, BERT-base/B7 under tight memory (up to 4,099 strategies rejected), every column and
every content hash was equal to those of 43b47cb (the separate kernels).

Compile cost and cache: the kernels compile on first use in a process (~8 s of CPU for all of
them in a BERT-large round on this project's 2-core development VM, round_throughput-2026-11-27a)
and are cached on disk (``cache=True``): in ``NUMBA_CACHE_DIR`` when that is set, else next to
this file (``search/samplers/__pycache__``) when writable, else in numba's per-user cache
directory. A process that finds the cache loads the kernels in well under a second.
One file on purpose (~770 lines): numba's cache notices a change to a kernel's own source file
only, not to functions in other files that it compiled in, so a kernel split from the rules it
calls could run stale code from the cache after the rules change. ``draw_rows`` compiles once per
set of column types: ``ArraySampler`` keeps them the same for every ordinary space
(``search.samplers.warm`` compiles that set for the service's forked jobs).
``benchmarks/round_throughput.py`` prints numba's import time and the first (warm-up) round's CPU
time, which holds the compile or the cache load.
"""

from __future__ import annotations

import math

import numba
import numpy as np


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
    lay: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py
    """Each (strategy, variable)'s layout, written into ``lay`` (b x v,), and the strategies' row
    offsets.

    Per variable: split with probability p_split[d] when it has a splittable axis, the axis
    uniformly among them (float32 product, as drawn), the shard count uniformly in 2..k_max
    (the float32 uniform times k_max - 1, in float64). ``uv`` (3, b, v) float32 uniforms.
    """
    b, v = uv.shape[1], uv.shape[2]
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
    return offsets


@numba.njit(cache=True, nogil=True)
def prepass(
    lay: np.ndarray,
    offsets: np.ndarray,
    v: int,
    lay_k: np.ndarray,
    lay_start: np.ndarray,
    p_ps: np.ndarray,
    u_ps: np.ndarray,
    msg: np.ndarray,
    merge_start: np.ndarray,
) -> int:  # pragma: no cover - compiled; tests/search/test_round.py
    """The chunk's PS rows (how many uniforms Algorithm 1 takes) and, per strategy, into
    ``merge_start``, Algorithm 2's running byte count where the strategy's collective shards start.

    Algorithm 2's cumulative bytes run over the whole chunk in reverse row order (strategy b-1's
    last row first), as the former numpy code's one cumsum did; ``merge_groups`` continues that
    sum strategy by strategy from these values, so its group boundaries are the same to the bit
    (with non-integer byte counts a sum from zero per strategy moved a boundary now and then).
    A row is PS when its float32 uniform is below the strategy's p_ps (``draw_rows``' rule).
    """
    b = len(offsets) - 1
    acc = 0.0
    n_ps = 0
    for dd in range(b):
        d = b - 1 - dd
        merge_start[d] = acc
        p = p_ps[d]
        r = offsets[d + 1] - 1
        for ii in range(v):
            li = np.uint64(lay[np.uint64(d * v + v - 1 - ii)])  # unsigned: no wraparound code
            k = lay_k[li]
            e1 = lay_start[li] + k - 1  # the layout's last shard
            for qq in range(k):
                # PS or not is a coin flip: load first, then select (a conditional load
                # stays a branch, mispredicted half the time)
                ps = u_ps[np.uint64(r - qq)] < p
                size = msg[np.uint64(e1 - qq)]
                n_ps += ps
                acc += 0.0 if ps else size
            r -= k
    return n_ps


@numba.njit(cache=True, nogil=True)
def size_order(
    ps_e: np.ndarray, m: int, brank: np.ndarray, count: np.ndarray, order: np.ndarray
) -> None:  # pragma: no cover - compiled; tests/search/test_round.py
    """Positions 0..m-1 of a strategy's PS shards (entries ``ps_e``, in row order) by size rank
    ``brank`` ascending (size descending), ties in row order, into ``order[:m]``.

    A counting sort when the ranks are few against the shards (``count``: n_rank + 1 slots;
    BERT-large has 136 ranks), else a stable sort; both give the same order.
    """
    n_rank = len(count) - 1
    if n_rank <= 4 * m:
        count[:] = 0
        for x in range(m):  # unsigned indices: no negative-index wraparound on each gather
            count[np.uint64(brank[np.uint64(ps_e[x])] + 1)] += 1
        for q in range(n_rank):
            count[q + 1] += count[q]
        for x in range(m):
            k = np.uint64(brank[np.uint64(ps_e[x])])
            order[np.uint64(count[k])] = x
            count[k] += 1
    else:
        keys = np.empty(m, dtype=np.int64)
        for x in range(m):
            keys[x] = brank[ps_e[x]]
        order[:m] = np.argsort(keys, kind="mergesort")


@numba.njit(cache=True, nogil=True)
def place(
    ps_e: np.ndarray,
    order: np.ndarray,
    m: int,
    msg: np.ndarray,
    u: np.ndarray,
    used: int,
    share: np.ndarray,
    temperature: float,
    loads: np.ndarray,
    w: np.ndarray,
    picks: np.ndarray,
) -> None:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 1
    """Algorithm 1 for one strategy: the server of each of its m PS shards into ``picks`` (by
    position in row order), visiting them in ``order`` (size descending) and taking the uniforms
    ``u[used:used + m]`` in that order.

    Sizes are in units of temperature x the strategy's mean PS shard (summed in row order), so the
    logits need no division; ``temperature`` 0 is the argmax rule (ties uniform).
    """
    j = len(share)
    total_msg = 0.0
    for y in range(m):
        total_msg += msg[np.uint64(ps_e[y])]
    unit = total_msg / m * temperature
    inv = 1.0 / unit if unit > 0 else 0.0
    for q in range(j):
        loads[q] = 0.0
    total = 0.0
    for t in range(m):
        x = np.uint64(order[t])  # unsigned indices: no negative-index wraparound on each gather
        size = msg[np.uint64(ps_e[x])]
        s = size * inv if temperature > 0 else size
        top = -np.inf
        for q in range(j):
            lag = share[q] * total - loads[q]  # how far server q lags its bandwidth share
            w[q] = lag
            top = lag if lag > top else top  # a select (no NaN here): which server leads is random
        if temperature > 0:
            for q in range(j):
                w[q] = math.exp(w[q] - top)
        else:
            tol = top - 1e-9 * max(1.0, abs(top))
            for q in range(j):
                w[q] = 1.0 if w[q] >= tol else 0.0
        for q in range(1, j):
            w[q] = w[q - 1] + w[q]
        target = u[np.uint64(used + t)] * w[j - 1]
        # inverse CDF: servers whose cumulative weight is <= target are passed (the last takes
        # what rounding leaves)
        pick = np.uint64(0)
        for q in range(j - 1):
            pick += np.uint64(w[q] <= target)
        picks[x] = pick
        loads[pick] += s
        total += s


@numba.njit(cache=True, nogil=True)
def merge_groups(
    cc_bytes: np.ndarray, n: int, start: float, g: int, cum: np.ndarray, groups: np.ndarray
) -> None:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 2
    """Algorithm 2 for one strategy: the merge group of each of its n collective shards, given in
    back-propagation order (``cc_bytes[:n]``), into ``groups[:n]``.

    A group closes at the first shard where the cumulative bytes reach the group's start plus
    total / N. The cumulative bytes continue from ``start`` (``prepass``), in the order given.
    """
    cum[0] = start
    for x in range(n):
        cum[x + 1] = cum[x] + cc_bytes[x]
    avg = (cum[n] - cum[0]) / max(g, 1)
    group = 0
    cur = 0
    nxt_mark = -1  # position of the next boundary (a new group starts there)
    boundaries = 0
    pos = 0
    while pos < n:
        if nxt_mark < 0 and boundaries < g - 1:
            # first position >= cur + 1 whose cumulative bytes reach cum[cur] + avg
            target = cum[cur] + avg
            nxt = cur + 1
            while nxt < n and cum[nxt] < target:
                nxt += 1
            nxt_mark = nxt if nxt < n else n
        if pos == nxt_mark:
            group += 1
            boundaries += 1
            cur = pos
            nxt_mark = -1
            continue
        groups[pos] = group
        pos += 1


@numba.njit(cache=True, nogil=True)
def fits_one(
    lo: int,
    hi: int,
    entry: np.ndarray,
    is_ps: np.ndarray,
    server: np.ndarray,
    compressor: np.ndarray,
    param: np.ndarray,
    model_bytes: float,
    state_factor: float,
    headroom: float,
    cap: np.ndarray,
    hosted: np.ndarray,
) -> bool:  # pragma: no cover - compiled; tests/search/test_round.py
    """Rows lo..hi-1 (one strategy) fit in device and PS-host memory (``MemoryModel.check``'s rule).

    Device: optimizer state of the collective shards (the model's bytes less the PS bytes) and
    PowerSGD's buffers within ``headroom``; per PS server: its shards x (2 + state factor) within
    its capacity. Byte counts are integers, exact in float64 whatever the summation order.
    """
    for q in range(len(cap)):
        hosted[q] = 0.0
    lowrank = 0.0
    for r in range(lo, hi):
        if is_ps[r]:
            hosted[server[r]] += param[entry[r]]
        elif compressor[r] == 2:
            lowrank += param[entry[r]]
    return fits(hosted, lowrank, model_bytes, state_factor, headroom, cap)


@numba.njit(cache=True, nogil=True)
def fits(
    hosted: np.ndarray,
    lowrank: float,
    model_bytes: float,
    state_factor: float,
    headroom: float,
    cap: np.ndarray,
) -> bool:  # pragma: no cover - compiled; tests/search/test_round.py
    """The memory rule on a strategy's sums: PS bytes per server ``hosted``, PowerSGD bytes ``lowrank``."""
    ps_bytes = 0.0
    ok = True
    for q in range(len(cap)):
        ps_bytes += hosted[q]
        if hosted[q] * (2.0 + state_factor) > cap[q]:
            ok = False
    return ok and state_factor * (model_bytes - ps_bytes) + lowrank <= headroom


_M0 = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xC2B2AE3D27D4EB4F)
_M2 = np.uint64(0x165667B19E3779F9)
_M3 = np.uint64(0xD6E8FEB86659FD93)
_FIN = np.uint64(0xBF58476D1CE4E5B9)


@numba.njit(cache=True, nogil=True)
def identity_one(
    lo: int,
    hi: int,
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
) -> np.uint64:  # pragma: no cover - compiled; tests/search/test_round.py checks it against numpy
    """``ChoiceArrays.identity`` of rows lo..hi-1: the wrapping sum over the rows of a mixed row hash.

    Row hash: x = 0, then for the 11 choice columns in order (``arrays.COLUMNS``) x = x * MIX[i % 4]
    + value (as uint64: -1 wraps to 2^64 - 1, whatever the column's integer width), then
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9, x ^= x >> 29. All arithmetic mod 2^64.
    """
    s31 = np.uint64(31)
    s29 = np.uint64(29)
    acc = np.uint64(0)
    for i in range(hi - lo):
        r = np.uint64(lo + i)  # unsigned: no negative-index wraparound per column read
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
    return acc


_MASK = (1 << 64) - 1
#: ``identity_one``'s row value before mixing is linear in the columns (mod 2^64): column i is
#: multiplied by the MIX factors of the steps after it. ``_P[i]``: that product.
_PRODUCTS = [1]
for _m in (0x165667B19E3779F9, 0xC2B2AE3D27D4EB4F, 0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93) * 3:
    if len(_PRODUCTS) == 11:
        break
    _PRODUCTS.append(_PRODUCTS[-1] * _m & _MASK)
_P = tuple(reversed(_PRODUCTS))  # _P[10] = 1, _P[9] = MIX[2], _P[8] = MIX[1] * MIX[2], ...
_P4, _P5, _P6, _P7, _P8, _P9 = (np.uint64(p) for p in _P[4:10])


def identity_heads(variable: np.ndarray, axis: np.ndarray, k: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Per shard entry, the first four columns' part of ``identity_one``'s row value (variable,
    axis, shards and shard index are the entry's): sum of column i x ``_P[i]``, mod 2^64."""
    out = np.zeros(len(variable), dtype=np.uint64)
    for i, col in enumerate((variable, axis, k, index)):
        out += np.asarray(col).astype(np.uint64) * np.uint64(_P[i])  # wraps mod 2^64, as the kernel
    return out


@numba.njit(cache=True, nogil=True)
def identity_by_entry(
    lo: int,
    hi: int,
    entry: np.ndarray,
    heads: np.ndarray,
    c4: np.ndarray,
    c5: np.ndarray,
    c6: np.ndarray,
    c7: np.ndarray,
    c8: np.ndarray,
    c9: np.ndarray,
    c10: np.ndarray,
) -> np.uint64:  # pragma: no cover - compiled; tests/search/test_round.py checks it against numpy
    """``identity_one`` of rows lo..hi-1 whose first four columns are their entry's (sampler rows):
    the same row value, as ``heads[entry]`` plus the other columns times their products
    (independent multiplies instead of a chain of ten), then the same mixing."""
    s31 = np.uint64(31)
    s29 = np.uint64(29)
    acc = np.uint64(0)
    for i in range(hi - lo):
        r = np.uint64(lo + i)
        x = heads[np.uint64(entry[r])]
        x += np.uint64(c4[r]) * _P4 + np.uint64(c5[r]) * _P5 + np.uint64(c6[r]) * _P6
        x += np.uint64(c7[r]) * _P7 + np.uint64(c8[r]) * _P8 + np.uint64(c9[r]) * _P9
        x += np.uint64(c10[r])
        x ^= x >> s31
        x *= _FIN
        x ^= x >> s29
        acc += x
    return acc


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
    """``ChoiceArrays.identity``: ``identity_one`` of every strategy."""
    b = len(offsets) - 1
    out = np.zeros(b, dtype=np.uint64)
    for d in range(b):
        out[d] = identity_one(offsets[d], offsets[d + 1], c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10)
    return out


@numba.njit(cache=True, nogil=True)
def draw_rows(
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
    u_groups: np.ndarray,
    max_groups: int,
    balance: bool,
    u_server: np.ndarray,
    share: np.ndarray,
    temperature: float,
    msg: np.ndarray,
    brank: np.ndarray,
    merge: bool,
    merge_start: np.ndarray,
    u_group: np.ndarray,
    check: bool,
    param: np.ndarray,
    model_bytes: float,
    state_factor: float,
    headroom: float,
    cap: np.ndarray,
    heads: np.ndarray,
    cols: tuple[np.ndarray, ...],
    out_offsets: np.ndarray,
    out_ids: np.ndarray,
    n0: int,
    t0: int,
) -> tuple[int, int, int]:  # pragma: no cover - compiled; tests/search/test_round.py
    """A chunk's strategies, one after the other, written straight into the sample's columns.

    Per strategy: its rows (variable, layout, PS or collective, replication, compressor and rank,
    algorithm; ``ArraySampler._draw_chunk``'s factor-by-factor rules), its merge-group count, the
    servers of its PS rows (Algorithm 1, ``place``, when ``balance``; else uniform from
    ``u_server``), the groups of its collective rows (Algorithm 2, ``merge_groups``, when
    ``merge``; else uniform from ``u_group``), the memory check (``fits``, when ``check``) and
    its content hash (``identity_by_entry``). A strategy that does not fit is not kept: the next one
    is written over its rows.

    ``cols``: the 12 output columns (``arrays.COLUMNS`` then ``entry``); the chunk's kept
    strategies go to strategies n0.. and rows t0.. (``out_offsets``, ``out_ids``), which the
    caller sized for the whole chunk. ``kinds`` (3,): the column of kw holding the none / fp16 /
    PowerSGD weight, -1 when that kind is not on offer; all -1 (or ``u_kind`` empty) draws no
    compressor. ``frac`` (b, A-1) float32 cumulative algorithm weights (empty: the single
    algorithm ``algorithms[0]``). Comparisons are the former numpy rules' own: float32 uniforms
    against float32 thresholds, or, where a float32 uniform meets float64 weights or an integer
    count, in float64. Uniforms are indexed by the row's position in the chunk (Algorithm 1's:
    strategy after strategy, each in its size order).

    Returns the strategies and rows written so far (n, t) and the strategies that did not fit.
    """
    variable, axis, num_shards, shard_index, is_ps, server, lr, group, algorithm, compressor, rank, entry = (
        cols
    )
    b = len(offsets) - 1
    j = len(share)
    most = 0
    for d in range(b):
        most = max(most, offsets[d + 1] - offsets[d])
    ps_e = np.empty(most, dtype=np.int64)  # the strategy's PS shards, in row order: entry, row
    ps_x = np.empty(most, dtype=np.int64)
    cc_x = np.empty(most, dtype=np.int64)  # its collective rows, in row order
    cc_bytes = np.empty(most)
    order = np.empty(most, dtype=np.int64)
    picks = np.empty(most, dtype=np.int64)
    cum = np.empty(most + 1)
    n_rank = 0
    for e in range(len(brank)):
        n_rank = max(n_rank, brank[e] + 1)
    count = np.zeros(n_rank + 1, dtype=np.int64)
    loads = np.zeros(j)
    w = np.empty(j)
    hosted = np.zeros(j)
    squeeze = len(u_kind) > 0
    n_frac = frac.shape[1]
    n_r = len(ranks)
    n, t = n0, t0
    used = 0  # Algorithm 1's uniforms used so far
    rejected = 0
    for d in range(b):
        w_none = kw[d, kinds[0]] if squeeze and kinds[0] >= 0 else 0.0
        w_fp16 = kw[d, kinds[1]] if squeeze and kinds[1] >= 0 else 0.0
        w_psgd = kw[d, kinds[2]] if squeeze and kinds[2] >= 0 else 0.0
        r = offsets[d]  # row in the chunk (uniforms)
        x = t  # row in the output
        m = 0
        n_cc = 0
        lowrank = 0.0  # memory check: PowerSGD buffers, and each server's PS bytes (``fits``)
        for q in range(j):
            hosted[q] = 0.0
        # the strategy's and the layout's constants in locals: the output columns could alias
        # the inputs as far as the compiler knows, so it would reload them after every store
        p_d, p_rep = p_ps[d], p_replication[d]
        for i in range(v):
            lay_i = np.uint64(lay[np.uint64(d * v + i)])
            k = lay_k[lay_i]
            e0 = lay_start[lay_i]
            a_x = lay_axis[lay_i]
            for q in range(k):
                e = e0 + q
                # unsigned positions: numba adds a negative-index wraparound to every signed one
                xu, ru = np.uint64(x), np.uint64(r)
                variable[xu] = i
                axis[xu] = a_x
                num_shards[xu] = k
                shard_index[xu] = q
                entry[xu] = e
                ps = u_ps[ru] < p_d
                is_ps[xu] = ps
                lr[xu] = ps & (u_lr[ru] < p_rep)
                kind = 0
                rk = 0
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
                    if kind == 2:
                        pick = min(np.int64(np.float64(u_rank[r]) * np.float64(allowed)), allowed - 1)
                        seen = 0
                        for c in range(n_r):
                            if ranks[c] < min_side[e]:
                                if seen == pick:
                                    rk = ranks[c]
                                    break
                                seen += 1
                compressor[xu] = kind
                rank[xu] = rk
                if kind == 2:
                    lowrank += param[e]
                # PS or collective is a coin flip: loads first, then selects and unconditional
                # writes (a conditional load stays a branch, mispredicted half the time)
                alg = 0
                for c in range(n_frac):
                    alg += u_alg[ru] >= frac[d, c]
                a_id = algorithms[alg]
                algorithm[xu] = 0 if ps else a_id
                group[xu] = -1
                if balance:
                    server[xu] = 0 if ps else -1
                else:
                    srv = np.int64(u_server[ru] * j)
                    server[xu] = srv if ps else -1
                    size = param[e]
                    hosted[srv] += size if ps else 0.0
                mu, cu = np.uint64(m), np.uint64(n_cc)
                ps_e[mu] = e
                ps_x[mu] = x
                cc_x[cu] = x
                m += ps
                n_cc += not ps
                r += 1
                x += 1
        # merge groups N uniform in 1..max_groups(collective shards)
        g = 1 + np.int64(u_groups[d] * np.float64(max(1, min(max_groups, n_cc))))
        if balance and m > 0:
            size_order(ps_e, m, brank, count, order)
            place(ps_e, order, m, msg, u_server, used, share, temperature, loads, w, picks)
            used += m
            for y in range(m):
                pick = np.uint64(picks[y])
                server[np.uint64(ps_x[y])] = pick
                hosted[pick] += param[np.uint64(ps_e[y])]
        if n_cc > 0:
            if merge:
                for y in range(n_cc):  # back-propagation order
                    cc_bytes[y] = msg[np.uint64(entry[np.uint64(cc_x[n_cc - 1 - y])])]
                merge_groups(cc_bytes, n_cc, merge_start[d], int(g), cum, picks)
                for y in range(n_cc):
                    group[np.uint64(cc_x[n_cc - 1 - y])] = picks[y]
            else:
                for y in range(n_cc):
                    group[cc_x[y]] = min(np.int64(u_group[offsets[d] + cc_x[y] - t] * np.float64(g)), g - 1)
        if check and not fits(hosted, lowrank, model_bytes, state_factor, headroom, cap):
            rejected += 1
            continue
        out_ids[n] = identity_by_entry(
            t, x, entry, heads, is_ps, server, lr, group, algorithm, compressor, rank
        )
        out_offsets[n + 1] = x
        n += 1
        t = x
    return n, t, rejected


@numba.njit(cache=True, nogil=True)
def load_balance_rows(
    offsets: np.ndarray,
    is_ps: np.ndarray,
    entry: np.ndarray,
    msg: np.ndarray,
    brank: np.ndarray,
    u: np.ndarray,
    share: np.ndarray,
    temperature: float,
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 1
    """Algorithm 1 (``size_order`` + ``place``, as ``draw_rows`` runs them) for every strategy of
    given rows: the server of each PS row (-1 on other rows); uniforms strategy after strategy."""
    n = len(is_ps)
    out = np.full(n, -1, dtype=np.int16)
    n_rank = 0
    for e in range(len(brank)):
        n_rank = max(n_rank, brank[e] + 1)
    count = np.zeros(n_rank + 1, dtype=np.int64)
    ps_e = np.empty(n, dtype=np.int64)
    ps_x = np.empty(n, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    picks = np.empty(n, dtype=np.int64)
    loads = np.zeros(len(share))
    w = np.empty(len(share))
    used = 0
    for d in range(len(offsets) - 1):
        m = 0
        for r in range(offsets[d], offsets[d + 1]):
            if is_ps[r]:
                ps_e[m] = entry[r]
                ps_x[m] = r
                m += 1
        if m == 0:
            continue
        size_order(ps_e, m, brank, count, order)
        place(ps_e, order, m, msg, u, used, share, temperature, loads, w, picks)
        used += m
        for y in range(m):
            out[ps_x[y]] = picks[y]
    return out


@numba.njit(cache=True, nogil=True)
def adjacent_merge_rows(
    offsets: np.ndarray, cc: np.ndarray, msg: np.ndarray, n_groups: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled; tests/search/test_round.py checks it against Algorithm 2
    """Algorithm 2 (``merge_groups``, as ``draw_rows`` runs it) for every strategy of given rows:
    the merge group of each collective row (-1 on PS rows), bytes ``msg`` per row; the cumulative
    bytes start where the later strategies' end (``prepass``)."""
    b = len(offsets) - 1
    n = len(cc)
    out = np.full(n, -1, dtype=np.int16)
    rows = np.empty(n, dtype=np.int64)
    cc_bytes = np.empty(n)
    groups = np.empty(n, dtype=np.int64)
    cum = np.empty(n + 1)
    start = np.zeros(b)
    acc = 0.0
    for d in range(b - 1, -1, -1):
        start[d] = acc
        for r in range(offsets[d + 1] - 1, offsets[d] - 1, -1):
            if cc[r]:
                acc += msg[r]
    for d in range(b):
        c = 0
        for r in range(offsets[d + 1] - 1, offsets[d] - 1, -1):
            if cc[r]:
                rows[c] = r
                cc_bytes[c] = msg[r]
                c += 1
        if c == 0:
            continue
        merge_groups(cc_bytes, c, start[d], n_groups[d], cum, groups)
        for y in range(c):
            out[rows[y]] = groups[y]
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
    """``fits_one`` of every strategy of given rows."""
    b = len(offsets) - 1
    ok = np.empty(b, dtype=np.bool_)
    hosted = np.zeros(len(cap))
    for d in range(b):
        ok[d] = fits_one(
            offsets[d],
            offsets[d + 1],
            entry,
            is_ps,
            server,
            compressor,
            param,
            model_bytes,
            state_factor,
            headroom,
            cap,
            hosted,
        )
    return ok
