"""Does synchronisation hide behind back-propagation on the testbed, and does the cost model say so?

``python benchmarks/overlap_fidelity.py [--nodes 4] [--gbps 10] [--layers 12] [--repeats 3]`` (root)
runs a compute-heavy replayed model (``--layers`` equal linear layers, one 4 MB variable each) on
``--nodes`` x 1 GPU at ``--gbps``, with the collection's protocol (time dilation from
``dilated_scales``, 3 warm-up + 10 timed iterations), and all-reduces its gradients in 1, 3 and
``--layers`` merge groups. For each it prints:

- measured T, compute and the *hidden* sync: sync = T(1 group) - compute (one bucket, ready when
  backward ends, cannot overlap anything), hidden = (compute + sync - T) / sync;
- predicted T and hidden share from the cost model (bucket overlap, Eq. 1 per bucket) with the
  per-call α measured in the same trials (``per_call_overhead_s``), and the relative error of T.

Targets (issue 13): with one group per layer, hidden >= 30 % of sync, and the cost model's T within
25 %. Each strategy is measured ``--repeats`` times in one session, interleaved; medians are used.
"""

from __future__ import annotations

import argparse
import statistics

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.testbed import Testbed, dilated_scales
from simulator.analytical import CostParams, cost_breakdown
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Strategy,
    Variable,
    VariableStrategy,
)

GPU = DeviceType(name="V100", fp32_tflops=15.7, fp16_tflops=125.0, memory_gb=32.0, memory_bw_gbs=900.0)


def build(nodes: int, gbps: float, layers: int, fwd_flops: float) -> tuple[ModelSpec, ClusterSpec]:
    model = ModelSpec(
        name="overlap",
        batch_size=32,
        layers=tuple(
            Layer(
                name=f"l{i}",
                kind="linear",
                fwd_flops=fwd_flops,
                activation_bytes=4096.0,
                variables=(Variable(name=f"l{i}.w", shape=(1000, 1000)),),
                inputs=(f"l{i - 1}",) if i else (),
            )
            for i in range(layers)
        ),
    )
    cluster = ClusterSpec(
        name=f"{nodes}x1",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=tuple(Node(name=f"n{i}", device=GPU.name, gpus=1, nic_gbps=gbps) for i in range(nodes)),
    )
    return model, cluster


def grouped(model: ModelSpec, groups: int) -> Strategy:
    n = len(model.variables)
    return Strategy(
        name=f"{groups} groups",
        variables=tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(group=(i * groups) // n),))
            for i, v in enumerate(model.variables)
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gbps", type=float, default=10.0)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--fwd-gflops", type=float, default=40.0, help="forward GFLOPs per sample per layer")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, cluster = build(args.nodes, args.gbps, args.layers, args.fwd_gflops * 1e9 / 32)
    scale, d = dilated_scales(cluster)
    cfg = ExecutorConfig(
        scale=scale, dilation=d, warmup=3, iterations=10, timeout_s=900, startup_timeout_s=600
    )
    strategies = [grouped(model, k) for k in (1, 3, args.layers)]
    times: dict[str, list[float]] = {s.name: [] for s in strategies}
    comp: list[float] = []
    coll: list[float] = []
    with Testbed(cluster, cfg.link_scale) as bed, ExecutorSession(model, cluster, bed, cfg) as session:
        for _ in range(args.repeats):
            for s in strategies:
                m = session.run(s)
                if not m.ok:
                    raise SystemExit(f"{s.name}: {m.failure}")
                times[s.name].append(m.median)
                comp.append(statistics.median(m.compute_times))
                coll.append(m.environment["per_call_overhead_s"]["collective"])
    c = statistics.median(comp)
    t = {k: statistics.median(v) for k, v in times.items()}
    sync = t[strategies[0].name] - c
    params = CostParams(call_overhead_s=statistics.median(coll))
    print(f"{model.name}: {args.layers} layers x 4 MB on {cluster.name} at {args.gbps:g} Gbit/s; D = {d:g}, "
          f"scale {scale:g}; measured compute {c * 1e3:.1f} ms, sync (1 group) {sync * 1e3:.1f} ms, "
          f"per-call α {params.call_overhead_s * 1e3:.2f} ms")  # fmt: skip
    print("| strategy | measured T ms | hidden (measured) | predicted T ms | hidden (predicted) | T error |")
    print("|---|---|---|---|---|---|")
    for s in strategies:
        b = cost_breakdown(model, cluster, s, params)
        hidden = (c + sync - t[s.name]) / sync
        hidden_hat = (b.t_comp + b.t_sync - b.t_iter) / b.t_sync
        err = (b.t_iter - t[s.name]) / t[s.name]
        print(
            f"| {s.name} | {t[s.name] * 1e3:.1f} | {hidden:.0%} | {b.t_iter * 1e3:.1f} | {hidden_hat:.0%} | {err:+.1%} |"
        )


if __name__ == "__main__":
    main()
