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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from search.similarity.base import Similarity
from simulator.spec import ModelSpec, PSSync, Strategy

if TYPE_CHECKING:
    from search.samplers.arrays import ChoiceArrays

FACTORS = ("partition", "kind", "server", "replication", "group", "compressor", "algorithm")
#: Odd 64-bit multiplier of the per-shard polynomial hash (any odd constant with mixed bits).
_P = np.uint64(0x9E3779B97F4A7C15)
#: Rows coded at a time by ``embed_arrays`` (its temporaries stay in cache).
BLOCK_ROWS = 1 << 16


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
        """Shape (N, V x 7) uint64, the codes of ``embed``'s meaning from choice arrays.

        Rows of each strategy must cover every variable in forward order (the samplers' and
        ``encode``'s layout), each variable's shards in shard order.
        """
        v = len(self.variables)
        n = arrays.size
        shard = np.asarray(arrays.shard_index)
        starts = np.flatnonzero(shard == 0)
        if len(starts) != n * v:
            raise ValueError(f"arrays: {len(starts)} variable segments, expected {n} x {v}")
        power = np.cumprod(np.full(int(shard.max()) + 1, _P, dtype=np.uint64))  # P^(i+1)
        out = np.empty((n * v, len(FACTORS)), dtype=np.uint64)
        offsets = np.asarray(arrays.offsets)
        # blocks of whole strategies, about BLOCK_ROWS rows each: the temporaries stay in cache
        lo = 0
        while lo < n:
            base = int(offsets[lo])
            hi = max(lo + 1, int(np.searchsorted(offsets[1:], base + BLOCK_ROWS, side="right")))
            self._codes(arrays, int(offsets[lo]), int(offsets[hi]), power, out[lo * v : hi * v])
            lo = hi
        return out.reshape(n, v * len(FACTORS))

    @staticmethod
    def _codes(arrays: ChoiceArrays, a: int, b: int, power: np.ndarray, out: np.ndarray) -> None:
        """``embed_arrays``' codes of rows a..b (whole strategies) into ``out`` (segments x 7)."""
        pos = np.asarray(arrays.shard_index)[a:b]
        starts = np.flatnonzero(pos == 0)
        weight = power[pos]
        ps = np.asarray(arrays.is_ps, dtype=bool)[a:b]
        cc = ~ps

        def col(name: str) -> np.ndarray:
            return np.asarray(getattr(arrays, name))[a:b].astype(np.int64)

        def code(values: np.ndarray, f: int) -> None:
            # sum over the segment's shards of (value + 1) * P^(shard + 1), mod 2^64
            term = (values + 1).astype(np.uint64)
            term *= weight
            out[:, f] = np.add.reduceat(term, starts)

        out[:, 0] = (col("axis")[starts] * 65536 + col("num_shards")[starts]).astype(np.uint64)
        code(ps.astype(np.int64), 1)
        code(np.where(ps, col("server") + 1, 0), 2)
        code(np.where(ps, col("local_replication") + 1, 0), 3)
        code(np.where(cc, col("group") + 1, 0), 4)
        code(np.where(cc, col("compressor") * 65536 + col("rank") + 1, 0), 5)
        code(np.where(cc, col("algorithm") + 1, 0), 6)

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty((len(a), len(b)))
        width = b.shape[1] if b.ndim == 2 else 1
        for i in range(len(a)):
            # matches per row of b (the mean of the matches): the bool matrix summed as bytes,
            # about 10 % faster than count_nonzero along an axis; the same integers
            same = (b == a[i]).view(np.uint8)
            out[i] = (same.sum(axis=1, dtype=np.int32) if same.ndim == 2 else same) / width
        return out
