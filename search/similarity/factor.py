"""Factor-count similarity (AutoSync supplementary §7, first approach): how many choices agree.

For each variable v and each synchronisation-affecting factor f, the two strategies agree when v's
value of f is the same in both. The factors, each a tuple over v's shards (so that a different
partition makes the per-shard factors differ too):

  partition (axis, shards) · synchroniser kind · PS server · local replication ·
  merge group · compressor · all-reduce algorithm

A factor that does not apply to a shard (a PS shard's compressor, a collective shard's server)
has the value "n/a", and two n/a values agree: both strategies made the same decision not to
use it. sim = agreeing (variable, factor) pairs / (variables x 7), in [0, 1]; sim(S, S) = 1.

``embed`` hashes the Strategy objects' tuples; ``embed_arrays`` computes codes of the same meaning
from a sampler's choice arrays (``search.samplers.arrays.ChoiceArrays``) without any object: per
(strategy, variable) and factor, a 64-bit polynomial hash of the per-shard values (the shard count
included). Equal choices give equal codes in both; different choices differ up to a 64-bit hash
collision, as with Python's tuple hash. So ``between`` gives the same similarities on either.

``rows`` (what greedy selection asks for) gives ``between``'s values from per-column ids of one
embedded set (``FactorRows``), and ``embed_arrays`` is one compiled pass over the rows: see
``search.similarity.kernels`` for why (issue 16, a 10,000-sample round's select stage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from search.similarity.base import Similarity
from simulator.spec import ModelSpec, PSSync, Strategy

if TYPE_CHECKING:
    from search.samplers.arrays import ChoiceArrays

FACTORS = ("partition", "kind", "server", "replication", "group", "compressor", "algorithm")
#: Odd 64-bit multiplier of the per-shard polynomial hash (any odd constant with mixed bits).
_P = np.uint64(0x9E3779B97F4A7C15)
#: Variables coded at a time by ``rows_arrays`` (7 x 16 uint64 codes of 2,500 candidates: 2.2 MB).
ROWS_BLOCK = 16
#: The choice-array columns ``kernels.factor_codes`` reads after ``shard_index``, in its order.
_CODED = (
    "is_ps",
    "axis",
    "num_shards",
    "server",
    "local_replication",
    "group",
    "compressor",
    "rank",
    "algorithm",
)


class FactorSimilarity(Similarity):
    """Fraction of (variable, factor) choices two strategies share."""

    name = "factor"

    def __init__(self, model: ModelSpec) -> None:
        self.variables = tuple(v.name for v in model.variables)

    def embed(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """Shape (N, V x 7): a hash code per (variable, factor); equal codes mean equal choices."""
        out = np.empty((len(strategies), len(self.variables) * len(FACTORS)), dtype=np.int64)
        for i, s in enumerate(strategies):
            row = []
            for name in self.variables:
                vs = s.by_variable[name]
                ps = [x if isinstance(x, PSSync) else None for x in vs.shards]
                cc = [None if isinstance(x, PSSync) else x for x in vs.shards]
                row += [
                    hash((vs.partition.axis, vs.partition.shards)),
                    hash(tuple(x.kind for x in vs.shards)),
                    hash(tuple(p.server if p else None for p in ps)),
                    hash(tuple(p.local_replication if p else None for p in ps)),
                    hash(tuple(c.group if c else None for c in cc)),
                    hash(tuple((c.compressor.kind, c.compressor.rank) if c else None for c in cc)),
                    hash(tuple(c.algorithm if c else None for c in cc)),
                ]
            out[i] = row
        return out

    def embed_arrays(self, arrays: ChoiceArrays) -> np.ndarray:
        """Shape (N, V x 7) uint64, column-major (a transposed C array), the codes of ``embed``'s
        meaning from choice arrays.

        Rows of each strategy must cover every variable in forward order (the samplers' and
        ``encode``'s layout), each variable's shards in shard order. One compiled pass over the
        rows (``kernels.factor_codes``); column-major because ``rows`` reads column by column.
        """
        from search.similarity.kernels import factor_codes  # numba: imported on first use

        v = len(self.variables)
        n = arrays.size
        out = np.empty((v * len(FACTORS), n), dtype=np.uint64)
        shard = np.asarray(arrays.shard_index)
        segments = 0
        if len(shard):
            power = np.cumprod(np.full(int(shard.max()) + 1, _P, dtype=np.uint64))  # P^(s+1)
            columns = (np.asarray(getattr(arrays, k)) for k in _CODED)
            segments = factor_codes(power, out, shard, *columns)
        if segments != n * v:
            raise ValueError(f"arrays: {segments} variable segments, expected {n} x {v}")
        return out.T

    def rows(self, embedded: np.ndarray) -> Callable[[int], np.ndarray]:
        """``between(embedded[i], embedded)`` by i, on per-column ids (see ``FactorRows``)."""
        return FactorRows.of_codes(embedded)

    def rows_arrays(self, arrays: ChoiceArrays, index: np.ndarray | None = None) -> FactorRows:
        """``rows(embed_arrays(arrays.take(index)))`` (all strategies when ``index`` is None) without
        the take or the (N, V x 7) codes: ``kernels.factor_ids`` codes ``ROWS_BLOCK`` variables at a
        time into a buffer that stays in the cache and turns them into ids at once. Same layout
        requirement as ``embed_arrays``."""
        from search.similarity.kernels import factor_ids  # numba: imported on first use

        v = len(self.variables)
        picked = np.arange(arrays.size) if index is None else np.asarray(index, dtype=np.int64)
        n, d = len(picked), v * len(FACTORS)
        narrow, wide, which = _id_buffers(d, n)
        shard = np.asarray(arrays.shard_index)
        top = int(shard.max()) + 1 if len(shard) else 1
        power = np.cumprod(np.full(top, _P, dtype=np.uint64))  # P^(s+1)
        columns = (np.asarray(getattr(arrays, k)) for k in _CODED)
        offsets = np.asarray(arrays.offsets, dtype=np.int64)
        a, b = factor_ids(power, picked, offsets, v, ROWS_BLOCK, narrow, wide, which, shard, *columns)
        if a < 0:
            raise ValueError(f"arrays: a strategy's rows are not {v} variable segments")
        return FactorRows(narrow[:a], wide[:b], d)

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty((len(a), len(b)))
        width = b.shape[1] if b.ndim == 2 else 1
        for i in range(len(a)):
            # matches per row of b (the mean of the matches): the bool matrix summed as bytes,
            # about 10 % faster than count_nonzero along an axis; the same integers
            same = (b == a[i]).view(np.uint8)
            out[i] = (same.sum(axis=1, dtype=np.int32) if same.ndim == 2 else same) / width
        return out


class FactorRows:
    """sim(i, every candidate) of one set of candidates, i at a time: ``FactorSimilarity.between``'s
    values (matching columns / D, the same integers and division) from per-column ids.

    Each column's 64-bit codes become dense ids (``kernels.column_ids``), one byte where the
    column has at most 256 distinct codes, else two (four past 65,536 candidates); constant
    columns, which every pair matches, are only counted. A row is then one pass over ~D x N bytes
    (``kernels.match_counts``). Equal ids mean equal codes only within one column of one set, so
    rows never compare two sets. Built by ``of_codes`` (from ``embed`` / ``embed_arrays``) or
    ``FactorSimilarity.rows_arrays`` (from choice arrays, without the codes).

    Shapes: narrow (D8, N) uint8, wide (D16, N) uint16 or uint32, width D >= D8 + D16; a row (N,)
    float64.
    """

    def __init__(self, narrow: np.ndarray, wide: np.ndarray, width: int) -> None:
        from search.similarity.kernels import match_counts  # numba: imported on first use

        self.narrow, self.wide = narrow, wide
        self.constant = width - len(narrow) - len(wide)  # columns where every pair matches
        self.width = width
        self._counts = np.empty(narrow.shape[1], dtype=np.int32)
        self._match_counts = match_counts

    @classmethod
    def of_codes(cls, embedded: np.ndarray) -> FactorRows:
        """From (N, D) codes, int64 (``embed``) or uint64 (``embed_arrays``); read column by column,
        so a column-major ``embedded`` is read in place and a row-major one copied first."""
        if embedded.ndim != 2 or embedded.dtype not in (np.int64, np.uint64):
            raise ValueError(f"embedded: expected (N, D) 64-bit codes, got {embedded.dtype} {embedded.shape}")
        from search.similarity.kernels import column_ids  # numba: imported on first use

        codes = np.asfortranarray(embedded).view(np.uint64).T  # (D, N), C-contiguous
        d, n = codes.shape
        narrow, wide, which = _id_buffers(d, n)
        a, b = column_ids(codes, narrow, wide, which)
        return cls(narrow[:a], wide[:b], d)

    def __call__(self, i: int) -> np.ndarray:
        self._match_counts(self.narrow, self.wide, i, self._counts)
        return (self._counts + self.constant) / self.width


def _id_buffers(d: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Room for every column's ids in either width (pages past the rows used are never touched)."""
    wide = np.uint16 if n <= 1 << 16 else np.uint32
    return np.empty((d, n), dtype=np.uint8), np.empty((d, n), dtype=wide), np.empty(d, dtype=np.int8)
