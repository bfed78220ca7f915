"""The cluster zoo: AutoSync's Table 2 setups (A1, A2, B1-B12), A100x8, H100-4x8 and mixed-GPU clusters.

The mixed-GPU clusters are Whale's heterogeneous testbeds (§5: nodes of 32 GB V100s or 16 GB
P100s on 50 Gbit/s Ethernet; 8 + 8 GPUs for data parallelism, 4 + 4 for pipelines) and an A100 +
T4 mix (Whale's Figure 4 pairs V100 with T4; one generation on).

Every cluster is assembled from the instance types below; the figures are the published ones
collected in docs/architecture.md ("Published hardware figures") and the vendors' instance pages. Prices are
approximate AWS on-demand prices (us-east-1, USD per hour); the in-house Cluster A has no price.

Bandwidth conventions: ``nic_gbps`` is the instance's advertised network bandwidth; inside a node
GPUs talk over PCIe 3.0 x16 (15.75 GB/s, about 126 Gbit/s) on the AWS g3/g4dn instances and over
NVLink/NVSwitch on the A100 and H100 nodes (per direction, per GPU). AutoSync Table 2 notes that a
single flow on AWS is capped at 10 Gbit/s; that is the clusters' ``single_flow_gbps``.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import ClusterSpec, DeviceType, Node

GIB_IN_GB = 1.073741824  # AWS publishes host memory in GiB; ClusterSpec wants GB

# Roofline figures (issue 15): dense tensor-core peaks per dtype (None: no such path, the FP32
# rate applies), and the host cost of one kernel launch: "a few microseconds" per launch (NVIDIA
# developer blog, "Getting Started with CUDA Graphs", 2019); 5 us, the DeviceType default.
_LAUNCH = "launch overhead: NVIDIA blog 'Getting Started with CUDA Graphs' (2019), a few us per kernel"
TITAN_X = DeviceType(
    name="TITAN-X-Maxwell-12GB",
    fp32_tflops=6.6,
    fp16_tflops=6.6,  # Maxwell has no fast FP16 path: FP16 math runs at the FP32 rate
    memory_gb=12,
    memory_bw_gbs=336.5,
    source="NVIDIA GeForce GTX TITAN X specifications (Maxwell, 2015); " + _LAUNCH,
)
M60 = DeviceType(
    name="M60-8GB",
    fp32_tflops=4.8,
    fp16_tflops=4.8,
    memory_gb=8,
    memory_bw_gbs=160,
    source="NVIDIA Tesla M60 datasheet (per GPU of the board); " + _LAUNCH,
)
T4 = DeviceType(
    name="T4-16GB",
    fp32_tflops=8.1,
    fp16_tflops=65,  # Turing tensor cores; no TF32 or BF16 path
    memory_gb=16,
    memory_bw_gbs=320,
    source="NVIDIA T4 Tensor Core GPU datasheet; " + _LAUNCH,
)
A100 = DeviceType(
    name="A100-SXM4-80GB",
    fp32_tflops=19.5,
    fp16_tflops=312,
    tf32_tflops=156,
    bf16_tflops=312,
    memory_gb=80,
    memory_bw_gbs=2039,
    source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB, dense); " + _LAUNCH,
)
H100 = DeviceType(
    name="H100-SXM5-80GB",
    fp32_tflops=67,
    fp16_tflops=989,
    tf32_tflops=494.5,
    bf16_tflops=989,
    memory_gb=80,
    memory_bw_gbs=3350,
    source="NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense: half the sparsity figures); " + _LAUNCH,
)

V100 = DeviceType(
    name="V100-SXM2-32GB",
    fp32_tflops=15.7,
    fp16_tflops=125,  # Volta tensor cores; no TF32 or BF16 path
    memory_gb=32,
    memory_bw_gbs=900,
    source="NVIDIA Tesla V100 datasheet (SXM2 32GB); " + _LAUNCH,
)
P100 = DeviceType(
    name="P100-SXM2-16GB",
    fp32_tflops=10.6,
    fp16_tflops=21.2,  # Pascal: packed FP16 at twice the FP32 rate, no tensor cores
    memory_gb=16,
    memory_bw_gbs=732,
    source="NVIDIA Tesla P100 datasheet (SXM2 16GB); " + _LAUNCH,
)
# GPUs people train on now (issue 42). Dense tensor-core peaks (the datasheets' sparsity figures
# halved); GeForce cards: FP16/BF16 with FP32 accumulation (what mixed-precision training runs),
# half their FP16-accumulate rate (Ampere GA102 / Ada whitepapers, appendix tables).
A100_40 = DeviceType(
    name="A100-SXM4-40GB",
    fp32_tflops=19.5,
    fp16_tflops=312,
    tf32_tflops=156,
    bf16_tflops=312,
    memory_gb=40,
    memory_bw_gbs=1555,
    source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB, dense); " + _LAUNCH,
)
GH200 = DeviceType(
    name="GH200-96GB",
    fp32_tflops=67,
    fp16_tflops=989,
    tf32_tflops=494,
    bf16_tflops=989,
    memory_gb=96,
    memory_bw_gbs=4000,
    source="NVIDIA GH200 Grace Hopper Superchip datasheet (H100 GPU, 96 GB HBM3 at 4 TB/s; dense: half"
    " the sparsity figures); " + _LAUNCH,
)
L4 = DeviceType(
    name="L4-24GB",
    fp32_tflops=30.3,
    fp16_tflops=121,
    tf32_tflops=60,
    bf16_tflops=121,
    memory_gb=24,
    memory_bw_gbs=300,
    source="NVIDIA L4 Tensor Core GPU datasheet (dense: half the sparsity figures 242/120); " + _LAUNCH,
)
L40S = DeviceType(
    name="L40S-48GB",
    fp32_tflops=91.6,
    fp16_tflops=362,
    tf32_tflops=183,
    bf16_tflops=362,
    memory_gb=48,
    memory_bw_gbs=864,
    source="NVIDIA L40S datasheet (dense: half the sparsity figures 733/366); " + _LAUNCH,
)
RTX3090 = DeviceType(
    name="RTX3090-24GB",
    fp32_tflops=35.6,
    fp16_tflops=71,
    tf32_tflops=35.6,
    bf16_tflops=71,
    memory_gb=24,
    memory_bw_gbs=936,
    source="NVIDIA Ampere GA102 GPU architecture whitepaper, Table 9 (RTX 3090: FP16/BF16 tensor with"
    " FP32 accumulate 71 TFLOPS dense, TF32 35.6; 24 GB GDDR6X, 936 GB/s); " + _LAUNCH,
)
RTX4090 = DeviceType(
    name="RTX4090-24GB",
    fp32_tflops=82.6,
    fp16_tflops=165.2,
    tf32_tflops=82.6,
    bf16_tflops=165.2,
    memory_gb=24,
    memory_bw_gbs=1008,
    source="NVIDIA Ada GPU architecture whitepaper, Appendix A (RTX 4090: FP16/BF16 tensor with FP32"
    " accumulate 165.2 TFLOPS dense, TF32 82.6; 24 GB GDDR6X, 1008 GB/s); " + _LAUNCH,
)
MI300X = DeviceType(
    name="MI300X-192GB",
    fp32_tflops=163.4,
    fp16_tflops=1307.4,
    tf32_tflops=653.7,
    bf16_tflops=1307.4,
    memory_gb=192,
    memory_bw_gbs=5300,
    source="AMD Instinct MI300X accelerator datasheet (dense matrix FP16/BF16 1307.4, TF32 653.7,"
    " FP32 vector 163.4 TFLOPS; 192 GB HBM3, 5.3 TB/s); launch overhead: as the NVIDIA parts",
)

PCIE3_X16_GBPS = 126.0  # 15.75 GB/s per direction
PCIE4_X16_GBPS = 252.0  # 31.5 GB/s per direction
# MI300X platform: each GPU has 7 Infinity Fabric links of 64 GB/s per direction to its 7 peers.
INFINITY_FABRIC_MI300X_GBPS = 7 * 64 * 8.0
NVLINK2_V100_GBPS = 1200.0  # 6 NVLink 2.0 links x 25 GB/s per direction
NVLINK1_P100_GBPS = 640.0  # 4 NVLink 1.0 links x 20 GB/s per direction


@dataclass(frozen=True)
class InstanceType:
    """One kind of machine a zoo cluster is built from."""

    short: str  # prefix of node names, e.g. 'g4dn12'
    description: str  # cloud instance type or hardware description (Node.instance_type)
    device: DeviceType  # its GPU
    gpus: int  # GPUs per node
    nic_gbps: float  # advertised network bandwidth, Gbit/s
    latency_us: float  # one-way network latency, microseconds (approximate)
    cpu_cores: int  # physical cores (in-house) or vCPUs (cloud)
    host_memory_gb: float  # host RAM, GB
    price_per_hour: float  # on-demand USD per hour (approximate); 0 for in-house hardware
    intra_gbps: float  # GPU-to-GPU bandwidth inside the node, Gbit/s


CLUSTER_A_NODE = InstanceType(
    "a", "in-house Cluster A node: 1x GeForce TITAN X, Intel 16-core CPU, 64 GB RAM, 40GbE",
    TITAN_X, 1, 40.0, 10.0, 16, 64.0, 0.0, PCIE3_X16_GBPS,
)  # fmt: skip
G3_4XL = InstanceType(
    "g3-4xl", "AWS g3.4xlarge", M60, 1, 10.0, 50.0, 16, 122 * GIB_IN_GB, 1.14, PCIE3_X16_GBPS
)
G3_16XL = InstanceType(
    "g3-16xl", "AWS g3.16xlarge", M60, 4, 25.0, 50.0, 64, 488 * GIB_IN_GB, 4.56, PCIE3_X16_GBPS
)
G4DN_2XL = InstanceType(
    "g4dn-2xl", "AWS g4dn.2xlarge", T4, 1, 25.0, 50.0, 8, 32 * GIB_IN_GB, 0.752, PCIE3_X16_GBPS
)
G4DN_12XL = InstanceType(
    "g4dn-12xl", "AWS g4dn.12xlarge", T4, 4, 50.0, 50.0, 48, 192 * GIB_IN_GB, 3.912, PCIE3_X16_GBPS
)
# p4de.24xlarge-class: 8x A100 80GB on NVSwitch (NVLink 3: 300 GB/s per direction per GPU), 400 Gbps EFA.
A100_NODE = InstanceType(
    "a100", "AWS p4de.24xlarge (8x A100 80GB, NVSwitch)", A100, 8, 400.0, 15.0, 96,
    1152 * GIB_IN_GB, 40.97, 2400.0,
)  # fmt: skip
# DGX H100 / p5.48xlarge-class: 8x H100 SXM on NVSwitch (NVLink 4: 450 GB/s per direction per GPU),
# 8 x 400 Gbit/s NDR rails per node (one per GPU); one flow rides one rail (single_flow_gbps=400).
H100_NODE = InstanceType(
    "h100", "AWS p5.48xlarge / DGX H100 class (8x H100 SXM, NVSwitch, 8x400G NICs)", H100, 8, 3200.0,
    2.0, 192, 2048 * GIB_IN_GB, 98.32, 3600.0,
)  # fmt: skip
# AWS p4d.24xlarge: 8x A100 40GB on NVSwitch (NVLink 3), 400 Gbps EFA, 96 vCPUs, 1152 GiB.
A100_40_NODE = InstanceType(
    "a100-40", "AWS p4d.24xlarge (8x A100 40GB, NVSwitch)", A100_40, 8, 400.0, 15.0, 96,
    1152 * GIB_IN_GB, 32.77, 2400.0,
)  # fmt: skip
# One GH200 superchip per node (72 Grace cores, 480 GB LPDDR5X), one 400 Gbit/s NDR ConnectX-7;
# no GPU peer inside the node (intra_gbps: NVLink-C2C to its own CPU, 450 GB/s per direction).
GH200_NODE = InstanceType(
    "gh200", "GH200 Grace Hopper node (1x GH200 96GB, 72-core Grace, 480 GB LPDDR5X, 400G NDR)", GH200, 1,
    400.0, 2.0, 72, 480.0, 0.0, 3600.0,
)  # fmt: skip
# AWS g6.48xlarge: 8x L4 on PCIe Gen4 (no NVLink), 100 Gbps, 192 vCPUs, 768 GiB.
L4_NODE = InstanceType(
    "l4", "AWS g6.48xlarge (8x L4 24GB, PCIe Gen4)", L4, 8, 100.0, 15.0, 192, 768 * GIB_IN_GB, 13.35,
    PCIE4_X16_GBPS,
)  # fmt: skip
# AWS g6e.48xlarge: 8x L40S on PCIe Gen4 (no NVLink), 400 Gbps, 192 vCPUs, 1536 GiB.
L40S_NODE = InstanceType(
    "l40s", "AWS g6e.48xlarge (8x L40S 48GB, PCIe Gen4)", L40S, 8, 400.0, 15.0, 192, 1536 * GIB_IN_GB,
    30.13, PCIE4_X16_GBPS,
)  # fmt: skip
# Workstations: 4 GeForce cards on PCIe Gen4 x16, 10GbE between boxes. The RTX 4090 has no NVLink and
# its driver disables peer-to-peer, so GPU-to-GPU traffic goes through host memory (same PCIe rate).
RTX3090_NODE = InstanceType(
    "rtx3090", "workstation: 4x RTX 3090 24GB on PCIe Gen4, 32-core CPU, 256 GB RAM, 10GbE", RTX3090, 4,
    10.0, 20.0, 32, 256.0, 0.0, PCIE4_X16_GBPS,
)  # fmt: skip
RTX4090_NODE = InstanceType(
    "rtx4090", "workstation: 4x RTX 4090 24GB on PCIe Gen4 (no P2P), 32-core CPU, 256 GB RAM, 10GbE",
    RTX4090, 4, 10.0, 20.0, 32, 256.0, 0.0, PCIE4_X16_GBPS,
)  # fmt: skip
# 8x MI300X OAM platform (fully connected Infinity Fabric), 8 x 400 Gbit/s NICs.
MI300X_NODE = InstanceType(
    "mi300x", "AMD Instinct MI300X platform (8x MI300X 192GB, Infinity Fabric mesh, 8x400G NICs)", MI300X, 8,
    3200.0, 2.0, 192, 2048.0, 0.0, INFINITY_FABRIC_MI300X_GBPS,
)  # fmt: skip

# Whale §5: "Every cluster node is equipped with a 96-core Intel Xeon Platinum 8163 with 736GB RAM
# ... 2/4/8 GPUs, with NVIDIA 32-GB V100 GPUs or NVIDIA 16-GB P100 GPUs ... connected by 50Gb/s
# ethernet" (latency: an order-of-magnitude figure for a datacenter Ethernet hop).
_WHALE = "Whale-testbed-like node (§5): {}x {}, 96-core Xeon Platinum 8163, 736 GB RAM, 50GbE"
WHALE_V100_8 = InstanceType("v100x8", _WHALE.format(8, "V100 32GB (NVLink)"), V100, 8, 50.0, 10.0, 96, 736.0,
                            0.0, NVLINK2_V100_GBPS)  # fmt: skip
WHALE_P100_8 = InstanceType("p100x8", _WHALE.format(8, "P100 16GB (NVLink)"), P100, 8, 50.0, 10.0, 96, 736.0,
                            0.0, NVLINK1_P100_GBPS)  # fmt: skip
WHALE_V100_4 = InstanceType("v100x4", _WHALE.format(4, "V100 32GB (NVLink)"), V100, 4, 50.0, 10.0, 96, 736.0,
                            0.0, NVLINK2_V100_GBPS)  # fmt: skip
WHALE_P100_4 = InstanceType("p100x4", _WHALE.format(4, "P100 16GB (NVLink)"), P100, 4, 50.0, 10.0, 96, 736.0,
                            0.0, NVLINK1_P100_GBPS)  # fmt: skip

AWS_SINGLE_FLOW_GBPS = 10.0  # AutoSync Table 2: "they all have 10GbE single-flow bandwidth"


def _nodes(groups: list[tuple[InstanceType, int]]) -> tuple[Node, ...]:
    nodes: list[Node] = []
    for itype, count in groups:
        for i in range(count):
            nodes.append(
                Node(
                    name=f"{itype.short}-{i}",
                    device=itype.device.name,
                    gpus=itype.gpus,
                    nic_gbps=itype.nic_gbps,
                    latency_us=itype.latency_us,
                    cpu_cores=itype.cpu_cores,
                    host_memory_gb=round(itype.host_memory_gb, 2),
                    price_per_hour=itype.price_per_hour,
                    instance_type=itype.description,
                    intra_gbps=itype.intra_gbps,
                )
            )
    return tuple(nodes)


def make_cluster(
    name: str,
    groups: list[tuple[InstanceType, int]],
    description: str,
    single_flow_gbps: float | None = None,
) -> ClusterSpec:
    """A cluster of ``count`` nodes of each instance type in ``groups``, in that order."""
    devices: dict[str, DeviceType] = {}
    for itype, _ in groups:
        devices.setdefault(itype.device.name, itype.device)
    return ClusterSpec(
        name=name,
        device_types=tuple(devices.values()),
        nodes=_nodes(groups),
        intra_node_gbps=groups[0][0].intra_gbps,
        single_flow_gbps=single_flow_gbps,
        description=description,
    )


def zoo_clusters() -> list[ClusterSpec]:
    """The zoo clusters: AutoSync Table 2 (14 setups), one 8x A100 node, 4x8 H100, Whale's mixed
    V100 + P100 clusters, A100 + T4, and HeterPS's two priced resource pools (``zoo_resources``)."""
    a = "AutoSync Table 2 {}: {}; Cluster A (in-house, 40GbE switch)"
    b = "AutoSync Table 2 {}: {}; Cluster B (AWS, 10 Gbps single-flow cap)"
    aws = AWS_SINGLE_FLOW_GBPS
    table: list[tuple[str, list[tuple[InstanceType, int]], str, float | None]] = [
        ("A1", [(CLUSTER_A_NODE, 16)], a.format("A1", "16x Cluster A nodes, [1] x 16, 40GbE"), None),
        ("A2", [(CLUSTER_A_NODE, 11)], a.format("A2", "11x Cluster A nodes, [1] x 11, 40GbE"), None),
        ("B1", [(G3_16XL, 2)], b.format("B1", "2x g3.16xlarge, [4] x 2, 25GbE"), aws),
        ("B2", [(G3_16XL, 3)], b.format("B2", "3x g3.16xlarge, [4] x 3, 25GbE"), aws),
        ("B3", [(G3_16XL, 4)], b.format("B3", "4x g3.16xlarge, [4] x 4, 25GbE"), aws),
        ("B4", [(G4DN_12XL, 1)], b.format("B4", "1x g4dn.12xlarge, [4] x 1, 50GbE"), aws),
        ("B5", [(G4DN_12XL, 2)], b.format("B5", "2x g4dn.12xlarge, [4] x 2, 50GbE"), aws),
        ("B6", [(G4DN_12XL, 3)], b.format("B6", "3x g4dn.12xlarge, [4] x 3, 50GbE"), aws),
        ("B7", [(G4DN_12XL, 4)], b.format("B7", "4x g4dn.12xlarge, [4] x 4, 50GbE"), aws),
        ("B8", [(G4DN_12XL, 8)], b.format("B8", "8x g4dn.12xlarge, [4] x 8, 50GbE"), aws),
        ("B9", [(G3_4XL, 1), (G3_16XL, 1)], b.format("B9", "1x g3.4xlarge + 1x g3.16xlarge, [1, 4], 10/25GbE"), aws),
        ("B10", [(G3_16XL, 1), (G4DN_12XL, 1)], b.format("B10", "1x g3.16xlarge + 1x g4dn.12xlarge, [4] x 2, 25/50GbE"), aws),
        ("B11", [(G3_16XL, 2), (G4DN_12XL, 2)], b.format("B11", "2x g3.16xlarge + 2x g4dn.12xlarge, [4] x 4, 25/50GbE"), aws),
        ("B12", [(G4DN_2XL, 1), (G4DN_12XL, 1)], b.format("B12", "1x g4dn.2xlarge + 1x g4dn.12xlarge, [1, 4], 25/50GbE"), aws),
        ("A100x8", [(A100_NODE, 1)], "One node with 8x A100 80GB on NVSwitch (p4de.24xlarge class).", None),
        ("H100-4x8", [(H100_NODE, 4)], "4 nodes x 8 H100 SXM on NVSwitch, 8x400 Gbit/s rails per node; one flow rides one rail.", 400.0),
        ("V100x8+P100x8", [(WHALE_V100_8, 1), (WHALE_P100_8, 1)], "Whale §5.2 data parallelism: 8x 32GB V100 + 8x 16GB P100, one node each, 50GbE.", None),
        ("V100x4+P100x4", [(WHALE_V100_4, 1), (WHALE_P100_4, 1)], "Whale §5.2 pipelines: 4x 32GB V100 + 4x 16GB P100, one node each, 50GbE.", None),
        ("A100-40GBx8", [(A100_40_NODE, 1)], "One p4d.24xlarge: 8x A100 40GB on NVSwitch.", None),
        ("A100-40GB-2x8", [(A100_40_NODE, 2)], "Two p4d.24xlarge (8x A100 40GB each), 400 Gbps EFA.", None),
        ("GH200x4", [(GH200_NODE, 4)], "4 GH200 superchip nodes, one GPU each, 400 Gbit/s NDR between them; no price listed.", None),
        ("L4x8", [(L4_NODE, 1)], "One g6.48xlarge: 8x L4 on PCIe Gen4.", None),
        ("L40Sx8", [(L40S_NODE, 1)], "One g6e.48xlarge: 8x L40S on PCIe Gen4.", None),
        ("RTX3090x4", [(RTX3090_NODE, 1)], "One workstation: 4x RTX 3090 on PCIe Gen4 (in-house, no price).", None),
        ("RTX4090x2x4", [(RTX4090_NODE, 2)], "Two workstations of 4x RTX 4090 (no P2P), 10GbE (in-house, no price).", None),
        ("MI300Xx8", [(MI300X_NODE, 1)], "One 8x MI300X platform on Infinity Fabric (no price listed).", None),
        ("A100x8+T4x8", [(A100_NODE, 1), (G4DN_12XL, 2)], "Mixed generations: 1x p4de.24xlarge (8x A100 80GB) + 2x g4dn.12xlarge (4x T4 each), 10 Gbps single-flow cap.", aws),
    ]  # fmt: skip
    from simulator.extract.zoo_resources import heterogeneous_clusters

    return [
        make_cluster(name, groups, desc, cap) for name, groups, desc, cap in table
    ] + heterogeneous_clusters()
