"""What a replayed trial costs beyond its iterations, and how the executor's time splits.

``python benchmarks/executor_overhead.py [--clusters 1x2,2x2] [--repeat 3]`` starts one
ExecutorSession per cluster on loopback (LocalLauncher, no shaping) and runs, for several
strategies, a replayed trial of 3 warm-up + 10 measured iterations of ~100 ms of compute. It
prints the session's start-up time and, per strategy (median of --repeat trials), the trial's
wall time, the time its 13 iterations took (first start to last end), and the difference (the per-trial overhead: sending the strategy, building the
plan and buffers, the start barrier, gathering the results).
"""

from __future__ import annotations

import argparse
import statistics
import time

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from runtime.executor.reference import GPU, correctness_cases, tiny_model
from simulator.spec import ClusterSpec, ModelSpec, Node

ITERATION_S = 0.1


def replay_model() -> ModelSpec:
    """The tiny model with FLOPs set so that forward + backward take ~100 ms on the toy GPU."""
    base = tiny_model()
    per_layer = ITERATION_S / 3 / len(base.layers)  # forward t, backward 2t
    flops = per_layer * GPU.fp32_tflops * 1e12 * 0.5 / base.batch_size
    layers = tuple(layer.model_copy(update={"fwd_flops": flops}) for layer in base.layers)
    return base.model_copy(update={"layers": layers})


def cluster(nodes: int, gpus: int) -> ClusterSpec:
    return ClusterSpec(
        name=f"{nodes}x{gpus}",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=tuple(Node(name=f"n{i}", device=GPU.name, gpus=gpus, nic_gbps=10.0) for i in range(nodes)),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clusters", default="1x2,2x2")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    model = replay_model()
    cfg = ExecutorConfig(compute="replay", warmup=3, iterations=10)
    print(
        f"{'cluster':8s} {'strategy':24s} {'wall s':>7s} {'iters s':>8s} {'overhead s':>10s} {'median ms':>9s}"
    )
    for spec in args.clusters.split(","):
        nodes, gpus = (int(x) for x in spec.split("x"))
        cl = cluster(nodes, gpus)
        t0 = time.monotonic()
        with ExecutorSession(model, cl, LocalLauncher(), cfg) as session:
            session.start()
            print(f"{spec:8s} {'(session start-up)':24s} {time.monotonic() - t0:7.2f}")
            cases = correctness_cases(model, cl.nodes[0].name, cl.nodes[-1].name)
            for name in ("ring-groups", "hierarchical", "ps-split-servers", "ps-local-replication", "mixed"):
                walls, iters, medians = [], [], []
                for _ in range(args.repeat):
                    r = session.run_detailed(cases[name][0])
                    m = r.measurement
                    if m.failure:
                        print(f"{spec:8s} {name:24s} FAILED: {m.failure}")
                        break
                    walls.append(r.wall_s)
                    iters.append(m.environment["iterations_s"])
                    medians.append(m.median)
                else:
                    wall, it = statistics.median(walls), statistics.median(iters)
                    print(f"{spec:8s} {name:24s} {wall:7.2f} {it:8.2f} {wall - it:10.2f} "
                          f"{statistics.median(medians) * 1e3:9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
