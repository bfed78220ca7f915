"""Factor-count similarity (AutoSync supplementary §7, first approach): how many choices agree.

For each variable v and each synchronisation-affecting factor f, the two strategies agree when v's
value of f is the same in both. The factors, each a tuple over v's shards (so that a different
partition makes the per-shard factors differ too):

  partition (axis, shards) · synchroniser kind · PS server · local replication ·
  merge group · compressor · all-reduce algorithm

A factor that does not apply to a shard (a PS shard's compressor, a collective shard's server)
has the value "n/a", and two n/a values agree: both strategies made the same decision not to
use it. sim = agreeing (variable, factor) pairs / (variables x 7), in [0, 1]; sim(S, S) = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from search.similarity.base import Similarity
from simulator.spec import ModelSpec, PSSync, Strategy

FACTORS = ("partition", "kind", "server", "replication", "group", "compressor", "algorithm")


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

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty((len(a), len(b)))
        for i in range(len(a)):
            out[i] = (b == a[i]).mean(axis=1)
        return out
