"""Measure a provisioned HeterPS plan on the emulated cluster: throughput, per-stage busy time, money.

``measure_plan(model, resources, plan, provisioning, config=...)`` runs the plan's stages as real
processes (``runtime/heterogeneous/worker.py``) on shaped links (``runtime.testbed.multihomed``)
and returns a ``HeterogeneousRun``.

**What is emulated, and how.** Stage S_i has k_i units of type t_i. Its units are run as
``g_i = min(k_i, config.max_groups)`` *unit groups*, one process and namespace each, holding
k_i / g_i units (split as evenly as integers allow); a group stands for its units running in
parallel (two shared cores cannot host 128 processes). Per iteration of B samples a group:

- replays compute at its type's speed: the units each take B / k_i samples, so the group sleeps
  one unit's time, ``B * CT_i(k_i)`` of Formula 2, with OCT_i and α_i from the cost model, whose
  per-layer compute is ``simulator.analytical.compute.layer_times`` on the type's device
  (``heterogeneous.resource_device``): the one compute function the search, every benchmark and
  the executor's replay use (issue 15), so replayed and predicted compute agree by construction;
- really transfers, on one thread so a group's communication times add up as in ODT_i:
  sparse lookups of its share of the ids from the stage's parameter server (real float32 rows,
  a real gather, and the rows' gradients pushed back and applied), its share of the activations
  to every group of the next stage (split by their units) and of the gradients to every group of
  the previous stage, and a push/pull of the stage's dense weights through the stage's dense PS;
- overlaps compute and communication (Formula 4's max), and starts an iteration when the previous
  stage's activations for it have arrived (a receiver holds at most two iterations ahead, so a
  fast stage is held back by TCP's flow control, as in a pipeline).

Links (both directions shaped, ``tc tbf``), per group of m units:

- data network (activations): ``m x nic_gbps`` of the type (each unit's NIC share). Forward
  activations and backward gradients travel in opposite directions of these full-duplex links,
  and the receiver's NIC bounds them as much as the sender's; the cost model charges each stage
  one direction's bytes (cut in + cut out) over its own NIC share (since commit 2336a47; it used
  to charge 2 x the cut out on the sender only);
- host network (sparse rows): GPU types ``m x host_link_gbps`` (PCIe; the tables live in host
  memory); CPU types unshaped (the tables are in the cores' own memory, as the cost model assumes);
- sync network (dense weights): ``link_gbps(t, t)`` per group (the servers' full NIC, the cost
  model's serial part 2W / b); the dense PS gets ``g_i x`` that, so it is not the bottleneck.

**What the testbed found** (``benchmarks/results/heterogeneous_measured-2026-11-25.txt``): where
a stage's time is its compute or its dense-weight synchronisation (the RL and all-GPU plans of
CTRDNN, 2EMB, NCE), measured throughput is within 0.5-6 % of Formula 6. Two of the cost model's
former assumptions about activations between stages did not hold on full-duplex links, and each
decided one AIBox plan (checked by changing one factor, ``--factor``):

- the model charged the boundary 2 x cut bytes on the sending stage's link, forward and backward
  added up; on a full-duplex NIC the activations leave while the gradients arrive. NCE's AIBox
  CPU stage, which only sends activations, ran 1.6-1.8 x the predicted rate, and more when the
  gradients are left out (1.86 x; so one direction sets its rate);
- the model charged nothing to the *receiving* stage, yet its NICs must take the activations in
  and send the gradients back. 2EMB's AIBox plan fed 128 cores' activations into one V100
  (a 3.1 Gbit/s NIC share): 0.62 x the prediction; with only the V100's NIC 4 x faster in the
  emulation (the prediction does not change) it measured 1.0 x.

The cost model now charges both (``simulator.analytical.heterogeneous``, module docstring);
``heterogeneous_measured-2026-11-25b.txt`` has the plans measured against it.

**Pacing** (since 2026-11-25d, ``pace``; ``heterogeneous_measured-2026-11-25d.txt``). A veth
sends at memory speed; only the tbf behind it holds the emulated rate. NCE's AIBox plan (a CPU
stage whose NIC is saturated both ways: activations out, the same bytes of gradients in) measured
0.68-0.84 of the prediction, and 0.99 without the gradients. ``ss -tin`` in the CPU group's
namespace during a run showed why: the gradients queued on its ingress link delay and bunch the
ACKs of its activation flows (ACK compression), BBR (the host's congestion control) then
estimated 1.3 Gbit/s on a 22 Mbit/s link, paced and let TCP small queues hold that much, the
sender's own 256 KiB tbf queue overflowed, and 5-10 % of the bytes were retransmitted, with
RTO stalls of ~200 ms (real time, not dilated, against 0.3 s iterations). Nothing of this scales
with the emulation: the kernel's TCP runs at real time with a 20 µs RTT while the link is 750 x
slower, a regime no real cluster is in. A real NIC cannot put bits on the wire faster than its
line rate, so each activation/gradient socket's pacing is capped at its group's emulated NIC
rate (``SO_MAX_PACING_RATE``; TCP's own pacing honours it, and TSQ then keeps about 1 ms of it in
the qdisc), the sender's NIC as a physical limit rather than a queue that drops. The cost model
is unchanged: it treats the two directions of a full-duplex link as independent, which they are
once the sender cannot outrun its NIC. ``ack_priority`` (pure ACKs ahead of data on a shaped
link, an htb under the tbf) and ``tcp_congestion`` are diagnostics, off by default.

**Scale and dilation** (as the executor's): bytes are divided by ``scale``, links by
``scale x dilation``, compute sleeps ``dilation`` times longer, and every reported time is divided
by ``dilation``. None: chosen from the cost model so that an iteration takes about
``target_iteration_s`` and the bytes moved stay below ``target_mb_per_s`` (two shared cores).

**Throughput and money.** A group's period is the median time between the ends of its
iterations after warm-up; a stage's is its slowest group's; the pipeline's throughput is B over
the slowest stage's period (every stage runs every iteration, so in steady state the slowest
stage sets the rate). Money is the cost model's Formula 8 with the measured throughput:
``samples / throughput x Σ p_t k_t``.
"""

from __future__ import annotations

import contextlib
import json
import math
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.launch import Gang
from runtime.testbed.multihomed import HomedNode, MultiHomedLoopback, MultiHomedTestbed
from simulator.analytical.heterogeneous import CostReport, HeterogeneousCostModel, Workload
from simulator.spec import GBPS, ClusterSpec, ModelSpec, ResourcePlan
from simulator.spec.resources import link_gbps

WORKER = Path(__file__).with_name("worker.py")
FLOAT = 4
MAX_TABLE_ROWS = 1 << 16  # rows of an emulated table shard (the real ones are 2^28-2^32 rows)


@dataclass(frozen=True)
class MeasureConfig:
    """How a plan is measured. ``workload`` gives B (batch), the samples for money, the limit."""

    workload: Workload
    iterations: int = 8
    warmup: int = 2
    scale: float | None = None  # bytes divisor; None: chosen (see the module docstring)
    dilation: float | None = None  # time dilation D; None: chosen
    max_groups: int = 2  # processes per stage
    ps_shards: int = 2  # sparse PS processes per stage with embedding tables
    testbed: bool = True  # False: loopback, unshaped (logic tests only)
    backward: bool = True  # False: no gradients to the previous stage (a diagnostic: one direction only)
    local_tables: bool = False  # True: a CPU stage's lookups and pushes run inside its compute replay
    data_queue_kib: int | None = None  # the data links' tbf queue (None: the testbed's default); diagnostic
    tcp_congestion: str | None = None  # the namespaces' TCP congestion control (None: the host's default)
    ack_priority: bool = False  # pure TCP ACKs skip the data queued on a shaped link (diagnostic)
    pace: bool = True  # cap each data socket's TCP pacing at its NIC's emulated rate (see "Pacing")
    target_iteration_s: float = 0.3
    target_mb_per_s: float = 40.0
    timeout_s: float = 120.0
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.iterations > self.warmup >= 0, "iterations", "must be > warmup >= 0"),
            (self.scale is None or self.scale >= 1, "scale", "must be >= 1"),
            (self.dilation is None or self.dilation >= 1, "dilation", "must be >= 1"),
            (self.max_groups >= 1, "max_groups", "must be >= 1"),
            (self.ps_shards >= 1, "ps_shards", "must be >= 1"),
            (self.timeout_s > 0, "timeout_s", "must be > 0"),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ValueError(f"MeasureConfig.{name}: {why}")


@dataclass(frozen=True)
class StageMeasurement:
    """One stage: its type and units, measured (real-cluster seconds per iteration) and predicted."""

    resource_type: str
    units: int
    groups: int
    period_s: float  # median time between iterations of its slowest group
    compute_s: float  # replayed compute per iteration
    comm_s: float  # median communication per iteration of its slowest group
    predicted_ct_s: float  # B * CT_i
    predicted_dt_s: float  # B * DT_i
    sparse_s: float = 0.0  # sparse lookups and pushes per iteration (median, slowest group)


@dataclass(frozen=True)
class HeterogeneousRun:
    """A measured plan. ``status`` 'ok' or 'failed' (``reason``); times in the real cluster's seconds."""

    status: str
    reason: str = ""
    throughput: float = 0.0  # samples/s, measured
    money: float = math.inf  # USD, Formula 8 with the measured throughput
    samples: tuple[float, ...] = ()  # throughput of each measured iteration (slowest stage's period)
    stages: tuple[StageMeasurement, ...] = ()
    predicted_throughput: float = 0.0
    predicted_money: float = math.inf
    price_per_hour: float = 0.0
    scale: float = 1.0
    dilation: float = 1.0
    wall_s: float = 0.0
    environment: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ratio(self) -> float:
        """Measured / predicted throughput."""
        return self.throughput / self.predicted_throughput if self.predicted_throughput else math.nan

    @property
    def meets_limit(self) -> bool:
        return self.ok and self.throughput >= self.environment.get("throughput_limit", math.inf)  # type: ignore[operator]


@dataclass
class _Group:
    stage: int
    index: int
    units: int
    node: int = -1


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _as_plan(plan: ResourcePlan | Sequence[str], provisioning: Sequence[int] | None) -> ResourcePlan:
    if isinstance(plan, ResourcePlan):
        if provisioning is None:
            return plan
        units = list(provisioning)
        if len(units) != len(plan.stages):
            raise ValueError(f"provisioning: {len(units)} values for {len(plan.stages)} stages")
        return ResourcePlan.from_assignment(plan.assignment, units, model=plan.model, cluster=plan.cluster)
    if provisioning is None:
        raise ValueError("provisioning: needed with a per-layer assignment")
    return ResourcePlan.from_assignment(list(plan), list(provisioning))


def measure_plan(
    model: ModelSpec,
    resources: ClusterSpec,
    plan: ResourcePlan | Sequence[str],
    provisioning: Sequence[int] | None,
    *,
    config: MeasureConfig,
) -> HeterogeneousRun:
    """Run ``plan`` with ``provisioning`` (units per stage; None: the plan's own) and measure it.

    ``resources`` is the cluster whose ``resource_types`` the plan names; ``plan`` a
    ``ResourcePlan`` or the resource type of every layer. Raises ValueError / SpecError for a plan
    that does not fit; a run that fails (a process died, timeout) returns status 'failed'.
    """
    rp = _as_plan(plan, provisioning)
    cm = HeterogeneousCostModel(model, resources, config.workload)
    report = cm.evaluate(rp)
    return _measure(cm, rp, report, config)


def _measure(
    cm: HeterogeneousCostModel, rp: ResourcePlan, report: CostReport, cfg: MeasureConfig
) -> HeterogeneousRun:
    b = cfg.workload.batch_size
    stages = report.stages
    groups = [
        [_Group(i, g, m) for g, m in enumerate(_split(k, min(k, cfg.max_groups)))]
        for i, k in enumerate(report.units)
    ]
    model = cm.model
    # ---- bytes per iteration (real cluster), then scaled
    cut = cm.cut_bytes
    sparse_layers = [
        [(li, v) for li in range(s.first, s.last) for v in model.layers[li].variables if v.sparse]
        for s in stages
    ]
    dense = [
        sum(v.bytes for li in range(s.first, s.last) for v in model.layers[li].variables if not v.sparse)
        for s in stages
    ]
    traffic = 0.0
    for i, s in enumerate(stages):
        traffic += 2 * b * cut[s.last] if i + 1 < len(stages) else 0.0
        traffic += 2 * b * sum(model.layers[li].activation_bytes for li, _ in sparse_layers[i])
        traffic += 2 * dense[i] * len(groups[i])
    period = b / report.throughput
    dilation = cfg.dilation or max(1.0, cfg.target_iteration_s / period)
    scale = cfg.scale or max(1.0, traffic / (cfg.target_mb_per_s * 1e6 * period * dilation))
    link_scale = scale * dilation

    def mbit(gbps: float) -> float:
        return gbps * 1000.0 / link_scale

    # ---- nodes: groups, one dense PS per stage with dense weights, sparse PS shards per stage
    nodes: list[HomedNode] = []
    for i, gs in enumerate(groups):
        t = cm.types[stages[i].rtype]
        for g in gs:
            rates: dict[str, float | None] = {"data": mbit(g.units * t.nic_gbps)}
            if dense[i]:
                rates["sync"] = mbit(link_gbps(cm.cluster, t.name, t.name))
            if sparse_layers[i]:
                rates["host"] = mbit(g.units * t.host_link_gbps) if t.host_link_gbps else None
            g.node = len(nodes)
            nodes.append(HomedNode(f"s{i}g{g.index}", rates))
    dense_ps: dict[int, int] = {}
    sparse_ps: dict[int, list[int]] = {}
    for i, s in enumerate(stages):
        t = cm.types[s.rtype]
        if dense[i]:
            dense_ps[i] = len(nodes)
            nodes.append(
                HomedNode(f"s{i}dps", {"sync": mbit(len(groups[i]) * link_gbps(cm.cluster, t.name, t.name))})
            )
        if sparse_layers[i]:
            sparse_ps[i] = []
            for k in range(cfg.ps_shards):
                sparse_ps[i].append(len(nodes))
                nodes.append(HomedNode(f"s{i}ps{k}", {"host": None}))
    env: dict[str, object] = {
        "scale": scale,
        "dilation": dilation,
        "throughput_limit": cfg.workload.throughput_limit,
        "groups": [len(gs) for gs in groups],
    }
    queue = cfg.data_queue_kib * 1024 if cfg.data_queue_kib else None
    net: MultiHomedTestbed | MultiHomedLoopback = (
        MultiHomedTestbed(nodes, queue, ack_priority=cfg.ack_priority)
        if cfg.testbed
        else MultiHomedLoopback(nodes)
    )
    start = time.perf_counter()
    with net:
        env.update(net.environment)
        specs: list[dict[str, object]] = []
        for i in range(len(stages)):
            if i in dense_ps:
                floats = max(1, round(dense[i] / scale / FLOAT))
                specs.append({"role": "dense_ps", "node": dense_ps[i], "floats": floats})
            for k, node in enumerate(sparse_ps.get(i, [])):
                tables = [
                    [min(MAX_TABLE_ROWS, max(1, v.shape[0] // cfg.ps_shards)), int(v.shape[1])]
                    for _, v in sparse_layers[i]
                ]
                specs.append({"role": "sparse_ps", "node": node, "tables": tables, "seed": cfg.seed + k})
        for i, s in enumerate(stages):
            k_i = report.units[i]
            for g in groups[i]:
                share = b * g.units / k_i  # samples of this group per iteration
                fwd, bwd = [], []
                if i + 1 < len(stages):
                    nk = report.units[i + 1]
                    for h in groups[i + 1]:
                        nbytes = share * h.units / nk * cut[s.last] / scale
                        fwd.append({"addr": net.endpoint(h.node, "data"), "bytes": max(1, round(nbytes))})
                if i > 0 and cfg.backward:
                    pk = report.units[i - 1]
                    for h in groups[i - 1]:
                        nbytes = share * h.units / pk * cut[s.first] / scale
                        bwd.append({"addr": net.endpoint(h.node, "data"), "bytes": max(1, round(nbytes))})
                sparse = []
                for ti, (li, v) in enumerate(sparse_layers[i]):
                    ids = share * model.layers[li].activation_bytes / (v.shape[1] * FLOAT) / scale
                    per_shard = _split(max(len(sparse_ps[i]), round(ids)), len(sparse_ps[i]))
                    for node, n in zip(sparse_ps[i], per_shard, strict=True):
                        sparse.append({"addr": net.endpoint(node, "host"), "table": ti, "ids": n})
                specs.append(
                    {
                        "role": "group",
                        "node": g.node,
                        "stage": i,
                        "group": g.index,
                        "iterations": cfg.iterations,
                        "compute_s": b * report.ct[i] * dilation,
                        "expect_fwd": len(groups[i - 1]) if i > 0 else 0,
                        "expect_bwd": len(groups[i + 1]) if i + 1 < len(stages) and cfg.backward else 0,
                        "fwd": fwd,
                        "bwd": bwd,
                        "sparse": sparse,
                        "local_tables": cfg.local_tables and cm.types[s.rtype].host_link_gbps is None,
                        "dense": (
                            {
                                "addr": net.endpoint(dense_ps[i], "sync"),
                                "bytes": FLOAT * max(1, round(dense[i] / scale / FLOAT)),
                            }
                            if i in dense_ps
                            else None
                        ),
                        "timeout_s": cfg.timeout_s,
                        "tcp_congestion": cfg.tcp_congestion,
                        "pace_bytes_per_s": (
                            mbit(g.units * cm.types[s.rtype].nic_gbps) * 1e6 / 8
                            if cfg.pace and cfg.testbed
                            else None
                        ),
                        "seed": cfg.seed * 1000 + g.node,
                    }
                )
        records, paced, failure = _run(net, specs, cfg)
        # each group's data sockets' pacing cap as the kernel reports it (bytes/s; -1: no cap)
        env["paced_bytes_per_s"] = {nodes[n].name: v for n, v in paced.items()}
    wall = time.perf_counter() - start
    rate = cm.money_rate(stages, report.units)
    common = {
        "predicted_throughput": report.throughput,
        "predicted_money": report.money,
        "price_per_hour": report.price_per_hour,
        "scale": scale,
        "dilation": dilation,
        "wall_s": wall,
        "environment": env,
    }
    if failure:
        return HeterogeneousRun("failed", failure, **common)  # type: ignore[arg-type]
    per_stage = []
    stage_iters: list[list[float]] = []
    for i, gs in enumerate(groups):
        periods, comms, sparses, iters = [], [], [], []
        for g in gs:
            recs = records[g.node]
            ends = [r["end"] for r in recs]
            diffs = [(ends[j] - ends[j - 1]) / dilation for j in range(max(1, cfg.warmup), len(ends))]
            iters.append(diffs)
            periods.append(statistics.median(diffs))
            comms.append(statistics.median(r["comm"] for r in recs[cfg.warmup :]) / dilation)
            sparses.append(statistics.median(r["sparse"] for r in recs[cfg.warmup :]) / dilation)
        slow = max(range(len(gs)), key=lambda j: periods[j])
        stage_iters.append(iters[slow])
        per_stage.append(
            StageMeasurement(
                resource_type=cm.types[stages[i].rtype].name,
                units=report.units[i],
                groups=len(gs),
                period_s=periods[slow],
                compute_s=b * report.ct[i],
                comm_s=comms[slow],
                sparse_s=sparses[slow],
                predicted_ct_s=b * report.ct[i],
                predicted_dt_s=b * report.dt[i],
            )
        )
    bottleneck = max(range(len(per_stage)), key=lambda j: per_stage[j].period_s)
    thr = b / per_stage[bottleneck].period_s
    samples = tuple(b / d for d in stage_iters[bottleneck])
    money = cfg.workload.samples / thr * rate
    return HeterogeneousRun("ok", "", thr, money, samples, tuple(per_stage), **common)  # type: ignore[arg-type]


def _run(
    net: MultiHomedTestbed | MultiHomedLoopback, specs: list[dict[str, object]], cfg: MeasureConfig
) -> tuple[dict[int, list[dict[str, float]]], dict[int, list[int]], str]:
    """Start every process (rank r runs ``specs[r]`` on its node), wait until every group is
    connected, release the groups together, collect their records; results keyed by node."""
    nodes = [int(s["node"]) for s in specs]  # type: ignore[call-overload]
    for spec, node in zip(specs, nodes, strict=True):
        spec["listen"] = list(net.listen(node))
    groups = [r for r, s in enumerate(specs) if s["role"] == "group"]
    deadline = time.monotonic() + cfg.timeout_s

    def argv(rank: int) -> list[str]:
        return [sys.executable, str(WORKER), json.dumps(specs[rank])]

    with Gang(net, nodes, argv, dist=False, pipes=groups) as gang:
        procs = gang.procs
        waiting = set(groups)
        while waiting:  # every group connected to its peers and servers; fail fast if a process dies
            outs = {r: procs[r].stdout for r in waiting}
            ready, _, _ = select.select([o for o in outs.values() if o is not None], [], [], 0.2)
            for r, out in outs.items():
                if out is not None and out in ready:
                    if not out.readline():
                        return {}, {}, _why(specs, gang, r)
                    waiting.discard(r)
            for r, p in enumerate(procs):
                if p.poll() is not None and (r not in groups or r in waiting):
                    return {}, {}, _why(specs, gang, r)
            if time.monotonic() > deadline:
                return (
                    {},
                    {},
                    f"timeout: {_name(specs[min(waiting)])} did not connect within {cfg.timeout_s:g} s",
                )
        for r in groups:  # release every group at once
            stdin = procs[r].stdin
            assert stdin is not None
            stdin.write(b"go\n")
            stdin.flush()
        records: dict[int, list[dict[str, float]]] = {}
        paced: dict[int, list[int]] = {}
        for r in groups:
            p = procs[r]
            assert p.stdout is not None
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return {}, {}, f"timeout: {_name(specs[r])} did not finish within {cfg.timeout_s:g} s"
            lines = p.stdout.read().decode().strip().splitlines()
            if p.returncode != 0 or not lines:
                return {}, {}, _why(specs, gang, r)
            out = json.loads(lines[-1])
            records[nodes[r]] = out["records"]
            paced[nodes[r]] = out["paced"]
    return records, paced, ""


def _name(spec: dict[str, object]) -> str:
    if spec["role"] == "group":
        return f"stage {spec['stage']} group {spec['group']}"
    return f"{spec['role']} (node {spec['node']})"


def _why(specs: list[dict[str, object]], gang: Gang, rank: int) -> str:
    p = gang.procs[rank]
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=5)
    return f"{_name(specs[rank])} failed (exit {p.returncode}): {gang.stderr_tail(rank) or 'no output'}"


__all__ = ["GBPS", "HeterogeneousRun", "MeasureConfig", "StageMeasurement", "measure_plan"]
