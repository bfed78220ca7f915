"""Pipeline schedules on the shaped testbed: 1F1B, GPipe, fixed kFkB on the memory curve, the tuner.

``python benchmarks/pipeline_schedules.py [--network steady|preempted|both] [--iterations 4]``
(needs root for network namespaces). A GPT-Medium-like model (24 blocks, hidden 1024, sequence
256, fp32 replay) is cut into 4 stages of 6 blocks on 4 single-GPU nodes (V100, 1 Gbit/s cloud
links, bytes and bandwidth divided by ``--scale``). The global batch is 32; the (k, b) candidates
are the memory-limit curve of ``search.pipeline.memory_curve`` under a per-GPU memory limit chosen
so the curve has several points. For each network it runs every fixed candidate as one phase of
one set of processes (same network pattern: the preemption trace is periodic), then the online
tuner starting on 1F1B, and prints per plan: measured median step, predicted step from the cost
model fed with this run's profiled transfers, and the pairwise ranking agreement of the two.

Preempted network: background TCP flows between the nodes of adjacent stages, on for 1.5 s of
every 3 s in both directions (``runtime.pipeline.preempt``), competing for the shaped links.
Compute is replayed (sleeps), so the machine's load shows up as noise: run on a quiet machine.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from runtime.pipeline import PipelineConfig, TunerConfig, TunerRun, run_pipeline
from runtime.pipeline.preempt import Background, Flow, PreemptionTrace
from runtime.pipeline.profile import profile_records
from runtime.testbed import Testbed
from search.feasibility import MemoryConfig, MemoryModel
from search.pipeline import memory_curve, plan_memory_reasons
from simulator.pipeline.cost import TransferWindow, pipeline_length, prior_transfers
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Plan, Stage, Variable

V100 = DeviceType(name="V100", fp32_tflops=15.7, fp16_tflops=125.0, memory_gb=32.0, memory_bw_gbs=900.0)
STAGES, BLOCKS, HIDDEN, SEQ, BATCH = 4, 24, 1024, 256, 32


def gpt_medium() -> ModelSpec:
    """24 transformer blocks: 12·h² parameters, 24·h²·s forward FLOPs and s·h·4 output bytes per sample."""
    layers = tuple(
        Layer(
            name=f"block{i}",
            kind="linear",  # a block is dominated by its GEMMs (backward 2x forward)
            fwd_flops=24.0 * HIDDEN * HIDDEN * SEQ,
            activation_bytes=4.0 * SEQ * HIDDEN,
            variables=(Variable(name=f"block{i}.w", shape=(12 * HIDDEN, HIDDEN)),),
        )
        for i in range(BLOCKS)
    )
    return ModelSpec(name="GPT-Medium-like", family="LM", batch_size=BATCH, layers=layers)


def cluster(gbps: float) -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device="V100", gpus=1, nic_gbps=gbps) for i in range(STAGES))
    return ClusterSpec(name="cloud-4", device_types=(V100,), nodes=nodes, intra_node_gbps=300.0)


def template() -> Plan:
    per = BLOCKS // STAGES
    stages = tuple(
        Stage(first_layer=s * per, last_layer=(s + 1) * per, devices=(f"n{s}:0",)) for s in range(STAGES)
    )
    return Plan(
        stages=stages,
        global_batch=BATCH,
        batch_shares={"n0:0": BATCH},
        micro_batch_size=BATCH,
        num_micro_batches=1,
    )


def trace() -> PreemptionTrace:
    flows = [Flow(src=a, dst=b, start_s=0.0, end_s=1.5) for a in range(STAGES - 1) for b in (a + 1,)]
    flows += [Flow(src=a + 1, dst=a, start_s=0.0, end_s=1.5) for a in range(STAGES - 1)]
    return PreemptionTrace(flows=tuple(flows), period_s=3.0)


def label(p: Plan) -> str:
    n = p.replica_micro_batches(0)
    return f"{p.schedule} k={p.group_size(n)} b={p.micro_batch_size}"


def pairwise(a: list[float], b: list[float]) -> float:
    pairs = [(i, j) for i, j in itertools.combinations(range(len(a)), 2) if a[i] != a[j]]
    agree = sum((a[i] < a[j]) == (b[i] < b[j]) for i, j in pairs)
    return agree / len(pairs) if pairs else float("nan")


def phase_records(records: dict[int, dict[str, Any]], phase: int) -> dict[int, dict[str, Any]]:
    """Every rank's events during phase ``phase``'s measured steps (warm-up left out)."""
    out = {}
    for r, rec in records.items():
        steps = [st for st in rec["steps"] if st[0] == phase][1:]
        lo, hi = steps[0][1], steps[-1][2]
        out[r] = {**rec, "events": [e for e in rec["events"] if lo <= e[2] < hi]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--network", choices=["steady", "preempted", "both"], default="both")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--scale", type=float, default=20.0)
    ap.add_argument("--gbps", type=float, default=2.5)
    ap.add_argument("--memory-gb", type=float, default=3.2, help="usable GPU memory that bends the curve")
    ap.add_argument("--activation-factor", type=float, default=16.0, help="stored activations / block output")
    a = ap.parse_args()
    model, cl = gpt_medium(), cluster(a.gbps)
    mem = MemoryModel(
        model, cl, MemoryConfig(activation_factor=a.activation_factor, device_usable=a.memory_gb / 32.0)
    )
    curve = memory_curve(template(), mem)
    plans = [c.plan for c in curve]
    one_f_one_b = next((p for p in plans if p.schedule == "1f1b"), None)
    print(
        "memory curve:", ", ".join(f"(k={c.k}, b={c.micro_batch_size}, {c.peak_fraction:.0%})" for c in curve)
    )
    assert all(not plan_memory_reasons(p, mem) for p in plans)
    cfg = PipelineConfig(compute="replay", warmup=1, iterations=a.iterations, scale=a.scale, timeout_s=600)
    networks = ["steady", "preempted"] if a.network == "both" else [a.network]
    for net in networks:
        with Testbed(cl, scale=a.scale) as tb:
            bg = Background(trace(), tb) if net == "preempted" else None
            if bg:
                bg.__enter__()
            try:
                t = time.monotonic()
                fixed = run_pipeline(model, cl, plans, tb, cfg)
                tuned = run_pipeline(
                    model, cl, plans, tb, cfg,
                    TunerRun(steps=len(plans) * (a.iterations + 1), start=plans.index(one_f_one_b) if one_f_one_b else 0,
                             config=TunerConfig(interval=2, margin=0.03)),
                )  # fmt: skip
                wall = time.monotonic() - t
            finally:
                if bg:
                    bg.__exit__(None, None, None)
        measured = [
            statistics.median(m.iteration_times) if not m.failure else float("nan")
            for m in fixed.measurements
        ]
        predicted = []
        for i, p in enumerate(plans):
            # the paper profiles every plan: this phase's compute and transfers, prior where unsampled
            prof = profile_records(phase_records(fixed.records, i))
            window = prof.feed(TransferWindow(window=64))
            transfers = {**prior_transfers(model, cl, p), **window.means()}
            predicted.append(pipeline_length(p, prof.fwd, prof.bwd, transfers))
        print(f"\n== {net} network ({a.gbps} Gbit/s links, scale {a.scale}; wall {wall:.0f} s) ==")
        print(f"{'plan':<22} {'measured ms':>12} {'predicted ms':>13}")
        for p, m, q in zip(plans, measured, predicted, strict=True):
            print(f"{label(p):<22} {1000 * m:>12.0f} {1000 * q:>13.0f}")
        tm = tuned.measurements[0]
        tuned_ms = 1000 * statistics.median(tm.iteration_times) if not tm.failure else float("nan")
        print(f"{'adaptive (tuner)':<22} {tuned_ms:>12.0f} {'':>13}")
        for e in tuned.tuner_log:
            if "switch_to" in e:
                print(f"  step {e['step']}: -> {label(plans[e['switch_to']])}: {e['reason']}")
        if one_f_one_b is not None:
            base = measured[plans.index(one_f_one_b)]
            print(
                f"adaptive vs 1F1B: {base / (tuned_ms / 1000):.2f}x; vs best fixed: {min(measured) / (tuned_ms / 1000):.2f}x"
            )
        print(f"cost model pairwise ranking of the measured plans: {pairwise(measured, predicted):.2f}")


if __name__ == "__main__":
    main()
