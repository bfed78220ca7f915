"""Hardware-aware load balancing on heterogeneous GPUs (Whale §3.3, §5.2): predicted and measured.

``python benchmarks/heterogeneous_balance.py [--repeats 5] [--iterations 4] [--dilation D] [--dtypes fp32,float16] [--no-measure]``
(measuring needs root for the testbed's network namespaces).

1. PREDICTED, at the paper's scale (cost model ``simulator.hybrid.predict``, memory from
   ``search.feasibility.MemoryModel``): data parallelism on 8 V100 + 8 P100 (two 8-GPU nodes,
   50 Gbit/s Ethernet as in Whale §5) with Algorithm 1's shares vs the even split, on ResNet50 and
   BERT-large (zoo specs, the model's per-GPU batch × 16, FP32); a 4-stage BERT-large pipeline on
   4 V100 + 4 P100 (nested DP 2, 1F1B) and on 2 V100 + 2 P100, memory-ordered and speed-balanced
   vs the even partition. Mixed-precision rows (FP16 on tensor cores) are printed beside, labelled.
2. The memory case: global batches where only Algorithm 1's shares fit (BERT-large in FP16 on
   8 V100 + 8 P100 and on 2 A100-40GB + 2 T4): the even and the capacity-proportional shares
   overflow a device, Algorithm 1's do not.
3. MEASURED on the emulated testbed (replayed compute at each device's own type, real gloo
   communication on shaped links, bytes and bandwidth scaled and time dilated as the executor's
   ``dilated_scales``): 2 V100 + 2 P100 (four processes: this host has two shared cores), DP on both
   models and the 4-stage pipeline through ``runtime.hybrid.testbed.measure_plan`` (pipelines run
   on ``runtime.pipeline`` with ``HybridPlan.to_plan``), the even and the balanced plan
   interleaved repeat by repeat; per repeat the speed-up is even / balanced median step; printed:
   the median over repeats with a 95 % bootstrap interval, and the prediction's error.

Precision. Whale §5.2 names none for its 1.3-1.4x (8 V100 + 8 P100, 50 Gbit/s, TensorFlow 1.12);
its Algorithm 1 balances by single-precision FLOP/s (DF_i, §3.3); automatic mixed precision is one
of the optimizations Whale integrates (§4, citing Micikevicius et al.), stated as enabled only for
M6-MoE (§5.3.2). Both are measured here (``--dtypes fp32,float16``, the two interleaved per case).
With equal counts of two types the best speed-up of any shares over the even split is
(1 + r) / 2, r = the slower type's compute time / the faster's; 1.3-1.4x means r = 1.6-1.8, the
FP32 ratio (15.7 / 9.3 = 1.69 by peaks). The compute model's FP32 r is 1.56 (ResNet50) and 1.61
(BERT-large), below the peak ratio because bandwidth-bound layers scale with 900 / 732 GB/s, so
its FP32 bound is 1.28x / 1.30x before any communication ("BOUND" below).

Mixed precision ("float16" rows) is modelled as PyTorch AMP (``torch.autocast`` + GradScaler):
- compute: matrix layers (conv, linear, attention) at the FP16 peak (V100 tensor cores 125 TFLOPS;
  P100 has no tensor cores, its FP16 rate is 2x FP32 via half2: 18.7 TFLOPS), the other layers at
  the FP32 vector rate; every layer's bytes at 2 per element, so bandwidth-bound layers scale with
  900 / 732 GB/s (``simulator.analytical.compute.roofline``: the replay and the cost model alike);
- data-parallel gradients stay FP32: autocast keeps FP32 master parameters, so the gradients DDP
  all-reduces are FP32 (4 bytes per parameter, ``Variable.grad_bytes``); FP16 gradient compression
  (DDP's fp16_compress_hook) is an opt-in a user must add and is not assumed;
- memory: parameters, gradients and Adam's state stay FP32; stored activations shrink by
  ``search.hybrid.autocast_activation_factor`` (autocast's per-op dtypes: ResNet50 0.50, BERT-large
  0.64, its residual stream and LayerNorms staying FP32), applied through
  ``MemoryConfig.activation_factor`` to the planner and to the testbed's device ledgers alike.
  Autocast's cached FP16 weight copies (BERT-large 0.67 GB) are not counted (inside the 10 % margin).
The testbed replays the compute model's per-type layer times, so a measured speed-up checks the
shares, the overlap and the communication, not the compute model's FP16 ratio r itself.

Batch sizes (decided from the paper and published limits, before any float16 or new-batch figure
was computed or measured). Whale §5.2 gives no batch ("the same batch size for all model replicas
as the baseline"): the even baseline's per-replica batch must fit the smallest GPU, a 16 GB P100.
ResNet50: the zoo's 32 per GPU (AutoSync's Table 1). BERT-large: 8 per GPU at sequence length 128
(the zoo's, AutoSync's Table 1), for FP32 and mixed precision alike. Reason: google-research/bert's
README ("Out-of-memory issues", TensorFlow 1.11, Adam, FP32) measures the largest BERT-Large batch
at sequence length 128 on a 12 GB Titan X as 6; with ~6 GB fixed (FP32 parameters, gradients, Adam
moments, CUDA context) that is ~1 GB of activations per sample, so a 16 GB P100 holds ~10 in FP32
and, with AMP's ~0.64 activation bytes and autocast's 0.67 GB weight cache, ~15: the largest power
of two a user sets for the even baseline is 8 in both precisions. (This memory model's BERT-large
activations are the traced layer outputs, 0.2 GB per sample, which under-count the real footprint;
the published limit decides the batch, not this model.) At 8 per GPU BERT-large's DP step is bound
by its 331 ms all-reduce at 50 Gbit/s, in both plans: that is what a user running it gets.

Device figures are the published ones (docs/architecture.md, NVIDIA datasheets): V100-SXM2-32GB 15.7
FP32 / 125 FP16 TFLOPS, 900 GB/s; P100-PCIe-16GB 9.3 / 18.7 TFLOPS, 732 GB/s; A100-40GB 19.5 / 312,
1555 GB/s; T4 8.1 / 65, 320 GB/s. Whale §5 says "NVIDIA 32-GB V100 GPUs [3] or NVIDIA 16-GB P100 GPUs
[2]" on "a shared cloud GPU cluster" and names no form factor. PCIe is the P100 cloud instances
carry, and it is the choice *favourable* to the 1.3x target: the SXM2 P100 (10.6 TFLOPS FP32, the
one in simulator/extract/zoo_clusters.py) is closer to the V100 (peak ratio 1.48 instead of 1.69),
which lowers the (1 + r)/2 bound. The specs are not tuned to reach a target.

Gradient sync (since issue 19's overlap change): the runtime all-reduces DP gradients in DDP-style
25 MiB buckets started during the backward (``simulator.hybrid.buckets``), and the cost model
times the same buckets (``predict(overlap=True)``); "fused" figures below are the old schedule (one
all-reduce after the backward, ``overlap=False``), printed for comparison. Overlap shortens every
step, but a speed-up of balanced over even can only fall when the sync is large: with it hidden,
a communication-bound step (BERT-large at 50 Gbit/s: 0.32 s of all-reduce vs 0.27-0.35 s of
compute) is bound by the wire in both plans. Predictions use the replay's own CostParams
(``runtime.hybrid.config.replay_cost_params``: dtype, efficiency, the profile store's profiles).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Literal

from runtime.hybrid.config import HybridConfig, replay_cost_params
from search.feasibility import MemoryConfig, MemoryModel
from search.hybrid import (
    autocast_activation_factor,
    balanced_data_parallel,
    balanced_pipeline,
    device_slots,
    even_data_parallel,
    even_pipeline,
    even_shares,
    fits,
    memory_constrained_balance,
    memory_reasons,
    proportional_shares,
    replicate_profile,
)
from search.hybrid.plans import data_parallel
from simulator import zoo
from simulator.analytical.params import CostParams
from simulator.hybrid import grad_buckets, predict
from simulator.spec import ClusterSpec, DeviceType, HybridPlan, ModelSpec, Node

V100 = DeviceType(
    name="V100-SXM2-32GB", fp32_tflops=15.7, fp16_tflops=125, memory_gb=32, memory_bw_gbs=900,
    source="NVIDIA Tesla V100 datasheet (SXM2 32GB: 15.7 FP32 / 125 tensor TFLOPS, 900 GB/s HBM2)",
)  # fmt: skip
P100 = DeviceType(
    name="P100-PCIe-16GB", fp32_tflops=9.3, fp16_tflops=18.7, memory_gb=16, memory_bw_gbs=732,
    source="NVIDIA Tesla P100 datasheet (PCIe 16GB: 9.3 FP32 / 18.7 FP16 TFLOPS, 732 GB/s HBM2)",
)  # fmt: skip
A100_40 = DeviceType(
    name="A100-40GB", fp32_tflops=19.5, fp16_tflops=312, tf32_tflops=156, bf16_tflops=312, memory_gb=40,
    memory_bw_gbs=1555,
)  # fmt: skip
T4 = DeviceType(name="T4-16GB", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
Dtype = Literal["float16"] | None
DTYPES: tuple[Dtype, ...] = (
    None,
    "float16",
)  # FP32 as the zoo specs, then mixed precision
NIC_GBPS = 50.0  # Whale §5: "Nodes are connected by 50Gb/s ethernet"
PCIE_GBPS = 126.0  # PCIe 3.0 x16 inside a node


# Per-GPU batch of the DP cases (see "Batch sizes" above): the zoo's, for both precisions.
DP_BATCH_PER_GPU = {"ResNet50": 32, "BERT-large": 8}


def model_params(model: ModelSpec, dtype: Dtype) -> CostParams:
    """The CostParams the testbed's replay uses for ``model`` in ``dtype`` (one compute model)."""
    return replay_cost_params(HybridConfig(compute_dtype=dtype), model.name)


def activation_factor(model: ModelSpec, dtype: Dtype) -> float:
    """Stored activation bytes / traced bytes: 1 in FP32, autocast's dtypes under mixed precision."""
    return autocast_activation_factor(model) if dtype == "float16" else 1.0


def memory_model(model: ModelSpec, cluster: ClusterSpec, dtype: Dtype) -> MemoryModel:
    """The one memory model, with the precision's activation factor (Adam, 90 % usable)."""
    return MemoryModel(model, cluster, MemoryConfig(activation_factor=activation_factor(model, dtype)))


def two_types(a: DeviceType, na: int, b: DeviceType, nb: int, name: str) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        device_types=(a, b),
        nodes=(
            Node(name="v", device=a.name, gpus=na, nic_gbps=NIC_GBPS),
            Node(name="p", device=b.name, gpus=nb, nic_gbps=NIC_GBPS),
        ),
        intra_node_gbps=PCIE_GBPS,
        description="V100+P100-like (published figures)" if a is V100 else "",
    )


def devices(cluster: ClusterSpec) -> list[str]:
    return [f"{n.name}:{g}" for n in cluster.nodes for g in range(n.gpus)]


def shares_text(plan: HybridPlan) -> str:
    s = plan.device_shares(0)
    by_type: dict[str, list[int]] = {}
    for d, v in s.items():
        by_type.setdefault(d.split(":")[0], []).append(v)
    return " ".join(f"{k}:{'/'.join(map(str, sorted(set(v))))}" for k, v in by_type.items())


def predicted_dp(model: ModelSpec, cluster: ClusterSpec, batch: int, params: CostParams) -> tuple[float, str]:
    mem = memory_model(model, cluster, params.compute_dtype)
    hw, _ = balanced_data_parallel(model, cluster, mem, batch, params=params)
    ev = even_data_parallel(model, cluster, batch)
    tb, te = predict(model, cluster, hw, params), predict(model, cluster, ev, params)
    fit = "fits" if not memory_reasons(hw, mem) and not memory_reasons(ev, mem) else "OOM"
    return te.seconds / tb.seconds, (
        f"{model.name:<11} {params.compute_dtype or 'fp32':<8} batch {batch:<4} even {te.seconds * 1e3:8.1f} ms  "
        f"balanced {tb.seconds * 1e3:8.1f} ms  speed-up {te.seconds / tb.seconds:5.2f}x  "
        f"(sync {tb.sync * 1e3:.0f} ms; shares {shares_text(hw)}; memory {fit})"
    )


def predicted_pipeline(
    model: ModelSpec, cluster: ClusterSpec, batch: int, mb: int, params: CostParams
) -> tuple[float, str]:
    mem = memory_model(model, cluster, params.compute_dtype)
    devs = devices(cluster)
    hw = balanced_pipeline(model, cluster, mem, devs, 4, batch, mb, params=params)
    ev = even_pipeline(model, cluster, mem, devs, 4, batch, mb, params=params)
    tb, te = predict(model, cluster, hw.plan, params), predict(model, cluster, ev.plan, params)
    oom_e = "; even OOM: " + memory_reasons(ev.plan, mem)[0] if memory_reasons(ev.plan, mem) else ""
    assert not memory_reasons(hw.plan, mem), memory_reasons(hw.plan, mem)
    return te.seconds / tb.seconds, (
        f"{model.name:<11} {params.compute_dtype or 'fp32':<8} {len(devs)} GPUs nested DP {hw.plan.nested_dp} "
        f"batch {batch} mb {mb}: even {te.seconds * 1e3:7.1f} ms  balanced {tb.seconds * 1e3:7.1f} ms  "
        f"speed-up {te.seconds / tb.seconds:5.2f}x\n"
        f"    balanced stages {[tg.devices[0] for tg in hw.plan.task_graphs]} layers {list(hw.partition.ranges)}\n"
        f"    even     stages {[tg.devices[0] for tg in ev.plan.task_graphs]} layers {list(ev.partition.ranges)}{oom_e}"
    )


Shares = dict[str, tuple[int, ...]]


def memory_case(model: ModelSpec, cluster: ClusterSpec, params: CostParams, batches: range) -> Shares | None:
    """The global batches where only Algorithm 1's shares fit; the first one in detail (returned)."""
    mem = memory_model(model, cluster, params.compute_dtype)
    devs = devices(cluster)
    slots = device_slots(model, cluster, devs, mem, batch=model.batch_size, params=params)
    print(
        f"{cluster.name}, {model.name} {params.compute_dtype or 'fp32'}: DF (compute model) "
        f"{slots[0].flops / 1e12:.1f} / {slots[-1].flops / 1e12:.1f} TFLOP/s, usable "
        f"{slots[0].capacity / 1e9:.1f} / {slots[-1].capacity / 1e9:.1f} GB"
    )
    found = []
    first: Shares | None = None
    for batch in batches:
        prof = replicate_profile(mem, 0, len(model.layers), batch)
        prop = proportional_shares(batch, [s.flops for s in slots])
        even = even_shares(batch, len(devs))
        if not fits(prof, slots, even) or not fits(prof, slots, prop):
            continue
        try:
            bal = memory_constrained_balance(prof, slots)
        except ValueError:
            continue
        found.append(batch)
        if len(found) > 1:
            continue
        first = {"even": tuple(even), "proportional": tuple(prop), "Algorithm 1": tuple(bal.shares)}
        print(f"  global batch {batch}:")
        for label, shares in (("even", even), ("proportional", prop)):
            plan = data_parallel(model, cluster, devs, shares)
            print(
                f"    {label:<13} {shares_text(plan)}: {len(memory_reasons(plan, mem))} devices OOM, e.g. {memory_reasons(plan, mem)[0]}"
            )
        plan = data_parallel(model, cluster, devs, bal.shares)
        assert not memory_reasons(plan, mem)
        moved = sum(s.units for s in bal.shifts)
        print(
            f"    Algorithm 1   {shares_text(plan)}: fits (fullest device {max(bal.mem_utils):.0%}); "
            f"{len(bal.shifts)} shifts moved {moved} samples; predicted step "
            f"{predict(model, cluster, plan, params).seconds * 1e3:.0f} ms"
        )
    span = f"{found[0]}..{found[-1]}" if found else "none"
    print(f"  global batches (step {batches.step}) where only Algorithm 1 fits: {len(found)} ({span})")
    return first


def measured_sync(run: object, dilation: float) -> float | None:
    """Median over steps of the DP all-reduce after the last device's backward (real seconds).

    A non-pipelined hybrid record per step is [start, end of backward, end of step, busy]; the
    step's sync is the last end minus the last end of backward. Pipelined runs: None.
    """
    records = getattr(run, "records", {})
    steps = [rec.get("steps") for rec in records.values()]
    if not steps or any(s is None or not s or len(s[0]) != 4 for s in steps):
        return None
    n = len(steps[0])
    return statistics.median(
        (max(s[k][2] for s in steps) - max(s[k][1] for s in steps)) / dilation for k in range(1, n)
    )


def bound_line(model: ModelSpec, cluster: ClusterSpec, params: CostParams) -> str:
    """The best speed-up of any shares over the even split with sync free: (1 + r) / 2 per pair.

    r = a P100's compute seconds / a V100's for the same rows (the compute model, this dtype); with
    equal numbers of each type, proportional shares give (1 + r) / 2 over the even split
    (even: t_P; proportional: both types at 2 t_P / (1 + r)). With the predicted fused
    all-reduce S added to both: (t_P + S) / (2 t_P / (1 + r) + S). With the overlapped buckets:
    the cost model's even step over its step for Algorithm 1's shares (same global batch).
    """
    batch = DP_BATCH_PER_GPU[model.name] * len(devices(cluster))
    ev = even_data_parallel(model, cluster, batch)
    cost = predict(model, cluster, ev, params, overlap=False)
    tv = min(cost.busy.values())
    tp = max(cost.busy.values())
    r = tp / tv
    fused = (tp + cost.sync) / (2 * tp / (1 + r) + cost.sync)
    hw, _ = balanced_data_parallel(
        model, cluster, memory_model(model, cluster, params.compute_dtype), batch, params=params
    )
    overlapped = predict(model, cluster, ev, params).seconds / predict(model, cluster, hw, params).seconds
    return (
        f"{model.name:<11} {params.compute_dtype or 'fp32':<8} r = P100/V100 compute time {r:.2f}: "
        f"bound (1 + r)/2 = {(1 + r) / 2:.2f}x; with the fused all-reduce "
        f"({cost.sync * 1e3:.0f} ms vs P100 compute {tp * 1e3:.0f} ms): {fused:.2f}x; "
        f"overlapped buckets (Algorithm 1): {overlapped:.2f}x"
    )


def bootstrap(ratios: Sequence[float], rng: random.Random, n: int = 2000) -> tuple[float, float, float]:
    """Median of ``ratios`` and the 2.5 / 97.5 percentiles of its bootstrap distribution."""
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return statistics.median(ratios), meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def interleave(runs: list[Callable[[], float]], repeats: int) -> list[list[float]]:
    """Run every plan once per repeat, alternating the order; median step seconds per (plan, repeat)."""
    out: list[list[float]] = [[] for _ in runs]
    for r in range(repeats):
        order = range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            out[i].append(runs[i]())
    return out


def measure(args: argparse.Namespace) -> None:
    from runtime.hybrid.testbed import measure_plan
    from runtime.testbed import dilated_scales, make_launcher

    rng = random.Random(0)
    cluster = two_types(V100, 2, P100, 2, "V100x2+P100x2")
    scale, dilation = dilated_scales(cluster, args.dilation)
    print(
        f"\n== MEASURED on the testbed: 2 V100 + 2 P100 (two nodes, {NIC_GBPS:g} Gbit/s NICs), "
        f"bytes / {scale:g}, links / {scale * dilation:g}, dilation {dilation:g}, {args.repeats} "
        f"interleaved repeats x {args.iterations} steps (runtime.hybrid.testbed.measure_plan) =="
    )
    with make_launcher(cluster, scale * dilation) as launcher:
        print(f"launcher: {getattr(launcher, 'environment', type(launcher).__name__)}")

        details: dict[int, list[tuple[float | None, dict[str, float]]]] = {}

        def runner(model: ModelSpec, plan: HybridPlan, dtype: Dtype) -> Callable[[], float]:
            def go() -> float:
                run = measure_plan(
                    model, cluster, plan, iterations=args.iterations, warmup=1, scale=scale,
                    dilation=dilation, memory_fraction=0.9, optimizer_state_factor=2.0, timeout_s=900,
                    launcher=launcher, compute_dtype=dtype, activation_factor=activation_factor(model, dtype),
                )  # fmt: skip
                if run.status != "ok" or run.iteration_s is None:
                    raise RuntimeError(f"{plan.name}: {run.status}: {run.reason}")
                details.setdefault(id(plan), []).append((measured_sync(run, dilation), run.busy_s))
                return run.iteration_s

            return go

        cases: list[tuple[str, ModelSpec, HybridPlan, HybridPlan, Dtype]] = []
        for name in ("ResNet50", "BERT-large"):
            for dtype in args.dtypes:  # one model's precisions back to back
                model = zoo.model(name)
                batch = DP_BATCH_PER_GPU[name] * 4
                p = model_params(model, dtype)
                hw, _ = balanced_data_parallel(
                    model, cluster, memory_model(model, cluster, dtype), batch, params=p
                )
                ev = even_data_parallel(model, cluster, batch)
                label = f"DP {name} {dtype or 'fp32'} batch {batch}"
                cases.append((label, model, ev, hw, dtype))
        bert = zoo.model("BERT-large")
        mem = MemoryModel(bert, cluster)
        devs = devices(cluster)
        hwp = balanced_pipeline(bert, cluster, mem, devs, 4, 32, 4).plan
        evp = even_pipeline(bert, cluster, mem, devs, 4, 32, 4).plan
        cases.append(("4-stage pipeline BERT-large fp32 b32 mb4", bert, evp, hwp, None))
        print(
            f"{'case':<42} {'even ms':>9} {'bal. ms':>9} {'pred. even':>10} {'pred. bal.':>10} "
            f"{'speed-up (95% CI)':>22} {'predicted':>9} {'error':>6}"
        )
        for label, model, ev, hw, dtype in cases:
            t0 = time.monotonic()
            params = model_params(model, dtype)
            try:
                even_s, bal_s = interleave([runner(model, ev, dtype), runner(model, hw, dtype)], args.repeats)
            except RuntimeError as e:
                print(f"{label:<42} FAILED: {e}")
                continue
            ratios = [e / b for e, b in zip(even_s, bal_s, strict=True)]
            med, lo, hi = bootstrap(ratios, rng)
            pe, pb = predict(model, cluster, ev, params).seconds, predict(model, cluster, hw, params).seconds
            pred = pe / pb
            fe = predict(model, cluster, ev, params, overlap=False).seconds
            fb = predict(model, cluster, hw, params, overlap=False).seconds
            print(
                f"{label:<42} {statistics.median(even_s) * 1e3:9.0f} {statistics.median(bal_s) * 1e3:9.0f} "
                f"{pe * 1e3:10.0f} {pb * 1e3:10.0f} {med:8.2f}x [{lo:.2f}, {hi:.2f}] {pred:8.2f}x "
                f"{abs(pred - med) / med:6.0%}   ({time.monotonic() - t0:.0f} s)"
            )
            print(
                f"    per repeat (ms) even {[round(x * 1e3) for x in even_s]} balanced {[round(x * 1e3) for x in bal_s]}"
            )
            if ev.num_micro_batches == 1:
                print(
                    f"    fused (non-overlapped) all-reduce, predicted: even {fe * 1e3:.0f} ms balanced "
                    f"{fb * 1e3:.0f} ms speed-up {fe / fb:.2f}x"
                )
            for what, plan in (("even", ev), ("balanced", hw)):
                runs = details.get(id(plan), [])
                syncs = [x for x, _ in runs if x is not None]
                busy = {d: statistics.median(b[d] for _, b in runs) for d in runs[0][1]} if runs else {}
                cost = predict(model, cluster, plan, params)
                n_buckets = len(grad_buckets(model, 0, len(model.layers)))
                sync_text = (
                    f"sync exposed after the last backward {statistics.median(syncs) * 1e3:.0f} ms "
                    f"(pred. {cost.exposed_sync * 1e3:.0f}; {n_buckets} buckets, "
                    f"{cost.sync * 1e3:.0f} ms of calls); " if syncs else ""
                )  # fmt: skip
                print(
                    f"    {what:<8} {sync_text}busy ms (measured/pred.) "
                    + " ".join(f"{d} {v * 1e3:.0f}/{cost.busy[d] * 1e3:.0f}" for d, v in busy.items())
                )
            sys.stdout.flush()

        print(
            "\n-- Memory on the testbed: each device's ledger against its type's capacity (90 % usable, Adam) --"
        )
        f16 = model_params(bert, "float16")
        case = memory_case(bert, cluster, f16, range(8, 1025, 8))
        for label, shares in (case or {}).items():
            plan = data_parallel(bert, cluster, devs, list(shares))
            run = measure_plan(
                bert, cluster, plan, iterations=2, warmup=0, scale=scale, dilation=dilation,
                memory_fraction=0.9, optimizer_state_factor=2.0, timeout_s=900, launcher=launcher,
                compute_dtype="float16", activation_factor=activation_factor(bert, "float16"),
            )  # fmt: skip
            peak = max(run.peak_memory_bytes.values(), default=0.0) / 1e9
            what = run.reason if run.status != "ok" else f"ran, fullest device {peak:.1f} GB"
            print(f"  measured {label:<13} {shares_text(plan)}: {run.status}: {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--dilation", type=float, default=None, help="time dilation; default: the testbed's")
    ap.add_argument("--no-measure", action="store_true", help="print the predictions only")
    ap.add_argument(
        "--dtypes",
        default="fp32,float16",
        help="measured DP rows: fp32 and/or float16 (mixed precision, AMP), comma-separated",
    )
    args = ap.parse_args()
    args.dtypes = [None if d == "fp32" else d for d in args.dtypes.split(",")]
    if any(d not in (None, "float16") for d in args.dtypes):
        ap.error("--dtypes: fp32 and/or float16")

    print("== PREDICTED (cost model), data parallelism on 8 V100 + 8 P100: Algorithm 1's shares vs even ==")
    cl16 = two_types(V100, 8, P100, 8, "V100x8+P100x8")
    for dtype in DTYPES:
        for name in ("ResNet50", "BERT-large"):
            model = zoo.model(name)
            _, line = predicted_dp(model, cl16, DP_BATCH_PER_GPU[name] * 16, model_params(model, dtype))
            print(("  [mixed precision] " if dtype else "  ") + line)
    print("\n== BOUND: best speed-up of hardware-aware DP shares over even (equal V100 and P100 counts) ==")
    for cl in (cl16, two_types(V100, 2, P100, 2, "V100x2+P100x2")):
        print(f"  {cl.name}:")
        for dtype in DTYPES:
            for name in ("ResNet50", "BERT-large"):
                m = zoo.model(name)
                print("    " + bound_line(m, cl, model_params(m, dtype)))
    print(
        "\n== PREDICTED (cost model), 4-stage BERT-large pipeline: memory-ordered, speed-balanced vs even =="
    )
    bert = zoo.model("BERT-large")
    for dtype in DTYPES:
        for cl, batch in (
            (two_types(V100, 4, P100, 4, "V100x4+P100x4"), 64),
            (two_types(V100, 2, P100, 2, "2+2"), 32),
        ):
            _, line = predicted_pipeline(bert, cl, batch, 4, model_params(bert, dtype))
            print(("  [mixed precision] " if dtype else "  ") + line)
    print(
        "\n== Memory: where only Algorithm 1's plan fits (the even and the capacity-proportional shares OOM) =="
    )
    memory_case(bert, cl16, model_params(bert, "float16"), range(16, 4097, 16))
    memory_case(
        bert,
        two_types(A100_40, 2, T4, 2, "A100-40GBx2+T4x2"),
        model_params(bert, "float16"),
        range(8, 2049, 8),
    )
    if args.no_measure:
        print("\n(measurement skipped: --no-measure; the speed-ups above are PREDICTIONS)")
        return
    measure(args)


if __name__ == "__main__":
    main()
