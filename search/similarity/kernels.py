"""Compiled loops of the factor similarity (numba): codes from choice arrays, and match counts.

``factor_codes`` is ``FactorSimilarity.embed_arrays``: one pass over the shard rows, the seven
codes of each (strategy, variable) segment. ``column_ids`` and ``match_counts`` are
``FactorSimilarity.rows``: greedy selection (Eq. 11) asks for sim(i, every candidate) one row at
a time, a few dozen rows of a few thousand candidates, each a count of equal codes over V x 7
columns. ``column_ids`` first replaces each column's 64-bit codes by dense per-column ids (equal
ids exactly where the codes are equal, within that column), one byte when the column has at most
256 distinct codes, else two, stored column by column; ``match_counts`` then counts one row's
matches in a single pass over those ids, without temporaries.

Why compiled (issue 16): on BERT-large / B7 (398 variables, 2,786 columns, 2,500 qualified
candidates) the numpy versions spent ~0.2 s on the codes (a dozen passes over ~2.5 M rows) and
~0.4 s on 54 similarity rows (each a compare of 2,500 x 2,786 uint64 codes, 56 MB read, into a
temporary). With per-column ids a row reads ~7 MB of bytes that stay in the cache.

Compile cost and cache: as ``search.samplers.kernels`` (``cache=True``; compiled on first use in a
process, or loaded from numba's cache). A round with the factor similarity calls each of these,
so ``search.samplers.warm``'s round compiles them for the service's forked jobs.
"""

from __future__ import annotations

import numba
import numpy as np

#: Fibonacci hashing multiplier of ``column_ids``' table (codes' low bits may be poorly mixed).
_MIX = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, nogil=True)
def _segment(
    r: int,
    end: int,
    power: np.ndarray,
    shard_index: np.ndarray,
    is_ps: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    group: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    algorithm: np.ndarray,
) -> tuple[
    int, np.uint64, np.uint64, np.uint64, np.uint64, np.uint64, np.uint64, np.uint64
]:  # pragma: no cover
    """The seven codes of the segment starting at row r (it runs until the next row with
    ``shard_index`` 0, or ``end``), and the row after it. See ``factor_codes``."""
    one = np.uint64(1)
    two = np.uint64(2)
    k0 = np.uint64(np.int64(axis[r]) * 65536 + np.int64(num_shards[r]))
    k1 = k2 = k3 = k4 = k5 = k6 = np.uint64(0)
    while True:
        w = power[shard_index[r]]
        if is_ps[r]:
            k1 += two * w
            k2 += np.uint64(np.int64(server[r]) + 2) * w
            k3 += np.uint64(np.int64(local_replication[r]) + 2) * w
            k4 += w
            k5 += w
            k6 += w
        else:
            k1 += one * w
            k2 += w
            k3 += w
            k4 += np.uint64(np.int64(group[r]) + 2) * w
            k5 += np.uint64(np.int64(compressor[r]) * 65536 + np.int64(rank[r]) + 2) * w
            k6 += np.uint64(np.int64(algorithm[r]) + 2) * w
        r += 1
        if r >= end or shard_index[r] == 0:
            return r, k0, k1, k2, k3, k4, k5, k6


@numba.njit(cache=True, nogil=True)
def factor_codes(
    power: np.ndarray,
    out: np.ndarray,
    shard_index: np.ndarray,
    is_ps: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    group: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    algorithm: np.ndarray,
) -> int:  # pragma: no cover - compiled; tests/search/test_similarity_factor.py checks it against numpy
    """The factor codes of every (strategy, variable) segment into ``out`` (V x 7, N) uint64.

    A segment starts at each row with ``shard_index`` 0; segment t is variable t mod V of strategy
    t div V, and its codes go to rows 7 (t mod V) .. 7 (t mod V) + 6 of column t div V. Code 0 is
    axis x 65536 + shard count; codes 1-6 are sum over the segment's rows of (value + 1) x
    ``power[shard_index]`` mod 2^64, ``power[s]`` = P^(s + 1), with value: 1 on PS rows else 0
    (kind); server + 1, local replication + 1 on PS rows, else 0; group + 1, compressor x 65536 +
    rank + 1, algorithm + 1 on collective rows, else 0. Returns the number of segments (past N x V:
    nothing past the end was written, the caller raises).
    """
    d, strategies = out.shape
    variables = d // 7
    n = len(shard_index)
    seg = 0
    r = 0
    while r < n:
        r, k0, k1, k2, k3, k4, k5, k6 = _segment(
            r,
            n,
            power,
            shard_index,
            is_ps,
            axis,
            num_shards,
            server,
            local_replication,
            group,
            compressor,
            rank,
            algorithm,
        )
        s = seg // variables
        if s < strategies:
            f = (seg - s * variables) * 7
            out[f, s] = k0
            out[f + 1, s] = k1
            out[f + 2, s] = k2
            out[f + 3, s] = k3
            out[f + 4, s] = k4
            out[f + 5, s] = k5
            out[f + 6, s] = k6
        seg += 1
    return seg


@numba.njit(cache=True, nogil=True)
def _table(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """``_column_ids``' open-addressing table for n codes: 2^k >= 2n slots (keys, ids, stamps)
    and a buffer of n ids."""
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    size = 1 << bits
    return (
        np.empty(size, dtype=np.uint64),
        np.empty(size, dtype=np.int64),
        np.full(size, -1, dtype=np.int64),
        np.empty(n, dtype=np.int64),
    )


@numba.njit(cache=True, nogil=True)
def _column_ids(
    column: np.ndarray,
    c: int,
    keys: np.ndarray,
    vals: np.ndarray,
    stamp: np.ndarray,
    ids: np.ndarray,
    narrow: np.ndarray,
    wide: np.ndarray,
    which: np.ndarray,
    used: np.ndarray,
) -> None:  # pragma: no cover
    """Column c's ids into the next row of ``narrow`` or ``wide`` (see ``column_ids``); ``used``
    holds the rows used of each and is advanced."""
    size = len(keys)
    bits = 0
    while (1 << bits) < size:
        bits += 1
    mask = size - 1
    shift = np.uint64(64 - bits)
    distinct = 0
    for j in range(len(column)):
        key = column[j]
        h = np.int64((key * _MIX) >> shift)
        while True:
            if stamp[h] != c:
                stamp[h] = c
                keys[h] = key
                vals[h] = distinct
                ids[j] = distinct
                distinct += 1
                break
            if keys[h] == key:
                ids[j] = vals[h]
                break
            h = (h + 1) & mask
    if distinct <= 1:
        which[c] = 0
    elif distinct <= 256:
        which[c] = 1
        row = used[0]
        for j in range(len(column)):
            narrow[row, j] = ids[j]
        used[0] += 1
    else:
        which[c] = 2
        row = used[1]
        for j in range(len(column)):
            wide[row, j] = ids[j]
        used[1] += 1


@numba.njit(cache=True, nogil=True)
def column_ids(
    codes: np.ndarray, narrow: np.ndarray, wide: np.ndarray, which: np.ndarray
) -> tuple[int, int]:  # pragma: no cover - compiled; tests/search/test_similarity_factor.py checks it
    """Dense per-column ids of ``codes`` (D, N) uint64 (column c is row c): equal ids exactly where
    the column's codes are equal.

    Column c's ids (0, 1, ... in order of first appearance) go to the next row of ``narrow``
    (D, N) uint8 when it has 2-256 distinct codes, of ``wide`` (D, N) uint16 or uint32 when more;
    a constant column (one code) is stored nowhere. ``which[c]`` is 0 (constant), 1 (narrow) or 2
    (wide). Returns the rows used of ``narrow`` and ``wide``. An open-addressing table of 2^k >= 2N
    slots, reset per column by a stamp, maps a code to its id.
    """
    d, n = codes.shape
    keys, vals, stamp, ids = _table(n)
    used = np.zeros(2, dtype=np.int64)
    for c in range(d):
        _column_ids(codes[c], c, keys, vals, stamp, ids, narrow, wide, which, used)
    return used[0], used[1]


@numba.njit(cache=True, nogil=True)
def factor_ids(
    power: np.ndarray,
    index: np.ndarray,
    offsets: np.ndarray,
    variables: int,
    block: int,
    narrow: np.ndarray,
    wide: np.ndarray,
    which: np.ndarray,
    shard_index: np.ndarray,
    is_ps: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    group: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    algorithm: np.ndarray,
) -> tuple[int, int]:  # pragma: no cover - compiled; tests/search/test_similarity_factor.py checks it
    """``column_ids`` of ``factor_codes`` of strategies ``index`` (rows offsets[i] .. offsets[i+1]
    of strategy i), without the (V x 7, N) codes: ``block`` variables at a time, their codes into
    a (block x 7, N) buffer that stays in the cache, then their columns' ids. Returns the rows used
    of ``narrow`` and ``wide``, or (-1, -1) when a strategy's rows are not ``variables`` segments.
    """
    n = len(index)
    keys, vals, stamp, ids = _table(n)
    used = np.zeros(2, dtype=np.int64)
    codes = np.empty((block * 7, n), dtype=np.uint64)
    cursor = np.empty(n, dtype=np.int64)
    for t in range(n):
        cursor[t] = offsets[index[t]]
    for v0 in range(0, variables, block):
        width = min(block, variables - v0)
        for t in range(n):
            r = cursor[t]
            end = offsets[index[t] + 1]
            for v in range(width):
                if r >= end or shard_index[r] != 0:
                    return -1, -1
                r, k0, k1, k2, k3, k4, k5, k6 = _segment(
                    r,
                    end,
                    power,
                    shard_index,
                    is_ps,
                    axis,
                    num_shards,
                    server,
                    local_replication,
                    group,
                    compressor,
                    rank,
                    algorithm,
                )
                f = v * 7
                codes[f, t] = k0
                codes[f + 1, t] = k1
                codes[f + 2, t] = k2
                codes[f + 3, t] = k3
                codes[f + 4, t] = k4
                codes[f + 5, t] = k5
                codes[f + 6, t] = k6
            cursor[t] = r
        for f in range(width * 7):
            _column_ids(codes[f], v0 * 7 + f, keys, vals, stamp, ids, narrow, wide, which, used)
    for t in range(n):
        if cursor[t] != offsets[index[t] + 1]:
            return -1, -1
    return used[0], used[1]


@numba.njit(cache=True, nogil=True)
def match_counts(
    narrow: np.ndarray, wide: np.ndarray, i: int, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tests/search/test_similarity_factor.py checks it
    """``out[j]`` = the columns of ``narrow`` and ``wide`` (D, N) where candidate j's id equals i's."""
    out[:] = 0
    for c in range(narrow.shape[0]):
        col = narrow[c]
        v = col[i]
        for j in range(len(out)):
            out[j] += col[j] == v
    for c in range(wide.shape[0]):
        col2 = wide[c]
        v2 = col2[i]
        for j in range(len(out)):
            out[j] += col2[j] == v2
