"""Per-model and per-cluster constants as numpy arrays, computed once and shared by every batch.

``ClusterArrays`` holds the per-byte coefficients of Eq. 2 (per server node and hierarchical
flag) and Eq. 3 (per collective operation), obtained by evaluating ``formulas`` at one byte, so
the vectorised scorer only multiplies and sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.analytical import formulas as f
from simulator.spec import DTYPE_BYTES, ClusterSpec, ModelSpec

#: Collective operation codes: ring all-reduce, hierarchical all-reduce, all-gather (sparse).
OP_ALLREDUCE_RING, OP_ALLREDUCE_HIER, OP_ALLGATHER = 0, 1, 2
OP_NAMES = ("allreduce-ring", "allreduce-hierarchical", "allgather")
#: Compressor codes, in ``Compressor.kind`` order.
COMPRESSORS = ("none", "fp16", "powersgd")
ALGORITHMS = ("ring", "hierarchical")


@dataclass(frozen=True, eq=False)
class ModelArrays:
    """A model's variables as arrays (forward order).

    Shapes: V variables, D = the largest tensor rank.
        dims (V, D) int64, padded with 1; ndim (V,); numel (V,) float64; dtype_bytes (V,) int64;
        sparse (V,) bool; density (V,) float64; layer (V,) int64 (owning layer's index);
        rows (V,) float64 (shape[0]); dtype_bytes_f (V,) float64;
        message_per_element (V,) = dtype bytes x density (values part of m_i per element);
        index_per_row (V,) = density x INDEX_BYTES for sparse variables, else 0.
    """

    model: ModelSpec
    dims: np.ndarray
    ndim: np.ndarray
    numel: np.ndarray
    dtype_bytes: np.ndarray
    sparse: np.ndarray
    density: np.ndarray
    layer: np.ndarray
    rows: np.ndarray
    dtype_bytes_f: np.ndarray
    message_per_element: np.ndarray
    index_per_row: np.ndarray

    @classmethod
    def of(cls, model: ModelSpec) -> ModelArrays:
        vs = model.variables
        d = max(len(v.shape) for v in vs)
        dims = np.ones((len(vs), d), dtype=np.int64)
        for i, v in enumerate(vs):
            dims[i, : len(v.shape)] = v.shape
        dtype_bytes = np.array([DTYPE_BYTES[v.dtype] for v in vs], dtype=np.int64)
        sparse = np.array([v.sparse for v in vs], dtype=bool)
        density = np.array([v.density for v in vs], dtype=np.float64)
        return cls(
            model=model,
            dims=dims,
            ndim=np.array([len(v.shape) for v in vs], dtype=np.int64),
            numel=np.array([v.numel for v in vs], dtype=np.float64),
            dtype_bytes=dtype_bytes,
            sparse=sparse,
            density=density,
            layer=np.array(model.variable_layer, dtype=np.int64),
            rows=dims[:, 0].astype(np.float64),
            dtype_bytes_f=dtype_bytes.astype(np.float64),
            message_per_element=dtype_bytes * density,
            index_per_row=np.where(sparse, density * f.INDEX_BYTES, 0.0),
        )


@dataclass(frozen=True, eq=False)
class ClusterArrays:
    """A cluster's per-byte cost coefficients.

    Shapes: J nodes, 3 collective ops (``OP_NAMES``).
        ps_transfer (J, 2): seconds per message byte of Eq. 2's transfer term for a shard served
            on node j, without (column 0) and with (column 1) hierarchical reduction.
        ps_phi (J, 2): Eq. 2's coefficient of φ (messages per step, both directions).
        cc_transfer (3,): seconds per byte of Eq. 3's transfer term per op. For all-gather the
            byte is one worker's contribution: the gathered buffer is w times larger.
        cc_phi (3,): coefficient of φ per op (w for ring ops; 2·g_max + n hierarchical).
        gpus (J,), worker (J,) bool, nic_gbps (J,), intra_gbps (J,), latency_us (J,),
        server_bw (J,): mean bandwidth from node j to the other worker nodes, Gbit/s (0 if none).
        ps_latency (J,), cc_latency (3,): network latency of one PS shard on node j and of one
            call of each op, seconds (``formulas.ps_latency_s`` etc., from ``Node.latency_us``).
        code_transfer, code_phi, code_delta, code_latency (2J + 3,): the same per row code, the
            index a batch row carries (``StrategyBatch.code``): 2·j + I_p for a PS row served
            on node j, 2·J + op for a collective row. Collective rows have no φ/δ of their own
            (their call pays them), so their code_phi and code_delta are 0.
    """

    cluster: ClusterSpec
    ps_transfer: np.ndarray
    ps_phi: np.ndarray
    cc_transfer: np.ndarray
    cc_phi: np.ndarray
    gpus: np.ndarray
    worker: np.ndarray
    nic_gbps: np.ndarray
    intra_gbps: np.ndarray
    latency_us: np.ndarray
    server_bw: np.ndarray
    code_transfer: np.ndarray
    code_phi: np.ndarray
    code_delta: np.ndarray
    ps_latency: np.ndarray
    cc_latency: np.ndarray
    code_latency: np.ndarray
    ring_gbps: float
    world: int
    price_per_s: float

    @classmethod
    def of(cls, cluster: ClusterSpec) -> ClusterArrays:
        j = len(cluster.nodes)
        ps_transfer = np.zeros((j, 2))
        ps_phi = np.zeros((j, 2))
        ps_delta = np.zeros((j, 2))
        for s in range(j):
            for lr in (0, 1):
                t = f.ps_terms(cluster, s, bool(lr), 1.0)
                ps_transfer[s, lr], ps_phi[s, lr], ps_delta[s, lr] = t.transfer, t.phi_coef, t.delta_coef
        w = cluster.num_gpus
        ring = f.ring_bandwidth_gbps(cluster)
        ar = f.collective_terms("allreduce", 1.0, w, ring)
        ag = f.collective_terms("allgather", float(w), w, ring)
        hier = f.hierarchical_allreduce_terms(cluster, 1.0)
        workers = cluster.worker_nodes
        server_bw = np.array(
            [np.mean([cluster.link_gbps(s, k) for k in workers if k != s] or [0.0]) for s in range(j)]
        )
        cc_transfer = np.array([ar.transfer, hier.transfer, ag.transfer])
        ps_latency = np.array([f.ps_latency_s(cluster, s) for s in range(j)])
        return cls(
            ps_latency=ps_latency,
            cc_latency=np.array(
                [
                    f.collective_latency_s("allreduce", cluster),
                    f.hierarchical_latency_s(cluster),
                    f.collective_latency_s("allgather", cluster),
                ]
            ),
            code_latency=np.concatenate([np.repeat(ps_latency, 2), np.zeros(3)]),
            cluster=cluster,
            code_transfer=np.concatenate([ps_transfer.ravel(), cc_transfer]),
            code_phi=np.concatenate([ps_phi.ravel(), np.zeros(3)]),
            code_delta=np.concatenate([ps_delta.ravel(), np.zeros(3)]),
            ps_transfer=ps_transfer,
            ps_phi=ps_phi,
            cc_transfer=cc_transfer,
            cc_phi=np.array([ar.phi_coef, hier.phi_coef, ag.phi_coef]),
            gpus=np.array([n.gpus for n in cluster.nodes], dtype=np.int64),
            worker=np.array([n.gpus > 0 for n in cluster.nodes], dtype=bool),
            nic_gbps=np.array([n.nic_gbps for n in cluster.nodes]),
            intra_gbps=np.array([cluster.intra_gbps(i) for i in range(j)]),
            latency_us=np.array([n.latency_us for n in cluster.nodes]),
            server_bw=server_bw,
            ring_gbps=ring,
            world=w,
            price_per_s=f.price_per_second(cluster),
        )


_MODEL_CACHE: dict[int, ModelArrays] = {}
_CLUSTER_CACHE: dict[int, ClusterArrays] = {}
_CACHE_SIZE = 32


def model_arrays(model: ModelSpec) -> ModelArrays:
    """``ModelArrays.of(model)``, cached by identity (specs are frozen)."""
    hit = _MODEL_CACHE.get(id(model))
    if hit is None or hit.model is not model:
        if len(_MODEL_CACHE) >= _CACHE_SIZE:
            _MODEL_CACHE.clear()
        hit = _MODEL_CACHE[id(model)] = ModelArrays.of(model)
    return hit


def cluster_arrays(cluster: ClusterSpec) -> ClusterArrays:
    """``ClusterArrays.of(cluster)``, cached by identity (specs are frozen)."""
    hit = _CLUSTER_CACHE.get(id(cluster))
    if hit is None or hit.cluster is not cluster:
        if len(_CLUSTER_CACHE) >= _CACHE_SIZE:
            _CLUSTER_CACHE.clear()
        hit = _CLUSTER_CACHE[id(cluster)] = ClusterArrays.of(cluster)
    return hit
