"""Small hand-built models and clusters for the search tests (no zoo needed)."""

from __future__ import annotations

import pytest

from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Variable

MIB = 1024 * 1024


def make_model(name: str = "toy") -> ModelSpec:
    """Eight layers: an 8 MiB sparse embedding, a 4 MiB vector, matrices of 1-16 MiB, small biases."""
    layers = [
        Layer(
            name="emb",
            kind="embedding",
            fwd_flops=0.0,
            activation_bytes=4096.0,
            variables=(Variable(name="emb.w", shape=(8192, 256), sparse=True, density=0.05),),
        ),
        Layer(
            name="vec",
            kind="norm",
            fwd_flops=1e6,
            activation_bytes=4096.0,
            variables=(Variable(name="vec.w", shape=(1024 * 1024,)),),
            inputs=("emb",),
        ),
    ]
    sizes = [(1024, 256), (1024, 1024), (2048, 1024), (512, 512), (2048, 2048), (1024, 1024)]
    prev = "vec"
    for i, (r, c) in enumerate(sizes):
        layers.append(
            Layer(
                name=f"fc{i}",
                kind="linear",
                fwd_flops=2.0 * r * c,
                activation_bytes=4.0 * r,
                variables=(Variable(name=f"fc{i}.w", shape=(r, c)), Variable(name=f"fc{i}.b", shape=(r,))),
                inputs=(prev,),
            )
        )
        prev = f"fc{i}"
    return ModelSpec(name=name, batch_size=32, layers=tuple(layers))


def make_cluster(name: str = "uneven") -> ClusterSpec:
    """Three GPU nodes with 10, 25 and 50 Gbit/s NICs (unequal bandwidths for c_lb)."""
    t4 = DeviceType(name="T4", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
    nodes = tuple(
        Node(name=f"n{i}", device="T4", gpus=g, nic_gbps=bw)
        for i, (g, bw) in enumerate([(1, 10.0), (4, 25.0), (4, 50.0)])
    )
    return ClusterSpec(name=name, device_types=(t4,), nodes=nodes, intra_node_gbps=100.0)


@pytest.fixture
def model() -> ModelSpec:
    return make_model()


@pytest.fixture
def cluster() -> ClusterSpec:
    return make_cluster()
