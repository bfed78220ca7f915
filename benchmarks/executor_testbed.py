"""The executor on the shaped testbed: does backward overlap communication, do PS pushes and pulls overlap?

``python benchmarks/executor_testbed.py [--rate-mbit 200] [--iterations 6]`` (needs root for
network namespaces) replays the check in docs/architecture.md: 4 nodes x 1 GPU shaped to ``rate`` Mbit/s, 12
layers of 5 ms forward / 10 ms backward, 1 MB of gradient each (12 MB). For each strategy it
prints the measured median step, a bandwidth lower bound, and their ratio:

- all-reduce in k groups: ring traffic 2(N-1)/N x bytes per node; with k groups, the last group
  can only start after backward, the first after one layer's backward;
- PS with every variable on n3: n3 receives (N-1) x 12 MB (its own worker is local);
- PS spread (layer i on n(i mod 4)): a node's link carries its worker's pushes to the other
  servers ((N-1)/N x 12 MB) and its server's answers to the other workers ((N-1) x 3 MB).
"""

from __future__ import annotations

import argparse

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.executor.reference import GPU
from runtime.testbed import Testbed
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Layer,
    ModelSpec,
    Node,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)

NODES, LAYERS, FWD_S, LAYER_BYTES, BATCH = 4, 12, 5e-3, 1_000_000, 4


def model() -> ModelSpec:
    flops = FWD_S * GPU.fp32_tflops * 1e12 * 0.5 / BATCH
    layers = tuple(
        Layer(
            name=f"l{i}",
            kind="linear",
            fwd_flops=flops,
            activation_bytes=4.0,
            variables=(Variable(name=f"l{i}.w", shape=(LAYER_BYTES // 4 // 500, 500)),),
        )
        for i in range(LAYERS)
    )
    return ModelSpec(name="replay12", batch_size=BATCH, layers=layers)


def strategies(m: ModelSpec) -> dict[str, tuple[Strategy, float]]:
    """Name -> (strategy, lower bound on its step in seconds at 1 byte/s; scaled by the caller)."""
    ring = 2 * (NODES - 1) / NODES * LAYER_BYTES
    out: dict[str, tuple[Strategy, float]] = {}
    for k in (1, 3, 12):
        subs = tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(group=(i * k) // LAYERS),))
            for i, v in enumerate(m.variables)
        )
        out[f"all-reduce, {k} groups"] = (Strategy(variables=subs), ring * LAYERS)
    one = tuple(VariableStrategy(variable=v.name, shards=(PSSync(server="n3"),)) for v in m.variables)
    out["PS, all on n3"] = (Strategy(variables=one), (NODES - 1) * LAYER_BYTES * LAYERS)
    spread = tuple(
        VariableStrategy(variable=v.name, shards=(PSSync(server=f"n{i % NODES}"),))
        for i, v in enumerate(m.variables)
    )
    out["PS, spread"] = (Strategy(variables=spread), 2 * (NODES - 1) * LAYER_BYTES * LAYERS / NODES)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate-mbit", type=float, default=200.0)
    ap.add_argument("--iterations", type=int, default=6)
    args = ap.parse_args()
    m = model()
    cluster = ClusterSpec(
        name="4x1",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=tuple(
            Node(name=f"n{i}", device=GPU.name, gpus=1, nic_gbps=args.rate_mbit / 1000) for i in range(NODES)
        ),
    )
    rate = args.rate_mbit * 1e6 / 8
    cfg = ExecutorConfig(compute="replay", warmup=2, iterations=args.iterations, timeout_s=300)
    fwd, bwd = FWD_S * LAYERS, 2 * FWD_S * LAYERS
    print(f"{'strategy':24s} {'median ms':>9s} {'spread':>6s} {'bound ms':>8s} {'ratio':>5s}")
    with Testbed(cluster) as bed, ExecutorSession(m, cluster, bed, cfg) as session:
        for name, (strategy, nbytes) in strategies(m).items():
            meas = session.run(strategy)
            if meas.failure:
                print(f"{name:24s} FAILED: {meas.failure}")
                continue
            comm = nbytes / rate
            # Overlap can hide at most the backward pass after the first layer's gradient.
            bound = max(fwd + bwd + (comm if "1 groups" in name else 0.0), fwd + 2 * FWD_S + comm)
            print(f"{name:24s} {meas.median * 1e3:9.1f} {meas.spread:6.2f} {bound * 1e3:8.1f} "
                  f"{meas.median / bound:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
