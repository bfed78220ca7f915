"""Published per-call latencies α by link kind, for a cluster nobody has probed yet.

The cost model's per-call α (``CostParams.call_overhead_s`` and ``allgather_call_s``) is best
*measured* on the cluster itself: the testbed's probe (``runtime/executor/probe.py``) or
nccl-tests through ``strategist calibrate --nccl-tests``. Before any measurement, this module
gives NCCL's own latency model, which NCCL uses to choose algorithms and protocols:

    α(collective) = baseLat + (steps - inter_steps) · hwLat[intra link] + inter_steps · hwLat[NET]

with, for the ring algorithm, ``steps`` = 2 (n - 1) for all-reduce and n - 1 for all-gather over
n GPUs, and ``inter_steps`` = 2 (N - 1) or N - 1 over N nodes (the ring's hops that cross the
network). Constants, in microseconds, for the ring algorithm and the Simple protocol (the one NCCL
uses for the large buckets gradient synchronisation sends), from NVIDIA NCCL
``src/graph/tuning.cc`` (the ``baseLat`` and ``hwLat`` tables; read at commit 01afd20a of
github.com/NVIDIA/nccl, NCCL 2.x):

    baseLat Ring/Simple              8.4
    hwLat   NVLink  Ring/Simple      3.4   per step
    hwLat   PCI     Ring/Simple      5.7   per step
    hwLat   NET     Ring/Simple      9.6   per step (InfiniBand or Ethernet, NCCL's net transport)

Decisions (NCCL is silent on them, this model is not): the intra-node link is NVLink when the
cluster's ``intra_node_gbps`` is at least 400 Gbit/s (NVLink 2+ and NVSwitch nodes; PCIe 3/4 x16
gives 126-252), else PCIe; NCCL's ring "plateau" factor (x1.9 for large multi-node all-reduces)
is left out, because it models bandwidth, which the cost model's transfer term already has. TCP
(gloo, a PS over sockets) has no published table worth citing: its α depends on the host's
kernel and scheduling and is 0.2-12 ms on this project's test hosts (runtime/testbed/README.md),
so for TCP clusters α must be measured (``strategist calibrate``, the testbed's probe).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec

#: NCCL tuning.cc, ring algorithm, Simple protocol (µs).
NCCL_RING_SIMPLE_BASE_US = 8.4
NCCL_RING_SIMPLE_HOP_US: dict[str, float] = {"nvlink": 3.4, "pcie": 5.7, "net": 9.6}
#: Intra-node bandwidth from which a node's GPUs are taken to be on NVLink (Gbit/s).
NVLINK_MIN_GBPS = 400.0

IntraLink = Literal["nvlink", "pcie"]


def intra_link(cluster: ClusterSpec) -> IntraLink:
    """NVLink or PCIe inside a node, from the cluster's intra-node bandwidth (see the module)."""
    return "nvlink" if cluster.intra_node_gbps >= NVLINK_MIN_GBPS else "pcie"


def nccl_ring_alpha_s(
    cluster: ClusterSpec, primitive: Literal["allreduce", "allgather"], intra: IntraLink | None = None
) -> float:
    """NCCL's latency of one ring collective over every GPU of ``cluster``, seconds."""
    n, nodes = cluster.num_gpus, len(cluster.worker_nodes)
    if n <= 1:
        return 0.0
    steps, inter = (2 * (n - 1), 2 * (nodes - 1)) if primitive == "allreduce" else (n - 1, nodes - 1)
    hop = NCCL_RING_SIMPLE_HOP_US
    link = intra or intra_link(cluster)
    return (NCCL_RING_SIMPLE_BASE_US + (steps - inter) * hop[link] + inter * hop["net"]) * 1e-6


def nccl_params(cluster: ClusterSpec, params: CostParams | None = None) -> CostParams:
    """``params`` with NCCL's published per-call α for ``cluster`` (PS traffic keeps Eq. 2)."""
    base = params or CostParams()
    return replace(
        base,
        call_overhead_s=nccl_ring_alpha_s(cluster, "allreduce"),
        allgather_call_s=nccl_ring_alpha_s(cluster, "allgather"),
    )
