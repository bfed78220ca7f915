"""Hybrid cost model: one training step of a Whale ``HybridPlan`` on a (heterogeneous) cluster.

Every part is an existing model, called rather than restated:

- per-device compute: the compute model's per-layer roofline
  (``simulator.analytical.compute.layer_times``, ``stage_seconds`` here; with default op
  efficiencies it is ``simulator.pipeline.cost.stage_compute_seconds``, what the executors'
  replay sleeps) on *each device's own type* for the rows it runs, with that type's
  ``CostParams.efficiency_of``;
- data-parallel gradient sync: AutoSync's Eq. 3 (``simulator.analytical.formulas.collective_terms``)
  for one all-reduce of the TaskGraph's gradient bytes over its copies, on the ring of those
  devices (its slowest link), plus w·φ + δ and the ring's latency, or, when
  ``CostParams.call_overhead_s`` is set, the measured per-call cost α instead of both (a measured
  call contains the links' latency: the rule the AutoSync scorer follows);
- pipelines (``num_micro_batches > 1``): the pipeline issue's event simulation of the kFkB action
  lists (``simulator.pipeline.simulate`` of ``kfkb``) per nested replica, stage times on the
  replica's own devices, boundary transfers = ``simulator.pipeline.cost.boundary_bytes`` over the
  link between the two stages' nodes; each stage's all-reduce over the nested replicas starts when
  the last replica finished that stage: step = max_s (max_r end_{r,s} + sync_s);
- split collectives: the shard ops of ``simulator.hybrid.sharding`` (the executor's Megatron-style
  patterns: column/row-parallel linears, attention by heads, vocab-parallel embeddings) and the
  collectives they issue; bytes = the layer's activation bytes × the replica's batch; Eq. 3 over
  the VirtualDevice's ring. Sharded layers' compute is scaled by the device's split fraction;
  other layers run whole on every device.

Decisions where neither the paper nor the executor fixes it:
- Non-pipelined plans run their TaskGraphs one after another on every nested replica (a bridge
  is a barrier): replica time R_r = Σ_t (slowest device of t + t's split collectives) + bridges.
- Gradient sync of non-pipelined plans, ``overlap=True`` (the default, what ``runtime.hybrid``
  runs since issue 19's overlap change): each TaskGraph's gradients are all-reduced in the buckets
  of ``simulator.hybrid.buckets.grad_buckets`` (DDP's rule, the same call the runtime makes, the
  same ``bucket_bytes``), one call per bucket, issued in backward order as soon as every device of
  the group has finished the bucket's lowest layer's backward. Bucket k of TaskGraph t is ready on
  device d at e_d − rest_d(k): e_d is when d's backward of t ends (the last TaskGraph: its forward
  and backward run back to back, so e_d = R_r's end of t − (max_d' x_d' − x_d) with x = fwd + bwd;
  earlier TaskGraphs start their backward at a bridge barrier: x = bwd), rest_d(k) is d's backward
  of the layers below the bucket. Ready = the latest device of the group (a collective starts when
  its last member arrives). Buckets go through one channel in ready order, one after another
  (gloo's ring is bandwidth-bound: two concurrent rings share the NIC, so serial is what the wire
  allows): end_k = max(ready_k, end_{k-1}) + sync_k, sync_k = Eq. 3 for the bucket's bytes (with
  its own per-call cost and ring latency). step = max(max_r R_r, end of the last bucket). With one
  bucket this is the old non-overlapped step, R + sync, since the bucket is ready at the end.
  ``overlap=False``: one fused all-reduce per TaskGraph after the whole backward, serialised:
  step = max_r R_r + Σ_t sync_t (the runtime's ``HybridConfig(overlap_sync=False)``).
  TaskGraphCost.sync is the sum of the TaskGraph's bucket calls either way; HybridCost.exposed_sync
  is the part of the step after the last replica's backward.
- A bridge between two TaskGraphs costs nothing when both are replicate TaskGraphs on the same
  devices with the same shares (rows stay put); otherwise the replica's boundary activation is
  all-gathered over the union of the two VirtualDevices, forward and (its gradient) backward.
- Pipelined plans need ``degree == 1`` TaskGraphs (one device per stage and nested replica), what
  the pipeline executor runs; other pipelined plans raise ValueError naming the field.

Shapes: T TaskGraphs, R nested replicas; ``busy``: {device: seconds of compute per step}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.analytical.compute import layer_times
from simulator.analytical.formulas import Primitive, collective_terms, one_way_latency_s
from simulator.analytical.params import CostParams
from simulator.hybrid.buckets import BUCKET_BYTES, Bucket, grad_buckets
from simulator.hybrid.sharding import SHARDED, shard_ops
from simulator.pipeline.cost import boundary_bytes
from simulator.pipeline.events import simulate
from simulator.pipeline.schedule import kfkb
from simulator.spec import GBPS, ClusterSpec, DeviceType, HybridPlan, ModelSpec


@dataclass(frozen=True)
class TaskGraphCost:
    """One TaskGraph's share of a step: per-device compute, split collectives, gradient sync."""

    compute: dict[str, float]  # device -> forward + backward seconds per step
    split_comm: tuple[float, ...]  # per nested replica: seconds of split collectives per step
    sync: float  # seconds of its data-parallel gradient all-reduce


@dataclass(frozen=True)
class HybridCost:
    """The predicted step and where it goes."""

    seconds: float  # one training step
    task_graphs: tuple[TaskGraphCost, ...]
    busy: dict[str, float]  # device -> compute seconds per step (all TaskGraphs it runs)
    replica_seconds: tuple[float, ...]  # per nested replica, before the final all-reduces
    bridge: tuple[float, ...]  # per nested replica: bridge seconds (0 for pipelines: in the simulation)
    exposed_sync: float = 0.0  # seconds of the step after the last replica's backward (sync not hidden)

    @property
    def sync(self) -> float:
        return sum(t.sync for t in self.task_graphs)


def _type(cluster: ClusterSpec, device: str) -> DeviceType:
    return cluster.device_type(device.rpartition(":")[0])


def ring_gbps(cluster: ClusterSpec, devices: Sequence[str]) -> float:
    """Eq. 3's b_m over ``devices`` in the given order: the slowest link of their ring."""
    nodes = [cluster.node_index[d.rpartition(":")[0]] for d in devices]
    if len(nodes) == 1:
        return cluster.intra_gbps(nodes[0])
    return min(cluster.link_gbps(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes)))


def collective_seconds(
    cluster: ClusterSpec, devices: Sequence[str], primitive: Primitive, nbytes: float, params: CostParams
) -> float:
    """One collective of ``nbytes`` over ``devices``: Eq. 3 plus the ring's hop latency, or, with a
    measured per-call cost α (``CostParams.call_overhead_s``), the transfer plus α alone. The one
    rule the AutoSync scorer (collectives and PS shards with ``ps_round_s``) follows too: a measured
    call already contains the links' latency, so it replaces Eq. 3's constant and the hops."""
    w = len(devices)
    if w <= 1 or nbytes <= 0:
        return 0.0
    terms = collective_terms(primitive, nbytes, w, ring_gbps(cluster, devices))
    if params.call_overhead_s is not None:
        return terms.transfer + params.call_overhead_s
    seconds = terms.seconds(params)
    nodes = [cluster.node_index[d.rpartition(":")[0]] for d in devices]
    hop = max(one_way_latency_s(cluster, nodes[i], nodes[(i + 1) % w]) for i in range(w))
    hops = 2 * (w - 1) if primitive == "allreduce" else w - 1
    return seconds + hops * hop


def _grad_bytes(model: ModelSpec, first: int, last: int) -> float:
    return float(sum(v.grad_bytes for layer in model.layers[first:last] for v in layer.variables))


def stage_seconds(
    model: ModelSpec, device: DeviceType, first: int, last: int, rows: int, params: CostParams
) -> tuple[float, float]:
    """(forward, backward) seconds of layers [first, last) for ``rows`` samples on ``device``.

    ``layer_times`` with ``params`` (its ``efficiency_of(device)``): with default op efficiencies
    this is ``simulator.pipeline.cost.stage_compute_seconds``, the executors' replay.
    """
    if rows <= 0:
        return 0.0, 0.0
    t = layer_times(model, device, rows, params)
    return float(t.fwd[first:last].sum()), float(t.bwd[first:last].sum())


def _split_comm_parts(
    model: ModelSpec,
    cluster: ClusterSpec,
    devices: Sequence[str],
    first: int,
    last: int,
    rows: int,
    params: CostParams,
) -> tuple[float, float]:
    """(forward, backward) seconds of a split TaskGraph's collectives for ``rows`` samples
    (``sharding``'s rule; the runtime issues the forward ones after its forward, the backward ones
    after its backward)."""
    fwd = bwd = 0.0
    for op in shard_ops(model, first, last):
        li = op.layer
        out = model.layers[li].activation_bytes * rows
        if op.kind in ("row", "emb", "attn"):
            fwd += collective_seconds(cluster, devices, "allreduce", out, params)
        if op.kind == "col" and op.gather_after:
            fwd += collective_seconds(cluster, devices, "allgather", out, params)
        if op.kind in ("col", "attn") and li > 0:
            prev = model.layers[li - 1].activation_bytes * rows
            bwd += collective_seconds(cluster, devices, "allreduce", prev, params)
    return fwd, bwd


def _split_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    devices: Sequence[str],
    first: int,
    last: int,
    rows: int,
    params: CostParams,
) -> float:
    """Seconds of a split TaskGraph's collectives for ``rows`` samples (``sharding``'s rule)."""
    return sum(_split_comm_parts(model, cluster, devices, first, last, rows, params))


def predict(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: HybridPlan,
    params: CostParams | None = None,
    *,
    overlap: bool = True,
    bucket_bytes: float = BUCKET_BYTES,
) -> HybridCost:
    """Predicted seconds of one step of ``plan`` (see the module docstring for every term).

    ``overlap`` / ``bucket_bytes``: the runtime's ``HybridConfig.overlap_sync`` / ``bucket_bytes``
    (bucketed all-reduces overlapped with backward, or one call per TaskGraph after it); they do
    not apply to pipelined plans (``runtime.pipeline`` syncs each stage after its last backward).
    """
    params = params or CostParams()
    plan.check(model, cluster)
    if plan.num_micro_batches > 1:
        return _pipelined(model, cluster, plan, params)
    return _sequential(model, cluster, plan, params, overlap, bucket_bytes)


def _sync_groups(plan: HybridPlan, t: int) -> tuple[list[list[str]], float]:
    """The DP groups of TaskGraph t and the fraction of its gradient bytes the largest one moves.

    replicate: one group, every device of every nested replica, the whole gradient; split: shard
    j's devices over the nested replicas, the largest shard bounds the step.
    """
    tg = plan.task_graphs[t]
    if tg.primitive == "replicate":
        return [list(tg.devices)], 1.0
    w = tg.split_shares or (1,) * tg.degree
    return [[vd.devices[j] for vd in tg.virtual_devices] for j in range(tg.degree)], max(w) / sum(w)


def _bucket_sync(cluster: ClusterSpec, plan: HybridPlan, t: int, nbytes: float, params: CostParams) -> float:
    groups, biggest = _sync_groups(plan, t)
    return max(collective_seconds(cluster, g, "allreduce", nbytes * biggest, params) for g in groups)


def _sync(model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, t: int, params: CostParams) -> float:
    tg = plan.task_graphs[t]
    return _bucket_sync(cluster, plan, t, _grad_bytes(model, tg.first_layer, tg.last_layer), params)


@dataclass(frozen=True)
class DeviceTimes:
    """One device's per-layer forward/backward seconds of one TaskGraph (layers [first, last))."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]

    @property
    def total(self) -> float:
        return sum(self.fwd) + sum(self.bwd)


def device_layer_times(
    model: ModelSpec,
    device: DeviceType,
    first: int,
    last: int,
    rows: int,
    fraction: float | None,
    params: CostParams,
) -> DeviceTimes:
    """Per-layer (forward, backward) seconds of layers [first, last) for ``rows`` samples on
    ``device``: ``layer_times`` with ``params`` (the one compute model, profiles included);
    ``fraction`` (a split TaskGraph's device): its sharded layers scaled by it, others whole.
    The cost model and the runtime's replay (``runtime.hybrid.worker``) both call this."""
    n = last - first
    if rows <= 0:
        return DeviceTimes((0.0,) * n, (0.0,) * n)
    t = layer_times(model, device, rows, params)
    sharded = {op.layer for op in shard_ops(model, first, last) if op.kind in SHARDED} if fraction else set()
    f = [float(t.fwd[li]) * (fraction if li in sharded and fraction else 1.0) for li in range(first, last)]
    b = [float(t.bwd[li]) * (fraction if li in sharded and fraction else 1.0) for li in range(first, last)]
    return DeviceTimes(tuple(f), tuple(b))


def _sequential(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: HybridPlan,
    params: CostParams,
    overlap: bool = True,
    bucket_bytes: float = BUCKET_BYTES,
) -> HybridCost:
    T = len(plan.task_graphs)
    tgs: list[TaskGraphCost] = []
    busy: dict[str, float] = {d: 0.0 for d in plan.devices}
    per_replica = [0.0] * plan.nested_dp
    # times[t][r]: {device: per-layer times}; comm_b[t][r]: split collectives after t's backward
    times: list[list[dict[str, DeviceTimes]]] = []
    comm_b: list[list[float]] = []
    buckets: list[tuple[Bucket, ...]] = []
    for t, tg in enumerate(plan.task_graphs):
        compute: dict[str, float] = {}
        comm = []
        times.append([])
        comm_b.append([])
        for r, vd in enumerate(tg.virtual_devices):
            batch = plan.replica_batch(r)
            rows = tg.shares(r, batch)
            if tg.primitive == "replicate":
                dts = [
                    device_layer_times(
                        model, _type(cluster, d), tg.first_layer, tg.last_layer, rows[j], None, params
                    )
                    for j, d in enumerate(vd.devices)
                ]
                cf = cb = 0.0
            else:
                w = tg.split_shares or (1,) * tg.degree
                dts = [
                    device_layer_times(
                        model, _type(cluster, d), tg.first_layer, tg.last_layer, batch, w[j] / sum(w), params
                    )
                    for j, d in enumerate(vd.devices)
                ]
                cf, cb = _split_comm_parts(
                    model, cluster, vd.devices, tg.first_layer, tg.last_layer, batch, params
                )
            secs = [x.total for x in dts]
            times[t].append(dict(zip(vd.devices, dts, strict=True)))
            comm_b[t].append(cb)
            compute.update(zip(vd.devices, secs, strict=True))
            comm.append(cf + cb)
            per_replica[r] += max(secs) + cf + cb
        for d, s in compute.items():
            busy[d] += s
        buckets.append(grad_buckets(model, tg.first_layer, tg.last_layer, bucket_bytes) if overlap else ())
        sync = (
            sum(_bucket_sync(cluster, plan, t, b.grad_bytes, params) for b in buckets[t])
            if overlap
            else _sync(model, cluster, plan, t, params)
        )
        tgs.append(TaskGraphCost(compute, tuple(comm), sync))
    bridges = [0.0] * plan.nested_dp
    bridge_at = [[0.0] * plan.nested_dp for _ in range(max(0, T - 1))]
    for t in range(T - 1):
        a, b = plan.task_graphs[t], plan.task_graphs[t + 1]
        for r in range(plan.nested_dp):
            batch = plan.replica_batch(r)
            va, vb = a.virtual_devices[r], b.virtual_devices[r]
            same = (
                a.primitive == b.primitive == "replicate"
                and va.devices == vb.devices
                and a.shares(r, batch) == b.shares(r, batch)
            )
            if same:
                continue
            union = list(dict.fromkeys((*va.devices, *vb.devices)))
            nbytes = model.layers[a.last_layer - 1].activation_bytes * batch
            bridge_at[t][r] = 2 * collective_seconds(cluster, union, "allgather", nbytes, params)
            bridges[r] += bridge_at[t][r]
    replica = [p + b for p, b in zip(per_replica, bridges, strict=True)]
    end = max(replica)
    if not overlap:
        seconds = end + sum(t.sync for t in tgs)
        return HybridCost(seconds, tuple(tgs), busy, tuple(replica), tuple(bridges), seconds - end)
    # the bucket channel (module docstring): ready times, then one call after another
    calls: list[tuple[float, int, float]] = []  # (ready, order, seconds)
    for t, tg in enumerate(plan.task_graphs):
        if not buckets[t]:
            continue
        for k, bucket in enumerate(buckets[t]):
            ready = 0.0
            for r in range(plan.nested_dp):
                # end of t's backward (incl. its split collectives) on replica r
                e_t = (
                    replica[r]
                    - sum(
                        max(x.total if u == T - 1 else sum(x.bwd) for x in times[u][r].values())
                        + comm_b[u][r]
                        for u in range(t)
                    )
                    - sum(bridge_at[u][r] / 2 for u in range(t))
                )
                e_t -= comm_b[t][r]
                xs = {d: (x.total if t == T - 1 else sum(x.bwd)) for d, x in times[t][r].items()}
                top = max(xs.values())
                for d, x in times[t][r].items():
                    rest = sum(x.bwd[: bucket.lo - tg.first_layer])
                    ready = max(ready, e_t - (top - xs[d]) - rest)
            calls.append(
                (ready, -t * 1_000_000 + k, _bucket_sync(cluster, plan, t, bucket.grad_bytes, params))
            )
    channel = 0.0
    for at, _, dur in sorted(calls):
        channel = max(channel, at) + dur
    seconds = max(end, channel)
    return HybridCost(seconds, tuple(tgs), busy, tuple(replica), tuple(bridges), seconds - end)


def _pipelined(model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, params: CostParams) -> HybridCost:
    for i, tg in enumerate(plan.task_graphs):
        if tg.degree != 1:
            raise ValueError(
                f"task_graphs.{i}.degree: a pipelined TaskGraph needs one device per nested replica "
                f"(got {tg.degree}); nest data parallelism with nested_dp instead"
            )
    pplan = plan.to_plan()
    P = len(plan.task_graphs)
    b = plan.micro_batch_size
    syncs = [_sync(model, cluster, plan, t, params) for t in range(P)]
    ends: list[tuple[float, ...]] = []
    busy: dict[str, float] = {d: 0.0 for d in plan.devices}
    compute: list[dict[str, float]] = [{} for _ in range(P)]
    for r in range(plan.nested_dp):
        n = plan.replica_batch(r) // b
        devs = [tg.virtual_devices[r].devices[0] for tg in plan.task_graphs]
        fwd, bwd = [], []
        for tg, d in zip(plan.task_graphs, devs, strict=True):
            dt = _type(cluster, d)
            f, bw = stage_seconds(model, dt, tg.first_layer, tg.last_layer, b, params)
            fwd.append(f)
            bwd.append(bw)
        transfers: dict[tuple[int, int], float] = {}
        for s in range(P - 1):
            ia = cluster.node_index[devs[s].rpartition(":")[0]]
            ib = cluster.node_index[devs[s + 1].rpartition(":")[0]]
            secs = boundary_bytes(model, pplan, s) / (cluster.link_gbps(ia, ib) * GBPS) + one_way_latency_s(
                cluster, ia, ib
            )
            transfers[(s, s + 1)] = transfers[(s + 1, s)] = secs
        if n < 1:
            ends.append((0.0,) * P)
            continue
        timeline = simulate(kfkb(P, n, pplan.group_size(n)), fwd, bwd, transfers)
        ends.append(timeline.stage_end)
        for s, d in enumerate(devs):
            busy[d] += n * (fwd[s] + bwd[s])
            compute[s][d] = n * (fwd[s] + bwd[s])
    seconds = max(max(e[s] for e in ends) + syncs[s] for s in range(P))
    tgs = tuple(TaskGraphCost(compute[s], (0.0,) * plan.nested_dp, syncs[s]) for s in range(P))
    replica = tuple(max(e) for e in ends)
    return HybridCost(seconds, tgs, busy, replica, (0.0,) * plan.nested_dp)
