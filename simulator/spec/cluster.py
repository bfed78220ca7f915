"""ClusterSpec: device types, nodes and links of a GPU cluster, and bandwidth b_{j,k} between them."""

from __future__ import annotations

from functools import cached_property
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec.errors import Issue, structural
from simulator.spec.limits import LIMITS, Name, SpecName, Text
from simulator.spec.resources import ResourceLink, ResourceType, resource_issues

GBPS = 1e9 / 8  # bytes per second in one gigabit per second


class DeviceType(BaseModel):
    """An accelerator model with its published peak figures."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="e.g. 'V100-SXM2-32GB'.")
    fp32_tflops: float = Field(ge=LIMITS.min_rate, le=LIMITS.tflops, description="Peak FP32 TFLOPS.")
    fp16_tflops: float = Field(
        ge=LIMITS.min_rate, le=LIMITS.tflops, description="Peak FP16 TFLOPS (tensor cores where present)."
    )
    memory_gb: float = Field(ge=LIMITS.min_rate, le=LIMITS.memory_gb, description="Device memory, GB.")
    memory_bw_gbs: float = Field(
        ge=LIMITS.min_rate, le=LIMITS.memory_bw_gbs, description="Device memory bandwidth, GB/s."
    )
    # Roofline compute model (simulator.analytical.compute); None falls back as documented there.
    tf32_tflops: float | None = Field(
        None,
        ge=LIMITS.min_rate,
        le=LIMITS.tflops,
        description="Peak TF32 tensor-core TFLOPS (dense); None: no TF32 path (FP32 rate).",
    )
    bf16_tflops: float | None = Field(
        None,
        ge=LIMITS.min_rate,
        le=LIMITS.tflops,
        description="Peak BF16 TFLOPS (dense); None: no BF16 path (FP32 rate).",
    )
    launch_overhead_us: float = Field(
        5.0,
        ge=0,
        le=LIMITS.latency_us,
        description="Host-side cost of one kernel launch / op dispatch, microseconds.",
    )
    first_touch_gbs: float | None = Field(
        None,
        ge=LIMITS.min_rate,
        le=LIMITS.memory_bw_gbs,
        description="GB/s of the first write into a tensor the host allocator maps anew (page faults;"
        " CPUs, tensors >= 32 MiB); None: allocations are cached (GPUs), no extra cost.",
    )
    source: Text = Field("", description="Where the published figures come from.")


class Node(BaseModel):
    """One machine: its GPUs, NIC, CPU, host memory and price."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="Unique node name; PS placements refer to it.")
    device: Name = Field(description="Name of one of the cluster's device types.")
    gpus: int = Field(
        ge=0, le=LIMITS.gpus_per_node, description="GPUs on this node (0 for a CPU-only server node)."
    )
    nic_gbps: float = Field(ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="NIC bandwidth, Gbit/s.")
    latency_us: float = Field(
        0.0, ge=0, le=LIMITS.latency_us, description="One-way network latency of the node's link, us."
    )
    cpu_cores: int = Field(8, ge=1, le=LIMITS.cpu_cores, description="Host CPU cores.")
    host_memory_gb: float = Field(
        64.0, ge=LIMITS.min_rate, le=LIMITS.host_memory_gb, description="Host RAM, GB (PS shards live here)."
    )
    price_per_hour: float = Field(
        0.0, ge=0, le=LIMITS.price_per_hour, description="On-demand price, USD per hour."
    )
    instance_type: Text = Field("", description="Cloud instance type or hardware description.")
    intra_gbps: float | None = Field(
        None,
        ge=LIMITS.min_rate,
        le=LIMITS.link_gbps,
        description="GPU-to-GPU bandwidth inside this node; default: the cluster's.",
    )


class Device(NamedTuple):
    """A GPU, addressed by its node index and its local index on that node."""

    node: int
    local: int


class ClusterSpec(BaseModel):
    """A cluster: device types, nodes, intra-node link bandwidth and an optional single-flow cap.

    Bandwidth between two endpoints (Eq. 2's b_{j,k}) is ``link_gbps``: inside one node the
    node's intra-node bandwidth; across nodes the smaller NIC, capped by ``single_flow_gbps``
    (a single TCP flow on AWS is capped below the NIC rate; AutoSync Table 2).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: Literal["cluster"] = "cluster"
    name: SpecName
    device_types: tuple[DeviceType, ...] = Field(min_length=1, max_length=LIMITS.device_types, fail_fast=True)
    nodes: tuple[Node, ...] = Field(min_length=1, max_length=LIMITS.nodes, fail_fast=True)
    intra_node_gbps: float = Field(
        ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="Default GPU-to-GPU bandwidth inside a node."
    )
    single_flow_gbps: float | None = Field(
        None, ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="Per-flow cap across nodes."
    )
    description: Text = ""
    resource_types: tuple[ResourceType, ...] = Field(
        (),
        max_length=LIMITS.device_types,
        fail_fast=True,
        description="Rentable unit types with prices (HeterPS scheduling); empty: none declared.",
    )
    resource_links: tuple[ResourceLink, ...] = Field(
        (),
        max_length=LIMITS.device_types**2,
        fail_fast=True,
        description="Bandwidth per unit between types.",
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        issues: list[Issue] = []
        types = set()
        for i, t in enumerate(self.device_types):
            if t.name in types:
                issues.append(Issue(("device_types", i, "name"), f"duplicate device type {t.name!r}"))
            types.add(t.name)
        names: set[str] = set()
        for i, n in enumerate(self.nodes):
            if n.name in names:
                issues.append(Issue(("nodes", i, "name"), f"duplicate node name {n.name!r}"))
            names.add(n.name)
            if n.device not in types:
                issues.append(Issue(("nodes", i, "device"), f"unknown device type {n.device!r}"))
        issues.extend(resource_issues(self))
        if not issues and self.num_gpus == 0:
            issues.append(Issue(("nodes",), "the cluster has no GPU"))
        if not issues and self.num_gpus > LIMITS.gpus:
            issues.append(Issue(("nodes",), f"the cluster has {self.num_gpus} GPUs, more than {LIMITS.gpus}"))
        structural(issues)
        return self

    @cached_property
    def node_index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def device_type_of(self) -> dict[str, DeviceType]:
        return {t.name: t for t in self.device_types}

    def node(self, name: str) -> Node:
        return self.nodes[self.node_index[name]]

    def device_type(self, node: int | str) -> DeviceType:
        n = self.nodes[node] if isinstance(node, int) else self.node(node)
        return self.device_type_of[n.device]

    @property
    def num_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @cached_property
    def devices(self) -> tuple[Device, ...]:
        """Every GPU in rank order: node by node, local index within the node."""
        return tuple(Device(i, g) for i, n in enumerate(self.nodes) for g in range(n.gpus))

    @property
    def worker_nodes(self) -> tuple[int, ...]:
        """Indices of the nodes with at least one GPU."""
        return tuple(i for i, n in enumerate(self.nodes) if n.gpus > 0)

    def intra_gbps(self, node: int) -> float:
        return self.nodes[node].intra_gbps or self.intra_node_gbps

    def link_gbps(self, a: int, b: int) -> float:
        """Bandwidth b_{a,b} in Gbit/s between nodes a and b (a == b: inside the node)."""
        if a == b:
            return self.intra_gbps(a)
        bw = min(self.nodes[a].nic_gbps, self.nodes[b].nic_gbps)
        if self.single_flow_gbps is not None:
            bw = min(bw, self.single_flow_gbps)
        return bw

    def link_bytes_per_s(self, a: int, b: int) -> float:
        return self.link_gbps(a, b) * GBPS

    def device_link_gbps(self, a: Device, b: Device) -> float:
        """Bandwidth between two GPUs (same node: intra-node link; else the nodes' network link)."""
        return self.link_gbps(a.node, b.node)

    def node_bandwidth_gbps(self, node: int) -> float:
        """A node's own network bandwidth b_{j,j} (Algorithm 1's weights): NIC, capped per flow."""
        bw = self.nodes[node].nic_gbps
        return bw
