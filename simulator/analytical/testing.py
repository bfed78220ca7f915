"""Random valid strategies for tests and benchmarks (not the search's sampler: no constraints)."""

from __future__ import annotations

import numpy as np

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


def random_strategy(
    model: ModelSpec, cluster: ClusterSpec, rng: np.random.Generator, max_shards: int = 4
) -> Strategy:
    """A uniformly mixed strategy: random partitions, PS placements, groups, compressors, algorithms.

    Every choice the vocabulary allows is exercised; the result passes ``Strategy.check``.
    """
    nodes = [n.name for n in cluster.nodes]
    return Strategy(
        name="random",
        variables=tuple(_random_variable(v, nodes, rng, max_shards) for v in model.variables),
    )


def random_strategies(model: ModelSpec, cluster: ClusterSpec, n: int, seed: int = 0) -> list[Strategy]:
    rng = np.random.default_rng(seed)
    return [random_strategy(model, cluster, rng) for _ in range(n)]


def _random_variable(
    v: Variable, nodes: list[str], rng: np.random.Generator, max_shards: int
) -> VariableStrategy:
    axis = 0 if v.sparse else int(rng.integers(len(v.shape)))
    k = 1 if rng.random() < 0.6 else int(rng.integers(1, min(v.shape[axis], max_shards) + 1))
    syncs: list[PSSync | CollectiveSync] = []
    for _ in range(k):
        if rng.random() < 0.5:
            syncs.append(
                PSSync(
                    server=nodes[int(rng.integers(len(nodes)))],
                    local_replication=bool(rng.random() < 0.5),
                    staleness=int(rng.integers(0, 2)),
                )
            )
            continue
        kinds = ["none", "fp16"] + (["powersgd"] if not v.sparse and len(v.shape) >= 2 else [])
        kind = kinds[int(rng.integers(len(kinds)))]
        comp = Compressor(kind=kind, rank=int(rng.integers(1, 5)) if kind == "powersgd" else None)
        syncs.append(
            CollectiveSync(
                group=int(rng.integers(0, 4)),
                compressor=comp,
                algorithm="ring" if rng.random() < 0.5 else "hierarchical",
            )
        )
    return VariableStrategy(variable=v.name, partition=Partition(axis=axis, shards=k), shards=tuple(syncs))


def make_cluster(
    gpus: list[int],
    nic_gbps: list[float] | float = 10.0,
    intra_gbps: float = 100.0,
    fp32_tflops: float = 10.0,
    price_per_hour: float = 0.0,
    single_flow_gbps: float | None = None,
) -> ClusterSpec:
    """A one-device-type cluster with nodes n0, n1, ... carrying ``gpus[i]`` GPUs each."""
    nics = nic_gbps if isinstance(nic_gbps, list) else [nic_gbps] * len(gpus)
    return ClusterSpec(
        name="test-cluster",
        device_types=(
            DeviceType(
                name="gpu",
                fp32_tflops=fp32_tflops,
                fp16_tflops=2 * fp32_tflops,
                memory_gb=16,
                memory_bw_gbs=500,
            ),
        ),
        nodes=tuple(
            Node(name=f"n{i}", device="gpu", gpus=g, nic_gbps=b, price_per_hour=price_per_hour)
            for i, (g, b) in enumerate(zip(gpus, nics, strict=True))
        ),
        intra_node_gbps=intra_gbps,
        single_flow_gbps=single_flow_gbps,
    )


def make_model(variables: list[Variable], fwd_flops: float = 1e6, batch_size: int = 32) -> ModelSpec:
    """A model with one layer per variable, chained, each of ``fwd_flops / len(variables)``."""
    layers = []
    for i, v in enumerate(variables):
        layers.append(
            Layer(
                name=f"layer{i}",
                kind="linear",
                fwd_flops=fwd_flops / len(variables),
                activation_bytes=1024,
                variables=(v,),
                inputs=(f"layer{i - 1}",) if i else (),
            )
        )
    return ModelSpec(name="test-model", batch_size=batch_size, layers=tuple(layers))


def mixed_model() -> ModelSpec:
    """Six variables of every kind the cost model distinguishes: sparse (two densities), a
    convolution, a bias, a float16 matrix and a dense matrix."""
    return make_model(
        [
            Variable(name="emb", shape=(5000, 32), sparse=True, density=0.02),
            Variable(name="conv", shape=(64, 32, 3, 3)),
            Variable(name="bias", shape=(64,)),
            Variable(name="half", shape=(300, 200), dtype="float16"),
            Variable(name="fc", shape=(1000, 512)),
            Variable(name="emb2", shape=(777, 16), sparse=True, density=0.5),
        ],
        fwd_flops=5e8,
    )
