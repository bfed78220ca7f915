"""Resource pools with prices for HeterPS scheduling: CPU cores and GPUs of AWS instance types.

Two zoo clusters carry ``resource_types`` (``ClusterSpec``): ``HeterPS-2GPU`` (CPU cores + T4 +
V100) and ``HeterPS-4GPU`` (CPU cores + T4 + V100 + A100 + H100), the two settings of HeterPS
Table 2 ("BF(2)", "BF(4)"). The paper simulated several GPU types with one V100 at different
prices; we use real GPU types instead, so the types differ in speed as well as price.

A unit is one physical CPU core or one GPU; its price is the instance's on-demand price divided
by its units, and its memory, memory bandwidth and network figures are the instance's divided the
same way. Prices: AWS EC2 On-Demand, Linux, us-east-1 (https://aws.amazon.com/ec2/pricing/on-demand/),
the list prices in force since each instance's launch, as already used by the cluster zoo
(datasets/README.md); c5.24xlarge 4.08 and p3.16xlarge 24.48 USD/hour are added here. They were
not re-fetched on 2026-11-23 (this machine is offline). AWS announced price cuts for P4 and P5
instances in June 2025, so the A100 and H100 figures are the older, higher list prices.

Hardware: c5.24xlarge = 2x Xeon Platinum 8275CL (48 cores, 3.0 GHz, AVX-512 with two FMA units:
32 FP32 FLOPs per cycle per core = 96 GFLOPS), 6 channels of DDR4-2933 per socket (281.6 GB/s for
48 cores), 192 GiB, 25 Gbit/s. GPU figures are the published ones in docs/architecture.md (p3.16xlarge has
V100 SXM2 16 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import ClusterSpec, DeviceType, Node, ResourceLink, ResourceType

GIB_IN_GB = 1.073741824
AWS_PRICES = "AWS EC2 On-Demand, Linux, us-east-1, https://aws.amazon.com/ec2/pricing/on-demand/ (list price)"
PCIE3 = 126.0  # Gbit/s, x16 per direction
PCIE4 = 252.0
PCIE5 = 504.0

V100_16 = DeviceType(
    name="V100-SXM2-16GB", fp32_tflops=15.7, fp16_tflops=125, memory_gb=16, memory_bw_gbs=900
)
T4 = DeviceType(name="T4-16GB", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
A100 = DeviceType(name="A100-SXM4-80GB", fp32_tflops=19.5, fp16_tflops=312, memory_gb=80, memory_bw_gbs=2039)
H100 = DeviceType(name="H100-SXM5-80GB", fp32_tflops=67, fp16_tflops=989, memory_gb=80, memory_bw_gbs=3350)


@dataclass(frozen=True)
class Server:
    """An instance type as a source of rentable units."""

    instance: str  # AWS instance type
    price: float  # USD per hour, on demand
    units: int  # GPUs, or physical cores for a CPU server
    memory_gib: float  # host RAM
    nic_gbps: float  # network bandwidth of the instance
    device: DeviceType | None  # None for a CPU server


C5_24XL = Server("c5.24xlarge", 4.08, 48, 192, 25.0, None)
G4DN_12XL = Server("g4dn.12xlarge", 3.912, 4, 192, 50.0, T4)
P3_16XL = Server("p3.16xlarge", 24.48, 8, 488, 25.0, V100_16)
P4DE_24XL = Server("p4de.24xlarge", 40.97, 8, 1152, 400.0, A100)
P5_48XL = Server("p5.48xlarge", 98.32, 8, 2048, 3200.0, H100)
HOST_LINK = {"T4-16GB": PCIE3, "V100-SXM2-16GB": PCIE3, "A100-SXM4-80GB": PCIE4, "H100-SXM5-80GB": PCIE5}


def resource_type(server: Server, count: int) -> ResourceType:
    """The unit type of ``server``: one core (CPU server) or one GPU, with per-unit figures."""
    host = server.memory_gib * GIB_IN_GB / server.units
    common = {
        "count": count,
        "price_per_hour": round(server.price / server.units, 6),
        "host_memory_gb": round(host, 3),
        "nic_gbps": round(server.nic_gbps / server.units, 6),
        "instance_type": f"AWS {server.instance}",
        "price_source": f"{AWS_PRICES}: {server.price} USD/hour for {server.units} units",
    }
    if server.device is None:
        return ResourceType(
            name=f"{server.instance}-core",
            kind="cpu",
            tflops=0.096,
            memory_gb=round(server.memory_gib * GIB_IN_GB, 2),  # dense weights: shared by the cores
            memory_bw_gbs=round(281.6 / server.units, 4),
            overhead_us=5.0,
            **common,
        )
    d = server.device
    return ResourceType(
        name=f"{server.instance}-{d.name.split('-')[0]}",
        kind="gpu",
        tflops=d.fp32_tflops,
        memory_gb=d.memory_gb,
        memory_bw_gbs=d.memory_bw_gbs,
        host_link_gbps=HOST_LINK[d.name],
        overhead_us=10.0,
        **common,
    )


def _pool(name: str, pool: list[tuple[Server, int]], description: str) -> ClusterSpec:
    """A cluster whose nodes are one server of each type and whose resource types are the pool.

    The nodes are representatives (the AutoSync side sees one server of each kind); ``count`` of
    each resource type is the number of units that may be rented (N_{t,limit}).
    """
    devices = {s.device.name: s.device for s, _ in pool if s.device is not None}
    gpu_device = next(iter(devices))
    nodes = tuple(
        Node(
            name=s.instance.replace(".", "-"),
            device=s.device.name if s.device else gpu_device,
            gpus=s.units if s.device else 0,
            nic_gbps=s.nic_gbps,
            latency_us=50.0,
            cpu_cores=s.units if s.device is None else 48,
            host_memory_gb=round(s.memory_gib * GIB_IN_GB, 2),
            price_per_hour=s.price,
            instance_type=f"AWS {s.instance}",
        )
        for s, _ in pool
    )
    types = tuple(resource_type(s, n) for s, n in pool)
    # Synchronising a stage's dense weights among units of one type rides the servers' full NICs
    # (hierarchical all-reduce), not one unit's share of it.
    links = tuple(
        ResourceLink(a=t.name, b=t.name, gbps=s.nic_gbps) for (s, _), t in zip(pool, types, strict=True)
    )
    return ClusterSpec(
        name=name,
        device_types=tuple(devices.values()),
        nodes=nodes,
        intra_node_gbps=PCIE3,
        description=description,
        resource_types=types,
        resource_links=links,
    )


def heterogeneous_clusters() -> list[ClusterSpec]:
    """HeterPS-2GPU and HeterPS-4GPU: 4 CPU servers (192 cores) and up to 16 GPUs of each type."""
    cpu = (C5_24XL, 192)
    return [
        _pool(
            "HeterPS-2GPU",
            [cpu, (G4DN_12XL, 16), (P3_16XL, 16)],
            "HeterPS Table 2 'BF(2)': CPU cores of 4x c5.24xlarge, 16 T4 (g4dn.12xlarge), 16 V100 (p3.16xlarge)",
        ),
        _pool(
            "HeterPS-4GPU",
            [cpu, (G4DN_12XL, 16), (P3_16XL, 16), (P4DE_24XL, 16), (P5_48XL, 8)],
            "HeterPS Table 2 'BF(4)': CPU cores of 4x c5.24xlarge, 16 T4, 16 V100, 16 A100 (p4de), 8 H100 (p5)",
        ),
    ]
