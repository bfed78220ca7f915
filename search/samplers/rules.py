"""The array sampler's per-strategy rules, compiled (numba): Algorithm 1, Algorithm 2, the memory
rule and the content hash, as ``search.samplers.kernels.draw_rows`` runs them strategy by strategy.

``size_order`` + ``place`` is Algorithm 1 (c_lb, ``search.constraints.load_balance``), ``merge_groups``
Algorithm 2 (c_am, ``search.constraints.adjacent_merge``), ``fits`` the rule of
``MemoryModel.check`` on a strategy's byte sums, ``identity_one`` / ``identity_by_entry`` the content
hash of ``ChoiceArrays.identity``. ``load_balance_rows``, ``adjacent_merge_rows``, ``fits_rows`` and
``identity_rows`` run the same functions over given rows: the tests check them against the scalar
references (tests/search/test_round.py), and ``identity_rows`` hashes arrays the sampler did not draw.
Numerics, same-draws guarantees and compile cost: ``search.samplers.kernels``.
"""

from __future__ import annotations

import math

import numba
import numpy as np


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
