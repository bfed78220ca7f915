"""A plain loop over one strategy's shards with the scalar formulas: the vectorised scorer's oracle.

Used by tests only (and the throughput benchmark's comparison column); it shares nothing with
the vectorised path but ``formulas``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.analytical import compute
from simulator.analytical import formulas as f
from simulator.analytical.params import CostParams
from simulator.spec import DTYPE_BYTES, ClusterSpec, ModelSpec, PSSync, Strategy, comm


@dataclass(frozen=True)
class ReferenceCost:
    """One strategy's times, seconds; servers by node index, calls by ``CallKey``."""

    t_comp: float
    t_ps: float
    t_cc: float
    t_sync: float
    t_iter: float
    server_time: dict[int, float]
    call_time: dict[CallKey, float]


#: A collective call: the executor's unit (``comm.unit_key``) and whether its shards are sparse.
CallKey = tuple[int, str, str, int | None, bool]


def reference_cost(model: ModelSpec, cluster: ClusterSpec, s: Strategy, params: CostParams) -> ReferenceCost:
    """Eq. 1-3 for one strategy, shard by shard."""
    server_time: dict[int, float] = {}
    call_bytes: dict[CallKey, float] = {}
    call_lowrank: dict[CallKey, set[bool]] = {}
    ready = _layer_ready(model, cluster, params)
    call_ready: dict[CallKey, float] = {}
    ps_units: list[tuple[int, float, float]] = []  # (server, ready, seconds) per PS shard
    for shard in s.shards(model):
        var = model.variables[shard.var_index]
        dtype_bytes = DTYPE_BYTES[var.dtype]
        rows = shard.shape[0]
        cols = math.prod(shard.shape[1:])
        values = float(shard.bytes)
        if shard.sparse:
            index = var.density * rows * f.INDEX_BYTES
            values = shard.grad_bytes
        else:
            index = 0.0
        sync = shard.sync
        if isinstance(sync, PSSync):
            j = cluster.node_index[sync.server]
            terms = f.ps_terms(cluster, j, sync.local_replication, values + index)
            if params.ps_round_s is None:
                seconds = terms.seconds(params) + f.ps_latency_s(cluster, j)
            else:
                seconds = terms.transfer + comm.ps_rounds(shard.sparse) * params.ps_round_s
                if sync.local_replication and f.has_local_step(cluster) and params.call_overhead_s:
                    seconds += comm.local_replication_calls(shard.sparse) * params.call_overhead_s
            server_time[j] = server_time.get(j, 0.0) + seconds
            ps_units.append((j, ready[model.variable_layer[shard.var_index]], seconds))
        else:
            comp = sync.compressor
            c = f.compressed_bytes(comp.kind, values, index, dtype_bytes, rows, cols, comp.rank or 0)
            key = (*comm.unit_key(sync), shard.sparse)
            call_bytes[key] = call_bytes.get(key, 0.0) + c
            lowrank = comp.kind == "powersgd" and comm.powersgd_rank(rows, cols, comp.rank or 0) is not None
            call_lowrank.setdefault(key, set()).add(lowrank)
            r = ready[model.variable_layer[shard.var_index]]
            call_ready[key] = max(call_ready.get(key, 0.0), r)
    w = cluster.num_gpus
    ring = f.ring_bandwidth_gbps(cluster)
    call_time: dict[CallKey, float] = {}
    for key, nbytes in call_bytes.items():
        _, algorithm, _, _, sparse = key
        issued = comm.primitive_calls(
            algorithm,
            plain=not sparse and False in call_lowrank[key],
            lowrank=True in call_lowrank[key],
            sparse=sparse,
        )
        if sparse:
            terms = f.collective_terms("allgather", w * nbytes, w, ring)
        elif algorithm == "ring":
            terms = f.collective_terms("allreduce", nbytes, w, ring)
        else:
            terms = f.hierarchical_allreduce_terms(cluster, nbytes)
        if params.call_overhead_s is None:  # Eq. 3's constant and the hops' latency, per op run
            if sparse:
                latency = f.collective_latency_s("allgather", cluster)
            elif algorithm == "ring":
                latency = f.collective_latency_s("allreduce", cluster)
            else:
                latency = f.hierarchical_latency_s(cluster)
            runs = 1 if sparse else issued["allreduce"] // comm.calls_per_allreduce(algorithm)
            call_time[key] = terms.transfer + runs * (terms.seconds(params) - terms.transfer + latency)
        else:  # the measured α of every backend call the executor issues
            ag = params.allgather_call_s if params.allgather_call_s is not None else params.call_overhead_s
            call_time[key] = (
                terms.transfer
                + issued.get("allreduce", 0) * params.call_overhead_s
                + issued.get("allgather", 0) * ag
                + (params.unit_overhead_s or 0.0)
            )
    t_ps = max(server_time.values(), default=0.0)
    t_cc = sum(call_time.values())
    t_sync = t_ps + t_cc if params.combine == "sum" else max(t_ps, t_cc)
    t_comp = f.compute_time(model, cluster, params)
    if params.overlap == "full":
        t_iter = f.iteration_time(t_comp, t_sync)
    else:
        calls = [(call_ready[k], t, 0.0) for k, t in call_time.items()]
        if params.combine == "sum":
            total = sum(server_time.values())
            share = t_ps / total if total > 0 else 0.0
            end = _channel_end(calls + [(r, t / 2 * share, t / 2 * share) for _, r, t in ps_units])
        else:
            ends = [_channel_end(calls)]
            ends += [_channel_end([(r, t / 2, t / 2) for k, r, t in ps_units if k == j]) for j in server_time]
            end = max(ends)
        t_iter = max(t_comp, end)
    return ReferenceCost(t_comp, t_ps, t_cc, t_sync, t_iter, server_time, call_time)


def _layer_ready(model: ModelSpec, cluster: ClusterSpec, params: CostParams) -> list[float]:
    """When each layer's gradients are final on the slowest worker node: T_fwd + Σ_{l' ≥ l} T_bwd."""
    slowest = None
    for k in cluster.worker_nodes:
        t = compute.layer_times(model, cluster.device_type(k), model.batch_size, params)
        if slowest is None or t.step > slowest.step:
            slowest = t
    assert slowest is not None
    fwd = sum(float(x) for x in slowest.fwd)
    bwd = [float(x) for x in slowest.bwd]
    return [fwd + sum(bwd[layer:]) for layer in range(len(bwd))]


def _channel_end(units: list[tuple[float, float, float]]) -> float:
    """A serial channel taking (ready, seconds, tail) units in order of readiness: when its last
    unit ends, plus that unit's tail (a PS shard's pull after its push)."""
    end, tail = 0.0, 0.0
    for ready, seconds, after in sorted(units, key=lambda u: u[0]):
        end, tail = max(end, ready) + seconds, after
    return end + tail
