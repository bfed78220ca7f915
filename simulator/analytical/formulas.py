"""AutoSync's predefined cost formulas for one message: PS (Eq. 2), collectives (Eq. 3); compute (§1).

These scalar functions are the single statement of the maths. The vectorised scorer precomputes
their per-byte coefficients once per cluster (``ClusterArrays``); the reference loop calls them
shard by shard. Every time is split into ``Terms`` = [network transfer, coefficient of φ,
coefficient of δ], which are also AutoSync's domain-agnostic features z_i (supplementary §2-§3).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from simulator.analytical import compute
from simulator.analytical.params import CostParams
from simulator.spec import GBPS, ClusterSpec, ModelSpec, comm

Primitive = Literal["allreduce", "reducescatter", "allgather", "broadcast", "reduce"]
CompressorKind = Literal["none", "fp16", "powersgd"]

#: Bytes of one row index of a sparse gradient (int64, as in TensorFlow's IndexedSlices).
INDEX_BYTES = 8
#: FLOPs of one training step per forward FLOP for matmul-like layers (forward + input and weight
#: gradients); kept for readers of old features. Compute time itself is ``compute.layer_times``.
TRAIN_FLOPS_PER_FWD = 3.0


class Terms(NamedTuple):
    """A synchronisation time split as in Eq. 2/3: transfer seconds + phi_coef·φ + delta_coef·δ."""

    transfer: float
    phi_coef: float
    delta_coef: float

    def seconds(self, params: CostParams) -> float:
        return self.transfer + self.phi_coef * params.phi + self.delta_coef * params.delta


def sparse_message_bytes(values_bytes: float, rows: int, density: float) -> float:
    """m_i of a row-sparse gradient: the touched rows' values plus their int64 indices.

    With ``density`` the expected fraction of rows touched per step, a worker sends
    ``density·values_bytes`` of values and ``density·rows·INDEX_BYTES`` of indices.
    """
    return density * values_bytes + density * rows * INDEX_BYTES


def compressed_bytes(
    kind: CompressorKind,
    values_bytes: float,
    index_bytes: float,
    dtype_bytes: int,
    rows: int,
    cols: int,
    rank: int = 0,
) -> float:
    """c_i(m_i): the bytes actually sent for a message of ``values_bytes`` (+ ``index_bytes``).

    none: unchanged. fp16: values cast to 2-byte floats (half of fp32; indices unchanged).
    powersgd (dense matrices only): the factors P (rows x r) and Q (cols x r), i.e.
    ``r·(rows + cols)`` values of the variable's dtype, with rows = shape[0] and
    cols = prod(shape[1:]) of the shard and r the effective rank of ``simulator.spec.comm``
    (``min(rows, cols, rank)``); a matrix that compression would not shrink is sent as it is.
    """
    if kind == "none":
        return values_bytes + index_bytes
    if kind == "fp16":
        return values_bytes * min(1.0, 2.0 / dtype_bytes) + index_bytes
    eff = comm.powersgd_rank(rows, cols, rank)
    return float(eff * (rows + cols) * dtype_bytes) if eff is not None else values_bytes + index_bytes


def ps_terms(cluster: ClusterSpec, server: int, local_replication: bool, message_bytes: float) -> Terms:
    """Eq. 2, T_server^PS(v_i) for one message of ``message_bytes`` = c_i(m_i) on node ``server``.

    T = Σ_k I_d(j,k)·c_i(m_i)/b_{j,k}·r_k + Σ_k I_d(j,k)·r_k·φ + δ, summed over worker nodes k,
    where I_d(j,k) = 0 when the server is on worker k's own machine (its GPUs reach it over the
    host, not the network), and r_k is the number of messages node k sends: its GPU count
    (one replica per GPU), or 1 with hierarchical reduction (I_p, ``local_replication``: the
    node's GPUs reduce locally first). The paper writes this as r^{I_p}; its text makes clear the
    count drops to one per node when I_p holds, which is what is computed here.
    Both directions are counted: workers push gradients and pull parameters, two symmetric
    transfers (supplementary §2), so the transfer and overhead sums are doubled; δ is paid once.

    The node's own reduction under I_p (decision; the paper's Eq. 2 leaves it out). "The node's
    GPUs reduce locally first" is work: the executor (``runtime.executor.ps``) reduces the
    node's gradients to its leader before the push and broadcasts the pulled parameters from it
    after the pull, two collectives among the node's g_k GPUs, on every node with g_k > 1 (the
    server's own node too), the nodes in parallel. Each is charged Eq. 3's per-call terms,
    g_k·φ + δ, and no transfer time: traffic inside a host is free of it in Eq. 2 already
    (I_d(j,k) = 0 for the server's own node). In parallel over the nodes, so the node with the
    most GPUs counts once: + 2·g·φ + 2·δ. Left out, Eq. 2 made I_p free (r_k messages → 1) and
    ranked locally replicated PS first wherever messages are small: on runtimes-v2
    NCF-sparse__B10 (4 GPUs a node, 4-13 ms steps) its ten fastest predictions were mostly
    replicated PS strategies measured at 10-20 ms, against 4.1 ms for the measured best (no
    replication). With the step, Eq. 1-3's pairwise accuracy (default constants, merged labels)
    there rose 0.790 → 0.841, on runtimes-v2 BERT-3L__B5 0.760 → 0.778, elsewhere within ±0.01.
    Charging the bytes as well (2·c_i(m_i)/b_intra) gave the same Eq. 1-3 accuracies but cost
    the in-domain residual model on BERT-6L__B9 0.008 (split seeds 5-24)
    (benchmarks/results/analytical_local_replication_step-2026-11-29.txt).
    """
    transfer = 0.0
    messages = 0.0
    for k in cluster.worker_nodes:
        if k == server:
            continue
        r = 1 if local_replication else cluster.nodes[k].gpus
        transfer += message_bytes / cluster.link_bytes_per_s(server, k) * r
        messages += r
    if not (local_replication and has_local_step(cluster)):
        return Terms(2.0 * transfer, 2.0 * messages, 1.0)
    most = max(cluster.nodes[k].gpus for k in cluster.worker_nodes)
    return Terms(2.0 * transfer, 2.0 * messages + 2.0 * most, 3.0)


def has_local_step(cluster: ClusterSpec) -> bool:
    """Whether local replication (I_p) makes a node reduce and broadcast: some worker node has
    more than one GPU (``ps_terms``)."""
    return any(cluster.nodes[k].gpus > 1 for k in cluster.worker_nodes)


def ring_bandwidth_gbps(cluster: ClusterSpec) -> float:
    """b_m of Eq. 3: the lowest bandwidth between consecutive devices of the ring in rank order.

    The ring visits every GPU node by node (``ClusterSpec.devices``) and closes back to the first.
    """
    devs = cluster.devices
    if len(devs) == 1:
        return cluster.intra_gbps(devs[0].node)
    return min(cluster.device_link_gbps(devs[i], devs[(i + 1) % len(devs)]) for i in range(len(devs)))


def collective_factor(primitive: Primitive, w: int) -> float:
    """How many times the message crosses the slowest ring link per device in Eq. 3.

    AllReduce 2(w-1)/w; ReduceScatter and AllGather (w-1)/w; Broadcast and Reduce 1 (pipelined).
    """
    if primitive == "allreduce":
        return 2.0 * (w - 1) / w
    if primitive in ("reducescatter", "allgather"):
        return (w - 1) / w
    return 1.0


def collective_terms(primitive: Primitive, message_bytes: float, w: int, ring_gbps: float) -> Terms:
    """Eq. 3: T^CC = I_1·2(w-1)c/(w·b_m) + I_2·(w-1)c/(w·b_m) + I_3·c/b_m + w·φ + δ.

    ``message_bytes`` is c_i(m_i), the full buffer the primitive operates on (for AllGather the
    gathered result, i.e. w times one worker's contribution).
    """
    transfer = 0.0 if w <= 1 else collective_factor(primitive, w) * message_bytes / (ring_gbps * GBPS)
    return Terms(transfer, float(w), 1.0)


def hierarchical_allreduce_terms(cluster: ClusterSpec, message_bytes: float) -> Terms:
    """Hierarchical all-reduce: intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather.

    Each phase is Eq. 3 on its own ring. Intra-node phases run on every node at once, so the
    slowest node bounds them: max_k (g_k-1)/g_k·c/b_intra(k), each paid twice (RS and AG), with
    g_max·φ each. The inter-node phase all-reduces across the n worker nodes: 2(n-1)/n·c/b_n,
    with b_n the lowest link of the ring of nodes, plus n·φ. (NCCL runs g concurrent rings of c/g
    bytes, one per local rank; they share the node's NIC, which is the same traffic as one GPU
    per node all-reducing all c bytes.) δ is paid once: the phases are one fused call.
    """
    workers = cluster.worker_nodes
    g_max = max(cluster.nodes[k].gpus for k in workers)
    intra = max(
        (
            collective_factor("reducescatter", cluster.nodes[k].gpus)
            * message_bytes
            / (cluster.intra_gbps(k) * GBPS)
            for k in workers
        ),
        default=0.0,
    )
    n = len(workers)
    transfer = 2.0 * intra
    phi_coef = 2.0 * g_max if g_max > 1 else 0.0
    if n > 1:
        b_n = min(cluster.link_gbps(workers[i], workers[(i + 1) % n]) for i in range(n))
        transfer += collective_factor("allreduce", n) * message_bytes / (b_n * GBPS)
        phi_coef += n
    return Terms(transfer, phi_coef, 1.0)


def one_way_latency_s(cluster: ClusterSpec, a: int, b: int) -> float:
    """One-way network latency between nodes a and b, seconds: (L_a + L_b) / 2 of the nodes'
    ``latency_us`` (each node's link adds its half in each direction, as the testbed's netem
    does); 0 inside a node (NVLink/PCIe latency, ~1-3 µs, is below this model's resolution)."""
    if a == b:
        return 0.0
    return (cluster.nodes[a].latency_us + cluster.nodes[b].latency_us) / 2 * 1e-6


def ps_latency_s(cluster: ClusterSpec, server: int) -> float:
    """Latency of one PS shard on ``server``: a push and then a pull, each one way over the
    slowest (highest-latency) path from a worker node. Workers' messages travel concurrently, so
    latency is paid once per direction, not per message (φ, the per-message CPU cost, is per message)."""
    return 2.0 * max((one_way_latency_s(cluster, server, k) for k in cluster.worker_nodes), default=0.0)


def collective_latency_s(primitive: Primitive, cluster: ClusterSpec) -> float:
    """Latency of one ring collective over every GPU: its sequential hops times the worst hop.

    AllReduce 2(w-1) hops (reduce-scatter then all-gather), AllGather and ReduceScatter w-1.
    """
    devs = cluster.devices
    w = len(devs)
    if w <= 1:
        return 0.0
    hop = max(one_way_latency_s(cluster, devs[i].node, devs[(i + 1) % w].node) for i in range(w))
    hops = 2 * (w - 1) if primitive == "allreduce" else w - 1
    return hops * hop


def hierarchical_latency_s(cluster: ClusterSpec) -> float:
    """Latency of a hierarchical all-reduce: only the inter-node all-reduce's 2(n-1) hops cross
    the network (the intra-node phases are on NVLink/PCIe)."""
    workers = cluster.worker_nodes
    n = len(workers)
    if n <= 1:
        return 0.0
    hop = max(one_way_latency_s(cluster, workers[i], workers[(i + 1) % n]) for i in range(n))
    return 2 * (n - 1) * hop


def node_compute_times(model: ModelSpec, cluster: ClusterSpec, params: CostParams) -> dict[int, float]:
    """T_comp of one step on each worker node's GPUs: forward + backward of every layer.

    ``simulator.analytical.compute.layer_times`` (per-layer roofline, or a measured profile) for
    the node's device type at the model's per-GPU batch; the executor's replay sleeps the same
    per-layer times.
    """
    per_type: dict[str, float] = {}
    out = {}
    for k in cluster.worker_nodes:
        dt = cluster.device_type(k)
        if dt.name not in per_type:
            per_type[dt.name] = compute.step_seconds(model, dt, model.batch_size, params)
        out[k] = per_type[dt.name]
    return out


def compute_time(model: ModelSpec, cluster: ClusterSpec, params: CostParams) -> float:
    """T_comp of a synchronous data-parallel step: the slowest worker bounds it.

    Cached by the identity of (model, cluster, params), all frozen: the vectorised scorer asks
    once per batch of strategies and pays the per-layer roofline once per model and cluster.
    """
    key = (id(model), id(cluster), id(params))
    hit = _T_COMP_CACHE.get(key)
    if hit is not None and hit[0] is model and hit[1] is cluster and hit[2] is params:
        return hit[3]
    t = max(node_compute_times(model, cluster, params).values())
    if len(_T_COMP_CACHE) >= 64:
        _T_COMP_CACHE.clear()
    _T_COMP_CACHE[key] = (model, cluster, params, t)
    return t


_T_COMP_CACHE: dict[tuple[int, int, int], tuple[ModelSpec, ClusterSpec, CostParams, float]] = {}


def compute_source(model: ModelSpec, cluster: ClusterSpec, params: CostParams) -> compute.ComputeTimes:
    """The compute times of the slowest worker node (with ``source``: roofline or profile)."""
    node_t = node_compute_times(model, cluster, params)
    slowest = max(node_t, key=lambda k: node_t[k])
    return compute.layer_times(model, cluster.device_type(slowest), model.batch_size, params)


def iteration_time(t_comp: float, t_sync: float) -> float:
    """Supplementary Eq. 1: T = max(T_comp, T_sync) (communication overlaps computation)."""
    return max(t_comp, t_sync)


def price_per_second(cluster: ClusterSpec) -> float:
    """What the whole cluster costs per second of use, from its nodes' hourly prices (USD)."""
    return sum(n.price_per_hour for n in cluster.nodes) / 3600.0
