"""HeterPS's cost model (Section 4.1, Formulas 2-8): stage times, throughput and money of a layer schedule.

A model's L layers are scheduled to T resource types (``ClusterSpec.resource_types``); the maximal
runs of layers on one type are the stages S_1..S_K, and stage S_i runs data-parallel on k_i units
of its type t_i. For each stage the paper assumes profiles measured on one unit with a small batch
B_o: the original computation time OCT_i and the original data-communication time ODT_i (to the
next stage). With k_i units, Amdahl's law (Formulas 2-3) gives, per sample::

    CT_i = OCT_i / B_o * (1 - α_i + α_i / k_i)                         (2)
    DT_i = ODT_i / B_o * (1 - β_i + β_i / k_i)                         (3)
    ET_i = B * max{CT_i, DT_i}   (computation and communication overlap; one iteration of B)   (4)
    Throughput_i = B / ET_i                                            (5)
    Throughput = min_i Throughput_i      (a pipeline runs at its slowest stage)              (6)
    ET = epochs * M / Throughput         (M samples per epoch; the paper's L in Formula 7)  (7)
    Cost = ET * Σ_i p_{t_i} * k_i        (p_t per unit and second here; USD per hour in the spec) (8)

Formula 4 is printed as max{CT_i, DT_i}; we scale it by B so that Formula 5 is samples per second.

**Where the profiles come from.** There is no cluster to profile, so OCT and ODT are derived from
the model spec and the per-unit figures of each type (a roofline stand-in for the paper's
measurements), layer by layer, then summed over the stage:

- computation of layer l on type t, one unit, B_o samples: the shared per-layer roofline,
  ``simulator.analytical.compute.layer_times(model, device_t, B_o, params)`` forward + backward
  (issue 15: the search, the benchmarks and the testbed replay take compute from this one
  function). Its kernel-launch part (kernels x ``launch_overhead_us``) is the serial part
  (1 - α) that more units do not shorten (each unit still launches every kernel); the rest,
  the max of FLOPs and bytes terms, is the parallel part α. It is split by calling
  ``layer_times`` a second time on the same device with launch overhead 0;
- data communication of layer l: on a GPU type the rows of a sparse table, which live in host
  memory (HeterPS keeps tables in host memory / SSD), cross the unit's host link twice (rows in,
  gradients out): parallel work; synchronising the layer's dense weights among the stage's units
  (ring all-reduce, ``2 W / b``, independent of k): the serial part (1 - β);
- the stage's boundaries (decision below): every tensor produced before a cut and read after it
  crosses the cut (tensors that skip a stage are relayed, as pipelines do): activations forward,
  their gradients backward. A stage moves its share of both of its cuts over its own units' links,
  one time per direction of a full-duplex link; parallel work. The first stage has no cut before
  it, the last none after it.

**Decision: the device a resource type computes on (``resource_device``; 2026-11-25).**
``layer_times`` needs a ``DeviceType`` (peak per dtype, memory bandwidth, launch overhead); a
``ResourceType`` is a rentable unit. A GPU type whose name ends in a device type the cluster
declares (the zoo's ``g4dn.12xlarge-T4`` -> ``T4-16GB``, ``p3.16xlarge-V100`` ->
``V100-SXM2-16GB``, ...: the first '-'-separated word of the device name) computes on that
device spec, the same object the AutoSync side uses (its figures and sources are the zoo's,
``simulator/extract/zoo_resources.py``: NVIDIA's data sheets; launch overhead the DeviceType
default, 5 us, not a published figure). Any other type is built from its
own figures: peak = ``tflops`` for every dtype (a CPU core of the zoo: 2 AVX-512 FMA units x 16
FP32 lanes x 3.0 GHz = 96 GFLOPS, Xeon Platinum 8275CL; one unit is one core, so cores x per-core
peak = 1 x 0.096 TFLOPS; no separate half-precision path), ``memory_bw_gbs`` (the two
sockets' 281.6 GB/s, 6 channels of DDR4-2933 each, shared by the 48 cores), and launch overhead = ``overhead_us`` (its
per-op dispatch). ``ResourceType.efficiency`` is no longer used: the op-class efficiencies of
``CostParams.op_efficiency`` (and ``efficiency_of(device)``) replace the blanket constant, as in
every other cost model. ``ResourceType.overhead_us`` is used only for types without a device
spec. Formulas 2-8 are unchanged; every money figure moved (the re-run results are in
``benchmarks/results/heterogeneous_*-2026-11-25e.txt``).

**Decision: the boundary is charged on both sides, per direction (ours, measured).** The paper's
Formula 3 counts ODT_i "to the next stage" only, i.e. the sender pays for the transfer and the
receiver nothing. On the testbed (``benchmarks/results/heterogeneous_measured-2026-11-25.txt``,
one factor at a time) that was wrong twice: a link is full duplex, so activations out and
gradients in do not queue behind each other (NCE's AIBox plan, 64 CPU cores sending to 6 T4s,
ran 1.57-1.68x faster than the sender charged with 2 x the cut bytes; 1.86x with the gradients
left out), and a stage with few units receiving many units' activations is bound by its own NICs
(2EMB's AIBox plan, 128 cores into one V100, ran at 0.62x; 1.0x once only the V100's NIC was made
4x faster). So with c_in = cut bytes before the stage's first layer (from the previous stage of
type p) and c_out = cut bytes after its last layer (to the next stage of type n), on a unit of the
stage's type t::

    in-direction  = activations in (c_in)  + gradients in (c_out)
    out-direction = activations out (c_out) + gradients out (c_in)
    boundary_i    = B_o * (c_in / r(t, p) + c_out / r(t, n))    (both directions carry as much)

and r(t, u) is the per-unit rate a unit of type t moves data to or from type u at: its own NIC,
capped by a link the cluster declares between t and u (``resource_links``). Not the smaller of
the two NICs (``link_gbps``'s default): with k_t != k_u units each side is bound by its own k x
NIC, and the slower side is the slower stage (Formula 6 takes the min). A stage's profile thus
depends on the types of the stages before and after it: ``stage(first, last, t, next, prev)``.

α_i and β_i are then the parallel fractions of the summed times, so Amdahl's law on a stage equals
the sum of the laws of its layers. A stage also needs enough units to hold its sparse tables
(with one optimiser slot: 2x the table) in their host memory, and its dense weights must fit the
memory of one unit; both are checked here and enforced by provisioning.

Shapes:
    LayerCosts arrays: (L, T) per layer and type; cut bytes (L + 1,); link, port (T, T) bytes/s;
    segment arrays (L+1, L+1, T, T+1, T+1) = (first, end, type, next type, previous type; T = none)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
from simulator.spec import GBPS, ClusterSpec, DeviceType, ModelSpec, ResourcePlan, ResourceType
from simulator.spec.resources import link_gbps, resource_plan_issues, stage_bounds

TABLE_STATE = 2.0  # a sparse table is stored with one optimiser slot (e.g. Adagrad's accumulator)


@dataclass(frozen=True)
class Workload:
    """What the training job asks for: the throughput limit, the batch and how many samples.

    ``batch_size`` is B, the samples of one iteration; ``profile_batch`` is B_o, the small batch
    the profiles are taken at (None: B_o = B). ``samples_per_epoch`` is M and ``epochs`` the
    paper's L of Formula 7 (renamed: the paper also calls the number of layers L).
    """

    throughput_limit: float  # Throughput_limit of Formula 11, samples per second
    batch_size: int = 512  # B, samples per iteration
    profile_batch: int | None = None  # B_o; None: B
    samples_per_epoch: float = 1e9  # M
    epochs: int = 1  # the number of epochs (L in Formula 7)

    def __post_init__(self) -> None:
        for name in ("throughput_limit", "batch_size", "samples_per_epoch", "epochs"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.profile_batch is not None and self.profile_batch < 1:
            raise ValueError(f"profile_batch: must be >= 1, got {self.profile_batch}")

    @property
    def b_o(self) -> int:
        return self.profile_batch or self.batch_size

    @property
    def samples(self) -> float:
        """Samples to train: epochs * M."""
        return self.epochs * self.samples_per_epoch


@dataclass(frozen=True)
class StageProfile:
    """The profile of one stage S_i = layers [first, last) on type ``rtype`` (an index into T).

    ``oct``/``odt`` are OCT_i and ODT_i (seconds for B_o samples on one unit); ``alpha``/``beta``
    their parallel fractions; ``min_units`` the units its sparse tables need; ``fits`` whether its
    dense weights fit one unit.
    """

    first: int
    last: int
    rtype: int
    oct: float
    alpha: float
    odt: float
    beta: float
    b_o: int
    min_units: int = 1
    fits: bool = True

    def ct(self, k: float) -> float:
        """CT_i of Formula 2: computation seconds per sample with k units."""
        return self.oct / self.b_o * (1 - self.alpha + self.alpha / k)

    def dt(self, k: float) -> float:
        """DT_i of Formula 3: data-communication seconds per sample with k units."""
        return self.odt / self.b_o * (1 - self.beta + self.beta / k)

    def execution_time(self, k: float, batch: int) -> float:
        """ET_i of Formula 4: seconds of one iteration of ``batch`` samples."""
        return batch * max(self.ct(k), self.dt(k))

    def throughput(self, k: float) -> float:
        """Throughput_i of Formula 5, samples per second (inf for a stage with no work)."""
        t = max(self.ct(k), self.dt(k))
        return math.inf if t <= 0 else 1.0 / t


@dataclass(frozen=True)
class SegmentArrays:
    """OCT, α, ODT, β, memory floor and fit of every stage (j, e, t, next type, previous type).

    Shape (L+1, L+1, T, T+1, T+1); index T in the last two axes means "no such stage".
    """

    oct: np.ndarray
    alpha: np.ndarray
    odt: np.ndarray
    beta: np.ndarray
    min_units: np.ndarray
    fits: np.ndarray
    b_o: int


@dataclass(frozen=True)
class CostReport:
    """Formulas 4-8 for one plan: per-stage times and throughputs, the pipeline's, and the money."""

    stages: tuple[StageProfile, ...]
    units: tuple[int, ...]
    ct: tuple[float, ...]  # CT_i, s per sample
    dt: tuple[float, ...]  # DT_i, s per sample
    et: tuple[float, ...]  # ET_i, s per iteration of B samples
    stage_throughput: tuple[float, ...]  # Throughput_i, samples/s
    throughput: float  # Formula 6
    training_time: float  # ET of Formula 7, s
    money: float  # Cost of Formula 8, USD
    price_per_hour: float  # Σ p_t k_t, USD per hour


class HeterogeneousCostModel:
    """HeterPS's cost model of ``model`` on the resource types of ``cluster`` for ``workload``.

    Per-layer, per-type costs are precomputed once (arrays of shape (L, T)); a stage's profile is
    a sum over its layers plus its boundary transfers, which depend only on the stage's layers,
    its type and the types of the stages before and after it. Thread safe after construction
    (read-only).
    """

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, params: CostParams | None = None
    ) -> None:
        if not cluster.resource_types:
            raise ValueError(f"cluster: {cluster.name!r} declares no resource_types")
        self.model = model
        self.cluster = cluster
        self.workload = workload
        self.params = params if params is not None else CostParams()
        self.types: tuple[ResourceType, ...] = cluster.resource_types
        #: The device each type computes on (``resource_device``).
        self.devices: tuple[DeviceType, ...] = tuple(resource_device(t, cluster) for t in self.types)
        self.type_index = {t.name: i for i, t in enumerate(self.types)}
        #: p_t in USD per unit and second.
        self.price_per_s = np.array([t.price_per_hour / 3600.0 for t in self.types])
        self.count = np.array([t.count for t in self.types], dtype=np.int64)
        self._layer_costs()

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_types(self) -> int:
        return len(self.types)

    def _layer_costs(self) -> None:
        b_o = self.workload.b_o
        n, nt = self.num_layers, self.num_types
        comp_par = np.zeros((n, nt))
        comp_ser = np.zeros((n, nt))
        comm_par = np.zeros((n, nt))
        comm_ser = np.zeros((n, nt))
        table = np.zeros(n)
        dense = np.zeros(n)
        for li, layer in enumerate(self.model.layers):
            sparse_rows = layer.activation_bytes if any(v.sparse for v in layer.variables) else 0.0
            dense[li] = sum(v.bytes for v in layer.variables if not v.sparse)
            table[li] = sum(v.bytes for v in layer.variables if v.sparse)
            for ti, t in enumerate(self.types):
                if t.host_link_gbps is not None and sparse_rows:
                    comm_par[li, ti] = b_o * 2 * sparse_rows / (t.host_link_gbps * GBPS)
                if dense[li]:
                    comm_ser[li, ti] = 2 * dense[li] / (link_gbps(self.cluster, t.name, t.name) * GBPS)
        for ti, (total, work) in enumerate(self.layer_compute()):
            comp_par[:, ti] = work
            comp_ser[:, ti] = total - work
        # Prefix sums over layers: a stage's totals are differences of two rows.
        self._p_comp_par = _prefix(comp_par)
        self._p_comp_ser = _prefix(comp_ser)
        self._p_comm_par = _prefix(comm_par)
        self._p_comm_ser = _prefix(comm_ser)
        self._p_table = np.concatenate([[0.0], np.cumsum(table)])
        self._p_dense = np.concatenate([[0.0], np.cumsum(dense)])  # one unit holds its stage's weights
        self.cut_bytes = _cut_bytes(self.model)
        self.link_bytes_per_s = np.array(
            [[link_gbps(self.cluster, a.name, b.name) * GBPS for b in self.types] for a in self.types]
        )
        #: r(t, u): bytes/s one unit of type t moves to or from type u (its NIC, capped by a declared link).
        self.port_bytes_per_s = np.array(
            [[_port_gbps(self.cluster, a, b) * GBPS for b in self.types] for a in self.types]
        )

    def layer_compute(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per type: (total, launch-free) fwd + bwd seconds (L,) of every layer for B_o samples on one unit.

        Both from ``layer_times`` (the one compute function); total - launch-free is the serial part.
        """
        out = []
        for dev in self.devices:
            total = layer_times(self.model, dev, self.workload.b_o, self.params)
            free = layer_times(
                self.model, dev.model_copy(update={"launch_overhead_us": 0.0}), self.workload.b_o, self.params
            )
            out.append((total.fwd + total.bwd, np.minimum(free.fwd + free.bwd, total.fwd + total.bwd)))
        return out

    @cached_property
    def _lists(self) -> tuple[list[list[float]], ...]:
        # Plain Python lists: stage profiles are built millions of times by brute force.
        return (
            self._p_comp_par.tolist(),
            self._p_comp_ser.tolist(),
            self._p_comm_par.tolist(),
            self._p_comm_ser.tolist(),
            self.port_bytes_per_s.tolist(),
        )

    def stage(
        self, first: int, last: int, rtype: int, next_type: int | None, prev_type: int | None
    ) -> StageProfile:
        """The profile of layers [first, last) on type ``rtype`` between stages of types
        ``prev_type`` and ``next_type`` (None: no such stage, i.e. first == 0 / last == L)."""
        cp, cs, mp, ms, port = self._lists
        b_o = self.workload.b_o
        comp_par = cp[last][rtype] - cp[first][rtype]
        comp_ser = cs[last][rtype] - cs[first][rtype]
        comm_par = mp[last][rtype] - mp[first][rtype]
        comm_ser = ms[last][rtype] - ms[first][rtype]
        # One direction of the full-duplex link (both carry as much): see the module docstring.
        if next_type is not None:
            comm_par += b_o * self.cut_bytes[last] / port[rtype][next_type]
        if prev_type is not None:
            comm_par += b_o * self.cut_bytes[first] / port[rtype][prev_type]
        oct_ = comp_par + comp_ser
        odt = comm_par + comm_ser
        t = self.types[rtype]
        tables = TABLE_STATE * (self._p_table[last] - self._p_table[first])
        dense = float(self._p_dense[last] - self._p_dense[first])
        return StageProfile(
            first=first,
            last=last,
            rtype=rtype,
            oct=oct_,
            alpha=comp_par / oct_ if oct_ > 0 else 1.0,
            odt=odt,
            beta=comm_par / odt if odt > 0 else 1.0,
            b_o=b_o,
            min_units=max(1, math.ceil(tables / (t.host_memory_gb * 1e9) - 1e-9)),
            fits=dense <= t.memory_gb * 1e9,
        )

    def segment_arrays(self) -> SegmentArrays:
        """Every possible stage at once: ``stage(j, e, t, n, p)`` for all j < e, t, and n, p in T + [None].

        The vectorised twin of ``stage`` (the exact solver's input); index T means "no next /
        previous stage"; that side then moves nothing, as in ``stage``. Entries with e <= j are
        meaningless (OCT = ODT = 0).
        """
        b_o = self.workload.b_o
        n, nt = self.num_layers, self.num_types

        def seg(p: np.ndarray) -> np.ndarray:  # (L+1, L+1, T): p[e] - p[j]
            return p[None, :, :] - p[:, None, :]

        comp_par, comp_ser = seg(self._p_comp_par), seg(self._p_comp_ser)
        comm_ser = seg(self._p_comm_ser)
        cut = np.asarray(self.cut_bytes)  # (L+1,)
        inv_port = np.concatenate([1.0 / self.port_bytes_per_s, np.zeros((nt, 1))], axis=1)  # (T, T+1)
        out = b_o * cut[None, :, None, None, None] * inv_port[None, None, :, :, None]  # to the next (n)
        inn = b_o * cut[:, None, None, None, None] * inv_port[None, None, :, None, :]  # from the previous (p)
        comm_par = seg(self._p_comm_par)[..., None, None] + out + inn  # (L+1, L+1, T, T+1, T+1)
        oct_ = np.broadcast_to((comp_par + comp_ser)[..., None, None], comm_par.shape)
        odt = comm_par + comm_ser[..., None, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            alpha = np.where(oct_ > 0, np.broadcast_to(comp_par[..., None, None], oct_.shape) / oct_, 1.0)
            beta = np.where(odt > 0, comm_par / odt, 1.0)
        tables = TABLE_STATE * (self._p_table[None, :] - self._p_table[:, None])  # (L+1, L+1)
        host = np.array([t.host_memory_gb * 1e9 for t in self.types])
        min_units = np.maximum(1, np.ceil(tables[..., None] / host - 1e-9)).astype(np.int64)
        dense = self._p_dense[None, :] - self._p_dense[:, None]  # (L+1, L+1)
        mem = np.array([t.memory_gb * 1e9 for t in self.types])
        fits = dense[..., None] <= mem
        shape = (n + 1, n + 1, nt, nt + 1, nt + 1)
        return SegmentArrays(
            oct=np.ascontiguousarray(oct_),
            alpha=np.ascontiguousarray(alpha),
            odt=odt,
            beta=beta,
            min_units=np.broadcast_to(min_units[..., None, None], shape),
            fits=np.broadcast_to(fits[..., None, None], shape),
            b_o=b_o,
        )

    def stages(self, assignment: Sequence[int]) -> tuple[StageProfile, ...]:
        """Stage profiles of a per-layer assignment of type indices (maximal runs)."""
        if len(assignment) != self.num_layers:
            raise ValueError(f"assignment: {len(assignment)} entries for {self.num_layers} layers")
        runs = stage_bounds(assignment)
        out = []
        for i, (a, b) in enumerate(runs):
            nxt = assignment[runs[i + 1][0]] if i + 1 < len(runs) else None
            prev = assignment[runs[i - 1][0]] if i > 0 else None
            out.append(self.stage(a, b, assignment[a], nxt, prev))
        return tuple(out)

    def plan_stages(self, plan: ResourcePlan) -> tuple[StageProfile, ...]:
        return self.stages([self.type_index[t] for t in plan.assignment])

    def money_rate(self, stages: Sequence[StageProfile], units: Sequence[int]) -> float:
        """Σ_i p_{t_i} k_i in USD per second."""
        return float(sum(self.price_per_s[s.rtype] * k for s, k in zip(stages, units, strict=True)))

    def report(self, stages: Sequence[StageProfile], units: Sequence[int]) -> CostReport:
        """Formulas 2-8 for stages with ``units`` each."""
        b = self.workload.batch_size
        ct = tuple(s.ct(k) for s, k in zip(stages, units, strict=True))
        dt = tuple(s.dt(k) for s, k in zip(stages, units, strict=True))
        et = tuple(b * max(c, d) for c, d in zip(ct, dt, strict=True))
        thr = tuple(s.throughput(k) for s, k in zip(stages, units, strict=True))
        throughput = min(thr)
        training_time = self.workload.samples / throughput
        rate = self.money_rate(stages, units)
        return CostReport(
            stages=tuple(stages),
            units=tuple(units),
            ct=ct,
            dt=dt,
            et=et,
            stage_throughput=thr,
            throughput=throughput,
            training_time=training_time,
            money=training_time * rate,
            price_per_hour=rate * 3600.0,
        )

    def evaluate(self, plan: ResourcePlan) -> CostReport:
        """The cost report of a provisioned plan; SpecError if it does not fit the model or cluster."""
        plan.check(self.model, self.cluster)
        return self.report(self.plan_stages(plan), [st.units for st in plan.stages])

    def plan_issues(self, plan: ResourcePlan) -> list[str]:
        """Field-path reasons the plan is not valid here (Formula 11's counts included)."""
        return [str(i) for i in resource_plan_issues(plan, self.model, self.cluster)]


def resource_device(t: ResourceType, cluster: ClusterSpec) -> DeviceType:
    """The device a unit of type ``t`` computes on (see the module docstring's decision).

    A GPU type named ``<instance>-<X>`` computes on the cluster's device type whose name's first
    '-'-separated word is X (the zoo's device spec); any other type on a device built from its
    own figures: ``tflops`` for every dtype, ``memory_bw_gbs``, ``overhead_us`` per kernel.
    """
    if t.kind == "gpu":
        tag = t.name.rsplit("-", 1)[-1]
        for d in cluster.device_types:
            if d.name.split("-")[0] == tag:
                return d
    return DeviceType(
        name=t.name,
        fp32_tflops=t.tflops,
        fp16_tflops=t.tflops,
        memory_gb=t.memory_gb,
        memory_bw_gbs=t.memory_bw_gbs,
        launch_overhead_us=t.overhead_us,
        source=f"resource type {t.name!r}: its own per-unit figures ({t.instance_type or 'no instance named'})",
    )


def _port_gbps(cluster: ClusterSpec, a: ResourceType, b: ResourceType) -> float:
    """r(a, b): Gbit/s one unit of type a moves to or from type b: its NIC, capped by a declared a-b link."""
    for link in cluster.resource_links:
        if {link.a, link.b} == {a.name, b.name}:
            return min(a.nic_gbps, link.gbps)
    return a.nic_gbps


def _prefix(a: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((1, a.shape[1])), np.cumsum(a, axis=0)], axis=0)


def _cut_bytes(model: ModelSpec) -> list[float]:
    """Bytes per sample live across the cut before layer c (c = 0..L): outputs read after the cut."""
    n = len(model.layers)
    last_use = [-1] * n
    for src, dst in model.edges:
        last_use[src] = max(last_use[src], dst)
    cut = [0.0] * (n + 1)
    for src, layer in enumerate(model.layers):
        for c in range(src + 1, last_use[src] + 1):
            cut[c] += layer.activation_bytes
    return cut
