"""cost_breakdown: one strategy's predicted times with a per-server and per-collective-call breakdown."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from simulator.analytical import formulas as f
from simulator.analytical.arrays import COMPRESSORS, OP_NAMES, cluster_arrays, model_arrays
from simulator.analytical.batch import encode
from simulator.analytical.params import CostParams
from simulator.analytical.vectorised import score
from simulator.spec import ClusterSpec, ModelSpec, Strategy


@dataclass(frozen=True)
class ServerCost:
    """Eq. 2 accumulated over the PS shards one node serves (seconds, bytes per direction)."""

    time: float
    transfer: float
    messages: float  # coefficient of φ: messages per step, both directions
    shards: int
    bytes: float  # Σ c_i(m_i) of its shards (one worker's message per shard)


@dataclass(frozen=True)
class CallCost:
    """Eq. 3 for one collective call (a merge group's fused op)."""

    group: int
    op: str
    time: float
    transfer: float
    shards: int
    bytes: float  # Σ c_i(m_i) of the merged shards


@dataclass(frozen=True)
class CostBreakdown:
    """The analytical cost of one strategy (seconds unless noted)."""

    t_comp: float
    t_sync: float
    t_iter: float
    throughput: float  # samples per second over the whole cluster
    t_ps: float  # busiest server
    t_cc: float  # all collective calls
    cost_per_iteration: float  # USD, from node prices
    ps: dict[str, ServerCost] = field(default_factory=dict)
    collective: dict[str, CallCost] = field(default_factory=dict)
    # Which compute model gave T_comp (slowest node): "roofline", "profile" (a measured profile
    # for this model, device, dtype and batch) or "profile+roofline" (a profile missing layers).
    compute_source: str = "roofline"
    compute_profiled_layers: int = 0  # layers whose times came from the profile
    # E: when the synchronisation overlapped with backward ends (``overlap``); T = max(T_comp, E).
    # With overlap="bucket" E may be below T_sync (a PS shard's pull overlaps the next push), or
    # above it (buckets wait for their gradients); with overlap="full" E = T_sync (Eq. 1).
    t_sync_end: float = 0.0
    overlap: str = "bucket"

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON shape: t_comp, t_sync, t_iter, throughput, ps{server}, collective{group/op},
        compute_source (roofline / profile / profile+roofline)."""
        out = asdict(self)
        out["busiest_server"] = max(self.ps, key=lambda k: self.ps[k].time) if self.ps else None
        return out


def cost_breakdown(
    model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, params: CostParams | None = None
) -> CostBreakdown:
    """Eq. 1-3 for ``strategy`` (assumed valid: ``Strategy.check``), with its breakdown."""
    params = params or CostParams()
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, [strategy])
    s = score(ma, ca, b, params, detail=True)
    assert s.server_terms is not None and s.server_shards is not None and s.server_bytes is not None
    assert s.call_terms is not None and s.call_shards is not None and s.call_bytes is not None
    ps = {
        cluster.nodes[j].name: ServerCost(
            time=float(s.server_time[0, j]),
            transfer=float(s.server_terms[0, j, 0]),
            messages=float(s.server_terms[0, j, 1]),
            shards=int(s.server_shards[0, j]),
            bytes=float(s.server_bytes[0, j]),
        )
        for j in range(len(cluster.nodes))
        if s.server_shards[0, j] > 0
    }
    collective = {}
    for g in range(len(b.call_strategy)):
        op = OP_NAMES[int(b.call_op[g])]
        group = int(b.call_group[g])
        row = int(np.flatnonzero(b.call == g)[0])
        key = f"{group}/{op}"  # one executor unit per key (simulator.spec.comm.unit_key)
        if op == "allgather" and b.algorithm[row] == 1:
            key += "/hierarchical"
        if b.compressor[row]:
            key += f"/{COMPRESSORS[int(b.compressor[row])]}{int(b.rank[row]) or ''}"
        collective[key] = CallCost(
            group=group,
            op=op,
            time=float(s.call_time[g]),
            transfer=float(s.call_terms[g, 0]),
            shards=int(s.call_shards[g]),
            bytes=float(s.call_bytes[g]),
        )
    comp = f.compute_source(model, cluster, params)
    return CostBreakdown(
        compute_source=comp.source,
        compute_profiled_layers=comp.profiled_layers,
        t_comp=float(s.t_comp[0]),
        t_sync=float(s.t_sync[0]),
        t_iter=float(s.t_iter[0]),
        throughput=float(s.throughput[0]),
        t_ps=float(s.t_ps[0]),
        t_cc=float(s.t_cc[0]),
        t_sync_end=float(s.t_sync_end[0]) if s.t_sync_end is not None else float(s.t_sync[0]),
        overlap=params.overlap,
        cost_per_iteration=float(s.cost[0]),
        ps=ps,
        collective=collective,
    )
