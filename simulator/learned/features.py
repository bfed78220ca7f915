"""Domain-agnostic inputs of the learned simulators: per-shard z_i^raw ⊕ z_i^pre, and global z.

Built on the analytical model's feature API (``simulator.analytical.features``): its per-shard
raw columns and z_i = [transfer, coef φ, coef δ] (AutoSync §2-§3), re-expressed so they mean the
same on any model and cluster: bytes, seconds and bandwidths are log-scaled, positions and
placements are fractions or ranks. Added here: the server's bandwidth rank and load share, the
merge group's position and byte share, the cluster's shape, the owning layer's compute time, and
the analytical model's whole-strategy times (T_comp, T_sync^PS, T_sync^CC, T) broadcast to every
shard, so the networks can learn corrections to the analytical estimate.

Shapes (one ``StrategyGraph`` per strategy, S shards, E directed edges):
    x: (S, NUM_SHARD_FEATURES) float32, shards in forward order
    edge_index: (2, E) int64, both directions of every edge (``graph.shard_edges``)
    z: (NUM_GLOBAL_FEATURES,) float32, the linear ranker's input
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytical import (
    RAW_FEATURES,
    CostParams,
    StrategyBatch,
    cluster_arrays,
    encode,
    features,
    model_arrays,
    score,
)
from simulator.analytical.compute import layer_times
from simulator.analytical.formulas import node_compute_times
from simulator.learned.graph import shard_edges, variable_edges
from simulator.learned.terms import sync_terms
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Bumped whenever the meaning or order of a feature changes; checkpoints record it.
#: 3: T_comp and the per-layer compute feature come from the roofline compute model (issue 15).
#: 4: Eq. 2 charges local replication's intra-node reduce and broadcast (the per-shard φ and δ
#:    coefficients of a locally replicated PS shard, and every feature built on Eq. 1-3's times).
FEATURE_SCHEMA_VERSION = 4

_LOG_BYTES = {"param_bytes", "message_bytes", "sent_bytes", "group_sent_bytes"}
_LOG1P = {"powersgd_rank", "staleness", "group_shards", "messages", "server_latency_us", "z_phi"}
_LOG1P_GBPS = {"bandwidth_gbps", "server_nic_gbps"}
_EXTRA_NAMES = (
    "shard_fraction",
    "server_bandwidth_rank",
    "server_load_fraction",
    "group_position",
    "group_bytes_fraction",
    "log_groups",
    "log_ring_gbps",
    "log_intra_gbps",
    "log_gpus",
    "log_worker_nodes",
    "log_max_gpus_per_node",
    "log_layer_compute_ms",
)
_CONTEXT_NAMES = (
    "ctx_log_compute_ms",
    "ctx_log_ps_ms",
    "ctx_log_collective_ms",
    "ctx_log_estimate_ms",
    # Whole-strategy totals, which mean pooling cannot recover from per-shard rows: on a real
    # (or emulated) cluster every shard, server and call costs fixed software time.
    "ctx_log_shards",
    "ctx_log_ps_shards",
    "ctx_log_collective_shards",
    "ctx_log_powersgd_shards",
    "ctx_log_ps_servers",
    "ctx_log_sent_mb",
)
SHARD_FEATURE_NAMES: tuple[str, ...] = (*RAW_FEATURES, *_EXTRA_NAMES, *_CONTEXT_NAMES)
NUM_SHARD_FEATURES = len(SHARD_FEATURE_NAMES)
GLOBAL_FEATURE_NAMES: tuple[str, ...] = (
    *(f"{k}_{a}_{t}" for k in ("ps", "cc") for a in ("max", "mean") for t in ("transfer", "phi", "delta")),
    "ps_fraction",
    "server_load_max",
    "log_groups",
    *_CONTEXT_NAMES,
)
NUM_GLOBAL_FEATURES = len(GLOBAL_FEATURE_NAMES)

_COL = {n: i for i, n in enumerate(RAW_FEATURES)}


def _log_ms(seconds: np.ndarray) -> np.ndarray:
    return np.log1p(np.asarray(seconds, dtype=np.float64) * 1e3)


def _scale_raw(raw: np.ndarray) -> np.ndarray:
    """The analytical raw columns made domain-agnostic (log scales, fractions)."""
    out = raw.copy()
    for name, i in _COL.items():
        if name in _LOG_BYTES or name in _LOG1P or name in _LOG1P_GBPS:
            out[:, i] = np.log1p(raw[:, i])
        elif name == "z_transfer":
            out[:, i] = _log_ms(raw[:, i])
        elif name == "num_shards":
            out[:, i] = np.log2(raw[:, i])
        elif name == "shard_index":
            out[:, i] = raw[:, i] / raw[:, _COL["num_shards"]]
    return out


@dataclass(frozen=True)
class StrategyGraph:
    """One strategy as the learned simulators see it (see the module docstring for shapes)."""

    x: np.ndarray
    edge_index: np.ndarray
    z: np.ndarray


class FeatureExtractor:
    """Turns strategies of one (model, cluster) domain into ``StrategyGraph``s, in batches.

    Construction caches the domain-only parts (arrays, node ranks, variable adjacency); calls
    do not mutate the extractor, so one may serve several threads.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, params: CostParams | None = None) -> None:
        self.model = model
        self.cluster = cluster
        self.params = params or CostParams()
        self._ma = model_arrays(model)
        self._ca = cluster_arrays(cluster)
        bws = np.array([cluster.node_bandwidth_gbps(i) for i in range(len(cluster.nodes))])
        # Rank in [0, 1]: 1 for the best-connected node; ties share a rank.
        self._bw_rank = np.array([np.sum(bws < b) for b in bws]) / max(1, len(bws) - 1)
        workers = cluster.worker_nodes
        self._domain_cols = np.array(
            [
                math.log(self._ca.ring_gbps),
                math.log(max(cluster.intra_gbps(n) for n in workers)),
                math.log(cluster.num_gpus),
                math.log(len(workers)),
                math.log(max(cluster.nodes[n].gpus for n in workers)),
            ]
        )
        # Each layer's forward + backward on the slowest worker's device: the compute model's
        # per-layer times (``simulator.analytical.compute``), the same ones T_comp sums.
        node_t = node_compute_times(model, cluster, self.params)
        slowest = cluster.device_type(max(node_t, key=lambda k: node_t[k]))
        per_layer = layer_times(model, slowest, model.batch_size, self.params)
        self._layer_ms = _log_ms(per_layer.fwd + per_layer.bwd)
        self._var_edges = variable_edges(model)

    def __call__(self, strategy: Strategy) -> StrategyGraph:
        return self.many([strategy])[0]

    def many(self, strategies: Sequence[Strategy]) -> list[StrategyGraph]:
        """Feature graphs of ``strategies`` (one vectorised pass over all their shards)."""
        if not strategies:
            return []
        return self._many(strategies)

    def global_z(self, batch: StrategyBatch) -> np.ndarray:
        """The global z of every strategy of an already encoded batch, shape (N, NUM_GLOBAL_FEATURES).

        The array path of a search round (``simulator.learned.scoring``): no Strategy objects.
        """
        return self._arrays(batch)[1]

    def sync_terms(self, batch: StrategyBatch) -> np.ndarray:
        """The additive synchronisation terms of an encoded batch, (N, NUM_TERMS) (``terms``)."""
        return sync_terms(self._ma, self._ca, batch)

    def _many(self, strategies: Sequence[Strategy]) -> list[StrategyGraph]:
        b = encode(self._ma, self._ca, strategies)
        x, glob = self._arrays(b)
        out = []
        for i in range(b.size):
            lo, hi = b.offsets[i], b.offsets[i + 1]
            out.append(
                StrategyGraph(
                    x=x[lo:hi], edge_index=shard_edges(b.variable[lo:hi], self._var_edges), z=glob[i]
                )
            )
        return out

    def _arrays(self, b: StrategyBatch) -> tuple[np.ndarray, np.ndarray]:
        """(x, z) of a batch: shard rows (T, NUM_SHARD_FEATURES) and globals (N, NUM_GLOBAL_FEATURES)."""
        f = features(self._ma, self._ca, b)
        s = score(self._ma, self._ca, b, self.params)
        n, rows = b.size, b.rows
        sent = b.geo.sent_bytes
        ps, cc = b.is_ps, ~b.is_ps
        srv = np.where(ps, b.server, 0)
        j = len(self._bw_rank)
        per_strategy = np.diff(b.offsets)
        ps_count = np.bincount(b.strategy, weights=ps.astype(np.float64), minlength=n)
        used = np.zeros(n * j, dtype=bool)
        used[(b.strategy * j + srv)[ps]] = True
        ctx = np.column_stack(
            [
                _log_ms(s.t_comp),
                _log_ms(s.t_ps),
                _log_ms(s.t_cc),
                _log_ms(s.t_iter),
                np.log1p(per_strategy),
                np.log1p(ps_count),
                np.log1p(per_strategy - ps_count),
                np.log1p(
                    np.bincount(b.strategy, weights=(b.compressor == 2).astype(np.float64), minlength=n)
                ),
                np.log1p(used.reshape(n, j).sum(axis=1)),
                np.log1p(np.bincount(b.strategy, weights=sent, minlength=n) / 1e6),
            ]
        )
        ps_total = np.bincount(b.strategy, weights=np.where(ps, sent, 0.0), minlength=n)
        server_bytes = np.bincount(b.strategy * j + srv, weights=np.where(ps, sent, 0.0), minlength=n * j)
        server_frac = server_bytes.reshape(n, j) / np.maximum(ps_total, 1e-30)[:, None]
        g = len(b.call_strategy)
        call = np.where(cc, b.call, 0)
        call_bytes = np.bincount(b.call[cc], weights=sent[cc], minlength=g)
        cc_total = np.bincount(b.call_strategy, weights=call_bytes, minlength=n)
        calls = np.bincount(b.call_strategy, minlength=n)
        # Position of each call among its strategy's calls, in merge-group order.
        order = np.lexsort((b.call_group, b.call_strategy))
        pos = np.empty(g)
        first = np.searchsorted(b.call_strategy[order], b.call_strategy[order])
        pos[order] = np.arange(g) - first
        pos = pos / np.maximum(calls[b.call_strategy] - 1, 1) if g else pos
        extra = np.zeros((rows, len(_EXTRA_NAMES)))
        extra[:, 0] = 1.0 / b.num_shards
        extra[:, 1] = np.where(ps, self._bw_rank[srv], 0.0)
        extra[:, 2] = np.where(ps, server_frac[b.strategy, srv], 0.0)
        if g:
            extra[:, 3] = np.where(cc, pos[call], 0.0)
            extra[:, 4] = np.where(cc, call_bytes[call] / np.maximum(cc_total[b.strategy], 1e-30), 0.0)
        extra[:, 5] = np.log1p(calls[b.strategy])
        extra[:, 6:11] = self._domain_cols
        extra[:, 11] = self._layer_ms[self._ma.layer[b.variable]]
        x = np.hstack([_scale_raw(f.shard_raw), extra, ctx[b.strategy]]).astype(np.float32)
        gz = f.global_z.copy()
        for k in (0, 3, 6, 9):  # transfer columns of max/mean PS/CC
            gz[:, k] = _log_ms(gz[:, k])
            gz[:, k + 1] = np.log1p(gz[:, k + 1])
        glob = np.column_stack(
            [gz, ps_count / per_strategy, server_frac.max(axis=1), np.log1p(calls), ctx]
        ).astype(np.float32)
        return x, glob


class ExtractorCache:
    """Feature extractors per (model, cluster) object, at most 16 kept; safe across threads."""

    def __init__(self) -> None:
        self._extractors: dict[tuple[int, int], FeatureExtractor] = {}
        self._lock = threading.Lock()

    def get(self, model: ModelSpec, cluster: ClusterSpec) -> FeatureExtractor:
        key = (id(model), id(cluster))
        with self._lock:
            fx = self._extractors.get(key)
            if fx is None or fx.model is not model or fx.cluster is not cluster:
                if len(self._extractors) > 16:
                    self._extractors.clear()
                fx = self._extractors[key] = FeatureExtractor(model, cluster)
        return fx
