"""Additive synchronisation terms of a strategy: unit, call and byte counts per channel kind (issue 16).

Why. On the emulated cluster a step's synchronisation is, to first order, a sum over its units:
every PS shard and every collective call pays a per-call software cost (the probe's α, a large
part of a step on NCF-sparse) plus its bytes over the channel it uses, and a sparse or locally
replicated shard moves differently from a dense one. The global z (``features``) gives these as
maxima and means of per-shard costs at the analytical model's constants; these terms give the
raw counts and byte sums, so a per-domain linear model (``residual``'s ``physical`` base) can
fit each kind's price from the domain's measurements instead of taking Eq. 2-3's.

Columns (``TERM_NAMES``), per strategy:
- per kind of shard row, PS × {sparse, dense} × {locally replicated, not} and collective ×
  {sparse, dense} × {hierarchical, ring}: rows (``_n``) and sent bytes c_i(m_i) (``_b``); for PS
  kinds also the busiest server's rows and bytes of that kind (``_nmax``, ``_bmax``);
- whole-strategy totals: PS and collective shards, servers used, the busiest server's shards,
  collective calls (all, and per op of ``arrays.OP_NAMES``), primitive calls (``call_repeats``),
  locally replicated PS shards, Eq. 2's transfer seconds of the busiest server and of all
  servers, Eq. 3's transfer seconds of all calls, the busiest server's messages (coefficient of
  φ), and PS and collective bytes.
Transfer seconds use the default ``CostParams`` (bandwidths only; φ and δ do not enter).

Shapes: batch of N strategies → (N, NUM_TERMS) float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.analytical import ClusterArrays, CostParams, ModelArrays, StrategyBatch, score


def _kind_names() -> tuple[str, ...]:
    out = []
    for ps in (True, False):
        for sparse in ("sp", "de"):
            for sub in ("L", "n") if ps else ("h", "r"):
                tag = f"{'ps' if ps else 'cc'}_{sparse}_{sub}"
                out += [f"{tag}_n", f"{tag}_b"] + ([f"{tag}_nmax", f"{tag}_bmax"] if ps else [])
    return tuple(out)


TOTAL_NAMES: tuple[str, ...] = (
    "ps_shards",
    "cc_shards",
    "servers_used",
    "max_server_shards",
    "calls",
    "calls_ring",
    "calls_hierarchical",
    "calls_allgather",
    "primitive_calls",
    "ps_local_shards",
    "max_server_transfer_s",
    "sum_server_transfer_s",
    "cc_transfer_s",
    "max_server_messages",
    "ps_bytes",
    "cc_bytes",
)
TERM_NAMES: tuple[str, ...] = (*_kind_names(), *TOTAL_NAMES)
NUM_TERMS = len(TERM_NAMES)
#: Where the whole-strategy totals start (the residual's log features are these columns).
TOTALS = len(TERM_NAMES) - len(TOTAL_NAMES)


def sync_terms(ma: ModelArrays, ca: ClusterArrays, b: StrategyBatch) -> np.ndarray:
    """The terms of every strategy of an encoded batch, (N, NUM_TERMS) (module docstring)."""
    n, j = b.size, len(ca.gpus)
    if n == 0:
        return np.zeros((0, NUM_TERMS))
    sparse = np.asarray(ma.sparse, dtype=bool)[b.variable]
    sent = b.geo.sent_bytes
    ps = b.is_ps
    cols: list[np.ndarray] = []
    for is_ps in (True, False):
        flag = b.local_replication if is_ps else b.algorithm == 1
        for sp in (True, False):
            for sub in (True, False):
                m = (ps == is_ps) & (sparse == sp) & (flag == sub)
                cols.append(np.bincount(b.strategy[m], minlength=n).astype(np.float64))
                cols.append(np.bincount(b.strategy[m], weights=sent[m], minlength=n))
                if is_ps:
                    key = b.strategy[m] * j + b.server[m]
                    cols.append(
                        np.bincount(key, minlength=n * j).reshape(n, j).max(axis=1).astype(np.float64)
                    )
                    cols.append(np.bincount(key, weights=sent[m], minlength=n * j).reshape(n, j).max(axis=1))
    s = score(ma, ca, b, CostParams(), detail=True)
    assert s.server_terms is not None and s.server_shards is not None and s.call_terms is not None
    calls_by_op = [np.bincount(b.call_strategy[b.call_op == op], minlength=n) for op in range(3)]
    cols += [
        np.bincount(b.strategy[ps], minlength=n),
        np.bincount(b.strategy[~ps], minlength=n),
        (s.server_shards > 0).sum(axis=1),
        s.server_shards.max(axis=1),
        np.bincount(b.call_strategy, minlength=n),
        *calls_by_op,
        np.bincount(b.call_strategy, weights=b.call_repeats, minlength=n),
        np.bincount(b.strategy[ps & b.local_replication], minlength=n),
        s.server_terms[:, :, 0].max(axis=1),
        s.server_terms[:, :, 0].sum(axis=1),
        np.bincount(b.call_strategy, weights=s.call_terms[:, 0], minlength=n),
        s.server_terms[:, :, 1].max(axis=1),
        np.bincount(b.strategy, weights=np.where(ps, sent, 0.0), minlength=n),
        np.bincount(b.strategy, weights=np.where(ps, 0.0, sent), minlength=n),
    ]
    return np.column_stack(cols).astype(np.float64)


@dataclass(frozen=True)
class TermsLine:
    """A domain's linear price list of its terms: t̂ = intercept + (terms / scale) · weights.

    Fitted (``fit``) by non-negative least squares on relative error (rows divided by the measured
    time, so a 10 ms and a 400 ms step weigh alike): every term costs time, none saves it, which
    keeps the line monotone in counts and bytes; the intercept (the compute and fixed costs) is
    free in sign. ``scale`` = each column's largest magnitude on the fit's data (1 where all
    zero), for conditioning. ``log_seconds`` floors t̂ at ``floor`` (a fraction of the fit's
    median time): the line may go below zero far from its data, a log may not.

    Shapes: weights, scale (NUM_TERMS,); terms (N, NUM_TERMS) → (N,).
    """

    weights: np.ndarray
    scale: np.ndarray
    intercept: float
    floor: float

    @classmethod
    def fit(cls, terms: np.ndarray, times: np.ndarray, floor_fraction: float) -> TermsLine:
        from scipy.optimize import nnls  # imported here: scipy.optimize takes seconds to import

        x, t = np.asarray(terms, dtype=np.float64), np.asarray(times, dtype=np.float64)
        scale = np.abs(x).max(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        ones = np.ones((len(t), 1))
        a = np.hstack([ones, x / scale, -ones]) / t[:, None]  # ±1: a free intercept under nnls
        w = nnls(a, np.ones(len(t)))[0]
        return cls(w[1:-1], scale, float(w[0] - w[-1]), floor_fraction * float(np.median(t)))

    def seconds(self, terms: np.ndarray) -> np.ndarray:
        return self.intercept + (np.asarray(terms, dtype=np.float64) / self.scale) @ self.weights

    def log_seconds(self, terms: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(self.seconds(terms), self.floor))
