"""Fixtures for the learned-simulator tests: small specs, random strategies, synthetic labels.

The synthetic labels come from this file's own toy cost (an analytical-style formula plus noise);
they exist only to unit-test the training loop and are never reported as accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from simulator.analytical import AnalyticalSimulator
from simulator.learned.data import Domain
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Partition,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)


def toy_model(name: str = "toy", width: int = 64, depth: int = 4) -> ModelSpec:
    layers = [
        Layer(
            name="emb",
            kind="embedding",
            fwd_flops=0,
            activation_bytes=4 * width,
            variables=[Variable(name="emb.w", shape=(5000, width), sparse=True, density=0.05)],
        )
    ]
    prev = "emb"
    for i in range(depth):
        layers.append(
            Layer(
                name=f"fc{i}",
                kind="linear",
                fwd_flops=2.0 * width * width * 50,
                activation_bytes=4 * width,
                inputs=(prev,),
                variables=[
                    Variable(name=f"fc{i}.w", shape=(width, width)),
                    Variable(name=f"fc{i}.b", shape=(width,)),
                ],
            )
        )
        layers.append(
            Layer(
                name=f"act{i}", kind="relu", fwd_flops=width, activation_bytes=4 * width, inputs=(f"fc{i}",)
            )
        )
        prev = f"act{i}"
    return ModelSpec(name=name, batch_size=32, layers=layers)


def toy_cluster(name: str = "duo", nic: float = 10.0) -> ClusterSpec:
    t4 = DeviceType(name="T4", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
    return ClusterSpec(
        name=name,
        device_types=[t4],
        nodes=[
            Node(name="a", device="T4", gpus=2, nic_gbps=nic),
            Node(name="b", device="T4", gpus=1, nic_gbps=nic / 2),
            Node(name="s", device="T4", gpus=0, nic_gbps=nic * 2),
        ],
        intra_node_gbps=64,
    )


def random_strategy(model: ModelSpec, cluster: ClusterSpec, rng: np.random.Generator) -> Strategy:
    nodes = [n.name for n in cluster.nodes]
    out = []
    groups = int(rng.integers(1, 4))
    for v in model.variables:
        k = int(rng.choice([1, 1, 2, 4])) if v.shape[0] >= 4 else 1
        syncs: list[PSSync | CollectiveSync] = []
        for _ in range(k):
            if rng.random() < 0.5:
                syncs.append(
                    PSSync(server=str(rng.choice(nodes)), local_replication=bool(rng.random() < 0.5))
                )
            else:
                comp = "none" if v.sparse else str(rng.choice(["none", "fp16"]))
                syncs.append(
                    CollectiveSync(group=int(rng.integers(groups)), compressor=Compressor(kind=comp))
                )
        out.append(VariableStrategy(variable=v.name, partition=Partition(shards=k), shards=tuple(syncs)))
    return Strategy(variables=tuple(out))


def analytical_labels(model: ModelSpec, cluster: ClusterSpec, strategies: list[Strategy]) -> np.ndarray:
    """Iteration times the analytical model predicts (synthetic labels for unit tests only)."""
    return AnalyticalSimulator().predict(model, cluster, strategies)


def synthetic_domain(
    model: ModelSpec, cluster: ClusterSpec, n: int, seed: int, noise: float = 0.03
) -> Domain:
    rng = np.random.default_rng(seed)
    strategies = [random_strategy(model, cluster, rng) for _ in range(n)]
    times = analytical_labels(model, cluster, strategies) * np.exp(noise * rng.standard_normal(n))
    return Domain.from_measurements(model, cluster, list(zip(strategies, times, strict=True)))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    # Tiny networks on a shared 2-core machine: one thread avoids oversubscription stalls.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def model() -> ModelSpec:
    return toy_model()


@pytest.fixture(scope="session")
def cluster() -> ClusterSpec:
    return toy_cluster()


@pytest.fixture(scope="session")
def domain(model: ModelSpec, cluster: ClusterSpec) -> Domain:
    return synthetic_domain(model, cluster, 120, seed=0)
