"""Domain-agnostic features from the analytical model (AutoSync supplementary §2-§3).

Per shard (a node of the transformed graph V'_{G,θ}): z_i = [network transfer, coefficient of φ,
coefficient of δ] of Eq. 2 (PS) or Eq. 3 (collective). A collective call's φ and δ are shared by
the shards merged into it, so each shard carries 1/(shards in the call) of them; then the z_i of
one strategy sum to its T_sync^CC terms, and a PS server's z_i sum to its Eq. 2 terms.
Per strategy: z = max_i z_i^PS ⊕ mean_i z_i^PS ⊕ max_i z_i^CC ⊕ mean_i z_i^CC (zeros where a
strategy has no shard of that kind). Raw per-shard features for the learned simulators are in
``RAW_FEATURES`` order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.analytical.arrays import (
    OP_ALLGATHER,
    OP_ALLREDUCE_HIER,
    OP_ALLREDUCE_RING,
    ClusterArrays,
    ModelArrays,
)
from simulator.analytical.batch import StrategyBatch

#: Columns of ``Features.shard_raw``.
RAW_FEATURES = (
    "param_bytes",  # bytes of the shard's parameter slice
    "message_bytes",  # m_i: gradient message per worker (sparse: touched rows + indices)
    "sent_bytes",  # c_i(m_i): after compression
    "sparse",
    "density",
    "num_shards",  # the variable's partition count
    "shard_index",
    "is_ps",
    "is_collective",
    "compressor_none",
    "compressor_fp16",
    "compressor_powersgd",
    "powersgd_rank",
    "allreduce_ring",
    "allreduce_hierarchical",
    "allgather",
    "server_is_worker",  # the PS node also hosts GPUs (its own replicas skip the network, I_d = 0)
    "server_gpu_fraction",  # fraction of all GPUs on the server's node
    "local_replication",  # I_p
    "staleness",
    "bandwidth_gbps",  # PS: mean b_{j,k} from the server to the other workers; collective: ring b_m
    "server_nic_gbps",
    "server_latency_us",
    "group_shards",  # shards in the same collective call, or on the same PS server
    "group_sent_bytes",  # c_i(m_i) summed over that call or server
    "messages",  # PS: messages per direction Σ_k I_d·r_k; collective: world size w
    "position",  # variable's forward index / (V - 1)
    "layer_position",  # owning layer's index / (L - 1)
    "z_transfer",
    "z_phi",
    "z_delta",
)
#: Names of the columns of ``Features.global_z``.
GLOBAL_FEATURES = tuple(
    f"{kind}_{agg}_{term}"
    for kind in ("ps", "cc")
    for agg in ("max", "mean")
    for term in ("transfer", "phi", "delta")
)


@dataclass(frozen=True, eq=False)
class Features:
    """Features of N strategies with T shard rows in total (rows as in the StrategyBatch).

    Shapes:
        offsets (N+1,): rows of strategy n are offsets[n]:offsets[n+1];
        strategy (T,), variable (T,): each row's strategy and forward variable index;
        shard_z (T, 3): z_i = [transfer s, coef of φ, coef of δ];
        shard_raw (T, F) with F = len(RAW_FEATURES);
        global_z (N, 12): ``GLOBAL_FEATURES`` (max ⊕ mean of z over PS rows, then collective rows).
    """

    offsets: np.ndarray
    strategy: np.ndarray
    variable: np.ndarray
    shard_z: np.ndarray
    shard_raw: np.ndarray
    global_z: np.ndarray


def features(ma: ModelArrays, ca: ClusterArrays, b: StrategyBatch) -> Features:
    """Per-shard z_i and raw features, and per-strategy global z, for every strategy of ``b``."""
    n, j = b.size, len(ca.gpus)
    geo = b.geo
    c = geo.sent_bytes
    ps = b.is_ps
    cc = ~ps
    srv = np.where(ps, b.server, 0)
    lr = b.local_replication.astype(np.int64)
    op = np.where(ps, 0, b.op)
    call = np.where(ps, 0, b.call)
    # At least one slot: PS rows index call 0 (masked out below), even in a batch with no call.
    g = max(len(b.call_strategy), 1)
    call_shards = np.bincount(b.call[cc], minlength=g).astype(np.float64)
    call_bytes = np.bincount(b.call[cc], weights=c[cc], minlength=g)
    ps_key = b.strategy * j + srv
    server_shards = np.bincount(ps_key, weights=ps.astype(np.float64), minlength=n * j)
    server_bytes = np.bincount(ps_key, weights=np.where(ps, c, 0.0), minlength=n * j)
    z = np.empty((b.rows, 3))
    # A call's constant terms, split evenly over its shards, once per run of its op (PowerSGD: 2).
    repeats = b.call_repeats if len(b.call_repeats) else np.ones(1)
    shared = np.where(cc, call_shards[call] / repeats[call], 1.0)
    z[:, 0] = np.where(ps, c * ca.ps_transfer[srv, lr], c * ca.cc_transfer[op])
    z[:, 1] = np.where(ps, ca.ps_phi[srv, lr], ca.cc_phi[op] / shared)
    z[:, 2] = np.where(ps, ca.code_delta[b.code], 1.0 / shared)  # a PS row's δ count (I_p: 3)
    comp = b.compressor
    v = b.variable
    n_vars = max(len(ma.numel) - 1, 1)
    n_layers = max(len(ma.model.layers) - 1, 1)
    cols = [
        geo.values_bytes,
        geo.message_bytes,
        c,
        ma.sparse[v],
        ma.density[v],
        b.num_shards,
        b.shard_index,
        ps,
        cc,
        comp == 0,
        comp == 1,
        comp == 2,
        b.rank,
        cc & (op == OP_ALLREDUCE_RING),
        cc & (op == OP_ALLREDUCE_HIER),
        cc & (op == OP_ALLGATHER),
        ps & ca.worker[srv],
        np.where(ps, ca.gpus[srv] / ca.world, 0.0),
        b.local_replication,
        b.staleness,
        np.where(ps, ca.server_bw[srv], ca.ring_gbps),
        np.where(ps, ca.nic_gbps[srv], 0.0),
        np.where(ps, ca.latency_us[srv], 0.0),
        np.where(ps, server_shards[ps_key], call_shards[call]),
        np.where(ps, server_bytes[ps_key], call_bytes[call]),
        np.where(ps, ca.ps_phi[srv, lr] / 2.0, ca.world),
        v / n_vars,
        ma.layer[v] / n_layers,
        z[:, 0],
        z[:, 1],
        z[:, 2],
    ]
    raw = np.stack([np.asarray(col, dtype=np.float64) for col in cols], axis=1)
    starts = b.offsets[:-1]
    parts = []
    for mask in (ps, cc):
        zm = np.where(mask[:, None], z, 0.0)
        count = np.add.reduceat(mask.astype(np.float64), starts)
        parts.append(np.maximum.reduceat(zm, starts, axis=0))
        parts.append(np.add.reduceat(zm, starts, axis=0) / np.maximum(count, 1.0)[:, None])
    return Features(
        offsets=b.offsets,
        strategy=b.strategy,
        variable=b.variable,
        shard_z=z,
        shard_raw=raw,
        global_z=np.concatenate(parts, axis=1),
    )
