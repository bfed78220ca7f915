"""Small random HeterPS problems for tests: models and priced pools that brute force solves in well under a second."""

from __future__ import annotations

import numpy as np

from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, ResourceType, Variable


def random_problem(
    seed: int,
    layers: int = 5,
    gpu_types: int = 2,
    limit_scale: float = 1.0,
    count_scale: float = 1.0,
    embeddings: int = 1,
) -> HeterogeneousCostModel:
    """A chain of ``layers`` layers (the first an embedding with a sparse table) on 1 CPU + ``gpu_types`` GPU types.

    ``embeddings`` > 1 puts that many embedding layers evenly along the chain (each reading the
    layer before it), so that plans like GPU - CPU - GPU, with two stages of one type, pay off.
    ``count_scale`` multiplies every type's count (at least 1 unit) after the draws, so that the
    same seed gives the same problem with scarcer units (counts summed over stages then bind).
    """
    rng = np.random.default_rng(seed)
    ls: list[Layer] = []
    every = max(1, layers // max(1, embeddings))
    for i in range(layers):
        if i % every == 0 and i // every < embeddings:
            rows = int(rng.integers(1, 5)) * 10**8
            name = "emb" if i == 0 else f"emb{i}"
            var = Variable(name=f"{name}.w", shape=(rows, 16), sparse=True, density=1e-4)
            ls.append(
                Layer(
                    name=name,
                    kind="embedding",
                    fwd_flops=0.0,
                    activation_bytes=26 * 64.0,
                    variables=(var,),
                    inputs=(ls[-1].name,) if ls else (),
                )
            )
            continue
        width = int(rng.choice([256, 512, 1024]))
        ls.append(
            Layer(
                name=f"fc{i}",
                kind="linear",
                fwd_flops=float(2 * width * width * rng.uniform(0.5, 2.0)),
                activation_bytes=4.0 * width,
                variables=(Variable(name=f"fc{i}.w", shape=(width, width)),),
                inputs=(ls[-1].name,),
            )
        )
    model = ModelSpec(name=f"rand{seed}", batch_size=1024, layers=tuple(ls))
    types = [
        ResourceType(name="cpu", kind="cpu", count=int(rng.integers(40, 200)), price_per_hour=0.085,
                     tflops=0.096, memory_gb=200, memory_bw_gbs=5.9, host_memory_gb=4.3, nic_gbps=0.5)
    ]  # fmt: skip
    for g in range(gpu_types):
        types.append(
            ResourceType(
                name=f"gpu{g}",
                kind="gpu",
                count=int(rng.integers(2, 12)),
                price_per_hour=float(rng.uniform(0.8, 6.0)),
                tflops=float(rng.uniform(8, 40)),
                memory_gb=16,
                memory_bw_gbs=float(rng.uniform(300, 2000)),
                host_memory_gb=float(rng.uniform(40, 150)),
                host_link_gbps=126,
                nic_gbps=float(rng.uniform(3, 50)),
            )
        )
    if count_scale != 1.0:
        types = [t.model_copy(update={"count": max(1, int(t.count * count_scale))}) for t in types]
    cluster = ClusterSpec(
        name=f"pool{seed}",
        device_types=(DeviceType(name="g", fp32_tflops=10, fp16_tflops=10, memory_gb=16, memory_bw_gbs=500),),
        nodes=(Node(name="n0", device="g", gpus=1, nic_gbps=10),),
        intra_node_gbps=100,
        resource_types=tuple(types),
    )
    limit = float(rng.uniform(2e4, 2e5)) * limit_scale
    return HeterogeneousCostModel(model, cluster, Workload(limit, batch_size=1024, samples_per_epoch=1e8))
