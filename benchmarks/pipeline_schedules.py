"""Pipeline schedules on the shaped testbed: 1F1B, GPipe, fixed kFkB on the memory curve, the tuner (issue 17).

``python benchmarks/pipeline_schedules.py [--model gpt|unet|both] [--network steady|preempted|both]
[--repeats 3] [--iterations 4] [--dilation auto|D]`` (needs root for network namespaces).

Models, 4 stages on 4 single-GPU nodes (V100 replayed, fp32, efficiency 0.5), global batch 32:
- ``gpt``: GPT-Medium-like, 24 blocks (hidden 1024, sequence 256), 6 per stage, 2.5 Gbit/s links;
- ``unet``: a U-Net-like CNN (256x256 images, 64..1024 channels, 4 levels), cut where its
  stage FLOPs are most even; the encoder outputs its skip connections carry cross the cuts with the
  activation (``simulator.pipeline.cost.cut_bytes``), 100 Gbit/s links.
The memory limit is the one at which 1F1B's largest micro-batch is ``--b1`` (8), so the memory
curve (``search.pipeline.memory_curve``) is (k=1, b=8), (k=2, b=4), (k=4, b=2), (k=8, b=1): four
plans, six pairs for the ranking (until 2026-11-25b ``--b1`` was 4 and the curve had three plans,
so one pair of plans within each other's intervals made the pairwise figure 0.67). Two reference
plans off the curve: GPipe (k = n; below), and a control,
1F1B with b = 1 (below the curve: an eighth of the stash), which separates what smaller
micro-batches give (fewer bubbles) from what grouping gives (overlapping transfers). No plan runs
over its limit (the memory rule of ``search.pipeline.plan_memory``, the sampler's memory model).

GPipe (decided 2026-11-27, before any GPipe timing; issue 17's last "done when" item). Without
re-materialisation GPipe stashes the whole batch on *every* stage at every b (32 samples), where
the curve plans stash 32 / 24 / 16 / 8 samples on stages 0-3 (min(n, (P - r)·k) micro-batches), and
it holds n micro-batches of point-to-point buffers on each side (all of a step's receives are posted
at its start). So plain GPipe needs, at every b, on GPT: stages 1-3 4.496 GB of 4.450 usable (+46 MB:
their stash equals stage 0's 3.221 GB, and their buffers, 32 samples x input + output activation =
0.067 GB, exceed the 0.017 GB of output-side buffers that stage 0 holds on the curve) and stage 0
4.463 GB (+12 MB: 32 instead of 16 samples of output buffers): 101.0 %, buffers; on U-Net stage 3
17.736 GB of 16.231 (+1.5 GB: the stash itself, 17.448 GB, as stage 3's stored activations per
sample are 8 % larger than stage 0's, which set the limit) and stage 0 +17 MB of buffers: 109.3 %,
mostly stash. Two ways were weighed:
(a) a device memory at which the whole set, GPipe included, fits: rejected, because every plan's
    stash is at most GPipe's (the whole batch), so at that limit the memory curve recomputed by
    the same rule is (k=1, b=32), (2, 16), (4, 8), (8, 4), (16, 2), (32, 1) on both models: 1F1B
    without pipelining and five GPipe plans, no kFkB left to compare;
(b) GPipe as its paper runs it (Huang et al. 2019, §2.2, re-materialisation), chosen: each stage
    keeps per micro-batch only its boundary tensors (the input its recomputation starts from, the
    output the runtime keeps for backward) and re-runs its forward inside the backward
    (``runtime.pipeline.stage_net.Recompute``: ``torch.utils.checkpoint``, non-reentrant; in replay
    the recomputed forward sleeps the forward's time again); its memory is
    ``plan_memory(..., recompute=True)`` (one micro-batch's recomputed activations + the boundaries
    of every stashed one + the same buffers) and its prior ``pipeline_length(..., recompute=True)``
    (each B lasts forward + backward). It runs under the same limit as every curve plan. Its micro-
    batch size is the one the prior predicts fastest among those that fit (b = 1, n = 32 on both
    models: 32 % / 17 % of the limit), as a user picking GPipe's micro-batch count would; a plain
    GPipe that fits would run instead, at its largest b. The table prints GPipe at every b plain and
    re-materialised (fullest stage, prior) and plain GPipe's stash and buffers per stage beside the
    curve's. Until 2026-11-25d GPipe was reported, not run.

Protocol (the testbed's, runtime/testbed/README.md): time dilation D (``runtime.testbed.
dilated_scales``: links keep ``suggest_scale``'s rates, bytes / (scale / D), compute x D, times / D)
and the per-call probe on the run's processes (``per_call_overhead_s``). Each repeat starts fresh
processes and runs every fixed plan as one phase (warm-up step + ``--iterations``; the order
rotates every repeat), then the online tuner from 1F1B (one evaluation every ``INTERVAL`` = 2
steps; every evaluation is printed: the steps it measured, each candidate's estimate); repeats are
interleaved, so load drifts hit every plan alike. The adaptive run has two figures (a decision,
2026-11-25b): *steady* = its steps after the first evaluation's switch step, ``--adaptive-steps``
of them (``--iterations + 1`` by default), the tuner's own choice in steady state, compared with
the fixed plans' steps after their warm-up step, and *from start* = every step after the warm-up,
i.e. also the 1F1B step the tuner profiles before its first decision and the switched-to plan's
first step (torch's lazy set-up of that runtime, the step a fixed phase leaves out as warm-up).
The target "adaptive >= 0.97x of the best fixed plan" is judged on *steady*; *from start* is what
a run of that many steps pays for starting on 1F1B. A plan's figure is the median of its pooled
iteration times over the repeats with a 95 % bootstrap interval
(``simulator.metrics.median_ci95``); a speed-up's interval is the 2.5-97.5 % range of the ratio
of bootstrap medians. The cost model's pairwise ranking is given three ways: over the curve
plans, over every measured fixed plan (curve, GPipe, control), and over the pairs of those whose
measured 95 % intervals are disjoint (a pair whose intervals overlap is a tie the measurement
cannot order; it is counted in the strict figures, left out of the third). Predictions: ``prior`` = the cost model from the compute model and bytes /
bandwidth only; ``+runtime`` = the prior plus the replay runtime's per-action cost measured in the
plan's phase (each F / B as long as it measured: the modelled compute plus what the action adds,
and the host time between a stage's actions less its input waits, ``Profile.host``), transfers
still bytes / bandwidth; ``profiled`` = the cost model fed with this plan's measured compute, host
time and mean transfer per link over the phase's messages, a message its receiver did not wait for
at the unloaded link's bytes / bandwidth (for re-materialised GPipe '+runtime' and 'profiled' take
its measured B, which holds the recomputation; 'prior' adds the forward to each backward) (the tuner's inputs; host time and the unwaited messages
since 2026-11-25d, before which only the waited-for ones were averaged). Preempted network: TCP flows in both directions of
every link between adjacent stages, on for 1.5 s of every 3 s (real-cluster seconds; x D on the
wall clock), competing with the pipeline for the shaped links.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import time
from typing import Any

from runtime.executor.config import ExecutorConfig
from runtime.pipeline import PipelineConfig, TunerConfig, TunerRun, run_pipeline
from runtime.pipeline.preempt import Background, Flow, PreemptionTrace
from runtime.pipeline.profile import profile_records
from runtime.testbed import Testbed, dilated_scales
from search.feasibility import MemoryConfig, MemoryModel
from search.pipeline import memory_curve, plan_memory, plan_memory_reasons
from search.pipeline.candidates import with_kb
from simulator.metrics import median_ci95
from simulator.pipeline.cost import (
    TransferWindow,
    pipeline_length,
    plan_stage_times,
    prior_transfers,
)
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Plan, Stage, Variable

V100 = DeviceType(name="V100", fp32_tflops=15.7, fp16_tflops=125.0, memory_gb=32.0, memory_bw_gbs=900.0)
STAGES, BATCH, EFFICIENCY = 4, 32, 0.5
INTERVAL = 2  # steps between the tuner's evaluations


def gpt_medium(blocks: int = 24, hidden: int = 1024, seq: int = 256) -> ModelSpec:
    """Transformer blocks: 12·h² parameters, 24·h²·s forward FLOPs and s·h·4 output bytes per sample."""
    layers = tuple(
        Layer(
            name=f"block{i}",
            kind="linear",  # a block is dominated by its GEMMs (backward 2x forward: inputs named)
            fwd_flops=24.0 * hidden * hidden * seq,
            activation_bytes=4.0 * seq * hidden,
            variables=(Variable(name=f"block{i}.w", shape=(12 * hidden, hidden)),),
            inputs=(f"block{i - 1}",) if i else (),
        )
        for i in range(blocks)
    )
    return ModelSpec(name="GPT-Medium-like", family="LM", batch_size=BATCH, layers=layers)


def unet(image: int = 256, base: int = 64, levels: int = 4) -> ModelSpec:
    """A U-Net-like CNN: encoder blocks (two 3x3 convs), bottleneck, decoder (2x2 up-conv, concat
    with the encoder output of the same level, two 3x3 convs), 1x1 head. Per-sample fp32 bytes."""
    layers: list[Layer] = []

    def add(
        name: str, flops: float, out_elems: float, shapes: list[tuple[int, ...]], inputs: tuple[str, ...]
    ) -> None:
        variables = tuple(Variable(name=f"{name}.w{j}", shape=s) for j, s in enumerate(shapes))
        layers.append(
            Layer(name=name, kind="conv2d", fwd_flops=flops, activation_bytes=4.0 * out_elems,
                  variables=variables, inputs=inputs)
        )  # fmt: skip

    cin, prev = 3, ""
    for lvl in range(levels + 1):  # encoder levels, then the bottleneck
        c, hw = base << lvl, (image >> lvl) ** 2
        name = f"enc{lvl + 1}" if lvl < levels else "bottleneck"
        add(
            name,
            2 * 9 * hw * (cin * c + c * c),
            c * hw,
            [(c, cin, 3, 3), (c, c, 3, 3)],
            (prev,) if prev else (),
        )
        cin, prev = c, name
    for lvl in reversed(range(levels)):
        c, hw = base << lvl, (image >> lvl) ** 2
        add(f"up{lvl + 1}", 2 * 4 * hw * cin * c, c * hw, [(cin, c, 2, 2)], (prev,))
        add(f"dec{lvl + 1}", 2 * 9 * hw * (2 * c * c + c * c), c * hw, [(c, 2 * c, 3, 3), (c, c, 3, 3)],
            (f"up{lvl + 1}", f"enc{lvl + 1}"))  # fmt: skip
        cin, prev = c, f"dec{lvl + 1}"
    add("head", 2 * image * image * cin * 2, 2 * image * image, [(2, cin, 1, 1)], (prev,))
    return ModelSpec(name="U-Net-like", family="CV", batch_size=BATCH, layers=tuple(layers))


def balanced_cuts(model: ModelSpec, stages: int) -> list[int]:
    """Layer boundaries of ``stages`` contiguous stages minimising the largest stage's FLOPs."""
    f = [layer.fwd_flops for layer in model.layers]
    best: tuple[float, list[int]] | None = None
    for cuts in itertools.combinations(range(1, len(f)), stages - 1):
        bounds = [0, *cuts, len(f)]
        worst = max(sum(f[a:b]) for a, b in itertools.pairwise(bounds))
        if best is None or worst < best[0]:
            best = (worst, bounds)
    assert best is not None
    return best[1]


MODELS = {"gpt": (gpt_medium, 2.5), "unet": (unet, 100.0)}


def cluster(gbps: float) -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device="V100", gpus=1, nic_gbps=gbps) for i in range(STAGES))
    return ClusterSpec(name="cloud-4", device_types=(V100,), nodes=nodes, intra_node_gbps=300.0)


def template(model: ModelSpec) -> Plan:
    bounds = balanced_cuts(model, STAGES)
    stages = tuple(
        Stage(first_layer=a, last_layer=b, devices=(f"n{s}:0",))
        for s, (a, b) in enumerate(itertools.pairwise(bounds))
    )
    return Plan(stages=stages, global_batch=BATCH, batch_shares={"n0:0": BATCH}, micro_batch_size=BATCH,
                num_micro_batches=1)  # fmt: skip


def memory_model(model: ModelSpec, cl: ClusterSpec, b1: int, activation_factor: float) -> MemoryModel:
    """The memory model whose limit lets 1F1B run micro-batches of ``b1`` and no larger."""
    probe = MemoryModel(model, cl, MemoryConfig(activation_factor=activation_factor, device_usable=1.0))
    need = max(v.memory.total / v.capacity for v in plan_memory(with_kb(template(model), 1, b1), probe))
    return MemoryModel(
        model, cl, MemoryConfig(activation_factor=activation_factor, device_usable=need * 1.001)
    )


def trace() -> PreemptionTrace:
    flows = [Flow(src=a, dst=a + 1, start_s=0.0, end_s=1.5) for a in range(STAGES - 1)]
    flows += [Flow(src=a + 1, dst=a, start_s=0.0, end_s=1.5) for a in range(STAGES - 1)]
    return PreemptionTrace(flows=tuple(flows), period_s=3.0)


def label(p: Plan) -> str:
    n = p.replica_micro_batches(0)
    return f"{p.schedule} k={p.group_size(n)} b={p.micro_batch_size}"


def pairwise(
    a: list[float], b: list[float], ci: list[tuple[float, float]] | None = None
) -> tuple[float, int]:
    """Fraction of pairs that ``b`` orders as ``a`` does, and the number of pairs.

    With ``ci`` (a's 95 % intervals) only pairs whose intervals are disjoint count. A pair that ``b``
    predicts equal (GPipe and kFkB with k = 8 on a steady chain: the simulation gives both the same
    length) counts one half: the prediction orders it neither way.
    """
    pairs = [(i, j) for i, j in itertools.combinations(range(len(a)), 2) if a[i] != a[j]]
    if ci is not None:
        pairs = [(i, j) for i, j in pairs if ci[i][1] < ci[j][0] or ci[j][1] < ci[i][0]]
    agree = sum(
        0.5 if math.isclose(b[i], b[j], rel_tol=1e-9) else float((a[i] < a[j]) == (b[i] < b[j]))
        for i, j in pairs
    )
    return (agree / len(pairs) if pairs else float("nan")), len(pairs)


def ratio_ci(num: list[float], den: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(num) / median(den) and the 2.5-97.5 % range of the ratio of bootstrap medians."""
    rng = random.Random(seed)
    rs = sorted(
        statistics.median(rng.choices(num, k=len(num))) / statistics.median(rng.choices(den, k=len(den)))
        for _ in range(n)
    )
    return statistics.median(num) / statistics.median(den), rs[int(0.025 * n)], rs[int(0.975 * n) - 1]


def phase_records(records: dict[int, dict[str, Any]], phase: int, warmup: int) -> dict[int, dict[str, Any]]:
    """Every rank's events during phase ``phase``'s measured steps (warm-up left out)."""
    out = {}
    for r, rec in records.items():
        steps = [st for st in rec["steps"] if st[0] == phase][warmup:]
        lo, hi = steps[0][1], steps[-1][2]
        out[r] = {**rec, "events": [e for e in rec["events"] if lo <= e[2] < hi]}
    return out


def gpipe_plan(model: ModelSpec, b: int) -> Plan:
    """GPipe (k = n: every forward before any backward) with micro-batch size ``b``."""
    return with_kb(template(model), BATCH // b, b)


def choose_gpipe(
    model: ModelSpec, cl: ClusterSpec, gpipes: list[Plan], mem: MemoryModel, params: Any
) -> tuple[Plan | None, bool]:
    """GPipe's plan and whether it re-materialises (module docstring: decided 2026-11-27 before
    any GPipe timing): without re-materialisation its largest micro-batch within the limit; when
    none fits, with it, at the micro-batch the prior cost model (the compute model's stage times,
    the backward re-running the forward, bytes / bandwidth) predicts fastest among those that fit."""
    plain = next((g for g in gpipes if not plan_memory_reasons(g, mem)), None)
    if plain is not None:
        return plain, False
    fits = [g for g in gpipes if not plan_memory_reasons(g, mem, recompute=True)]
    if not fits:
        return None, False

    def prior(g: Plan) -> float:
        f, b = plan_stage_times(model, cl, g, params=params)
        return pipeline_length(g, f, b, prior_transfers(model, cl, g), recompute=True)

    return min(fits, key=prior), True


def print_gpipe_memory(
    model: ModelSpec, cl: ClusterSpec, gpipes: list[Plan], curve: list[Plan], mem: MemoryModel, params: Any
) -> None:
    """GPipe at every b, without and with re-materialisation: fullest stage, prior; and stage by
    stage what plain GPipe holds beside the curve's largest stash and buffers on that stage."""
    gb = 1e9
    for g in gpipes:
        f, b = plan_stage_times(model, cl, g, params=params)
        cells = []
        for remat in (False, True):
            frac = max(v.memory.total / v.capacity for v in plan_memory(g, mem, remat))
            t = pipeline_length(g, f, b, prior_transfers(model, cl, g), recompute=remat)
            cells.append(
                f"{'re-materialised' if remat else 'plain'} {frac:.1%} of the limit, prior {1000 * t:.0f} ms"
            )
        print(f"  GPipe b={g.micro_batch_size} (n={BATCH // g.micro_batch_size}): " + "; ".join(cells))
    g = gpipes[-1]
    cv = [plan_memory(p, mem) for p in curve]
    for v in plan_memory(g, mem):
        st = max(c[v.stage].memory.activations for c in cv)
        bf = max(c[v.stage].memory.buffers for c in cv)
        print(f"  plain GPipe stage {v.stage}: {v.memory.total / gb:.3f} GB of {v.capacity / gb:.3f} usable "
              f"({v.memory.total - v.capacity:+.3g} B): stash {v.memory.activations / gb:.3f} GB (curve at most "
              f"{st / gb:.3f}), buffers {v.memory.buffers / gb:.3f} GB (curve at most {bf / gb:.3f})")  # fmt: skip


def interval_cell(xs: list[float]) -> str:
    lo, hi = median_ci95(xs)
    return f"{1000 * statistics.median(xs):.0f} [{1000 * lo:.0f}, {1000 * hi:.0f}]"


def run_one(name: str, net: str, a: argparse.Namespace) -> None:
    make, gbps = MODELS[name]
    model, cl = make(), cluster(gbps)
    mem = memory_model(model, cl, a.b1, a.activation_factor)
    curve = memory_curve(template(model), mem)
    plans = [c.plan for c in curve]
    control = with_kb(template(model), 1, 1)
    scale, d = dilated_scales(cl, None if a.dilation == "auto" else float(a.dilation))
    ex = ExecutorConfig(compute="replay", warmup=1, iterations=a.iterations, scale=scale, dilation=d,
                        efficiency=EFFICIENCY, timeout_s=900, startup_timeout_s=300)  # fmt: skip
    cfg = PipelineConfig(ex)
    params = cfg.cost_params(model.name)
    gpipes = [gpipe_plan(model, b) for b in range(BATCH, 0, -1) if BATCH % b == 0 and BATCH // b > 1]
    gpipe, remat = choose_gpipe(model, cl, gpipes, mem, params)
    runs = [*plans, *([gpipe] if gpipe else []), control]
    refs = {
        i: " (GPipe" + (", re-materialised" if remat else "") + ")" for i, p in enumerate(runs) if p is gpipe
    }
    refs[len(runs) - 1] = " (control)"
    recompute = {i for i, p in enumerate(runs) if p is gpipe and remat}
    over = [r for i, p in enumerate(runs) for r in plan_memory_reasons(p, mem, i in recompute)]
    assert not over, f"a plan to run exceeds its memory limit: {over}"
    first = next(i for i, p in enumerate(plans) if p.schedule == "1f1b")
    steady_steps = a.adaptive_steps or a.iterations + 1
    # Tuner steps: warm-up, the 1F1B steps up to the first evaluation, the switch step, then steady.
    tuner_steps = INTERVAL + 1 + steady_steps
    skip = INTERVAL + 1 - ex.warmup  # measured steps before the steady ones
    times: list[list[float]] = [[] for _ in runs]
    tuned_all: list[float] = []
    tuned: list[float] = []
    predicted_prof: list[list[float]] = [[] for _ in runs]
    predicted_rt: list[list[float]] = [[] for _ in runs]
    overhead: list[dict[str, float]] = []
    switches: list[str] = []
    evaluations: list[str] = []
    failures: list[str] = []
    dump: list[dict[str, Any]] = []  # --dump: every fixed phase's measured steps and event records
    t_start = time.monotonic()
    with Testbed(cl, scale=ex.link_scale) as tb:
        bg = Background(trace(), tb, time_scale=d) if net == "preempted" else None
        if bg:
            bg.__enter__()
        try:
            for rep in range(a.repeats):
                order = [runs[(i + rep) % len(runs)] for i in range(len(runs))]
                fixed = run_pipeline(model, cl, order, tb, cfg,
                                     recompute=[j for j, p in enumerate(order) if runs.index(p) in recompute])  # fmt: skip
                for j, (p, m) in enumerate(zip(order, fixed.measurements, strict=True)):
                    i = runs.index(p)
                    if m.failure:
                        failures.append(f"{label(p)}: {m.failure}")
                        continue
                    times[i].extend(m.iteration_times)
                    overhead.append(m.environment["per_call_overhead_s"])
                    recs = phase_records(fixed.records, j, ex.warmup)
                    prof = profile_records(recs)
                    if a.dump:
                        dump.append({"repeat": rep, "plan": label(p), "index": i, "dilation": d,
                                     "iteration_times": list(m.iteration_times),
                                     "environment": m.environment, "records": recs})  # fmt: skip
                    # every message of the phase; one its receiver did not wait for counts at the
                    # unloaded link's bytes / bandwidth (runtime.pipeline.profile: unwaited messages)
                    floor = {k: v * d for k, v in prior_transfers(model, cl, p).items()}
                    window = prof.feed(TransferWindow(window=10**6), floor)
                    transfers = {
                        **prior_transfers(model, cl, p),
                        **{k: v / d for k, v in window.means().items()},
                    }
                    fwd, bwd = [f / d for f in prof.fwd], [b / d for b in prof.bwd]
                    host = [h / d for h in prof.host]
                    predicted_prof[i].append(pipeline_length(p, fwd, bwd, transfers, host=host))
                    # the prior plus the runtime's measured per-action cost: compute as measured
                    # (the modelled compute + what the replay's action adds), host time, bytes/bandwidth
                    predicted_rt[i].append(
                        pipeline_length(p, fwd, bwd, prior_transfers(model, cl, p), host=host)
                    )
                tr = run_pipeline(model, cl, plans, tb, cfg,
                                  TunerRun(steps=tuner_steps, start=first,
                                           config=TunerConfig(interval=INTERVAL, margin=0.03)))  # fmt: skip
                tm = tr.measurements[0]
                if tm.failure:
                    failures.append(f"adaptive: {tm.failure}")
                    continue
                tuned_all.extend(tm.iteration_times)
                tuned.extend(tm.iteration_times[skip:])
                for e in tr.tuner_log:
                    if "switch_to" in e:
                        switches.append(
                            f"  repeat {rep} step {e['step']}: -> {label(plans[e['switch_to']])}: {e['reason']}"
                        )
                    if e.get("measured_s"):  # the tuner's view: measured steps vs predictions (undilated)
                        pred = ", ".join(
                            f"{label(plans[int(i)]).split(' ', 1)[1]} {1000 * t / d:.0f}"
                            for i, t in e["predicted_s"].items()
                        )
                        ran = " ".join(f"{1000 * t / d:.0f}" for t in e["measured_s"])
                        stale = ", ".join(
                            f"{label(plans[int(i)]).split(' ', 1)[1]} ({age} old)"
                            for i, age in e.get("rederived", {}).items()
                        )
                        evaluations.append(
                            f"  repeat {rep} step {e['step']}: ran {label(plans[e['current']])} "
                            f"[{ran}] ms; predicted {pred} ms"
                            + (f"; transfers re-derived from the latest samples for {stale}" if stale else "")
                        )
                steps_ms = " ".join(f"{1000 * t:.0f}" for t in tm.iteration_times)
                evaluations.append(f"  repeat {rep} adaptive steps after warm-up: [{steps_ms}] ms")
        finally:
            if bg:
                bg.__exit__(None, None, None)
    wall = time.monotonic() - t_start
    prior = []
    for i, p in enumerate(runs):
        f, b = plan_stage_times(model, cl, p, params=params)  # what the replay sleeps
        prior.append(pipeline_length(p, f, b, prior_transfers(model, cl, p), recompute=i in recompute))
    print(f"\n== {model.name} on the {net} network ({gbps:g} Gbit/s links; link scale {ex.link_scale:g}, "
          f"bytes scale {scale:g}, dilation {d:g}; {a.repeats} interleaved repeats x {a.iterations} "
          f"iterations, adaptive {steady_steps} steady steps; wall {wall:.0f} s) ==")  # fmt: skip
    if overhead:
        for kind in ("collective", "p2p_round"):
            vals = [o[kind] for o in overhead if kind in o]
            if vals:
                print(f"per-call overhead ({kind}, dilated): median {1000 * statistics.median(vals):.2f} ms")
    print(f"{'plan':<40} {'memory':>6} {'measured ms [95% CI]':>24} {'prior ms':>9} {'+runtime ms':>12} "
          f"{'profiled ms':>12}")  # fmt: skip
    med: list[float] = []
    ci: list[tuple[float, float]] = []
    for i, p in enumerate(runs):
        frac = max(v.memory.total / v.capacity for v in plan_memory(p, mem, i in recompute))
        tag = label(p) + refs.get(i, "")
        if times[i]:
            med.append(statistics.median(times[i]))
            ci.append(median_ci95(times[i]))
            cell = interval_cell(times[i])
        else:
            med.append(float("nan"))
            ci.append((float("nan"), float("nan")))
            cell = "failed"
        pcell = f"{1000 * statistics.median(predicted_prof[i]):.0f}" if predicted_prof[i] else "-"
        rcell = f"{1000 * statistics.median(predicted_rt[i]):.0f}" if predicted_rt[i] else "-"
        print(f"{tag:<40} {frac:>6.0%} {cell:>24} {1000 * prior[i]:>9.0f} {rcell:>12} {pcell:>12}")
    print_gpipe_memory(model, cl, gpipes, plans, mem, params)
    if tuned:
        print(f"{'adaptive steady (tuner, from 1F1B)':<40} {'':>6} {interval_cell(tuned):>24}")
        print(f"{'adaptive from start (incl. 1F1B step)':<40} {'':>6} {interval_cell(tuned_all):>24}")
    print("\n".join(switches) if switches else "  (the tuner made no switch)")
    print(
        "tuner evaluations (the interval's measured steps of the plan that ran; each candidate's estimate):"
    )
    print("\n".join(evaluations))
    for line in failures:
        print("  FAILED", line)
    n_curve = len(plans)
    if tuned and times[first]:
        best = min((i for i in range(n_curve) if times[i]), key=lambda i: med[i])
        for what, xs in (("steady", tuned), ("from start", tuned_all)):
            r, lo, hi = ratio_ci(times[first], xs)
            print(
                f"adaptive {what} vs 1F1B (k=1, b={plans[first].micro_batch_size}): {r:.2f}x [{lo:.2f}, {hi:.2f}]"
            )
            r, lo, hi = ratio_ci(times[best], xs)
            print(
                f"adaptive {what} vs best fixed curve plan ({label(plans[best])}): {r:.2f}x [{lo:.2f}, {hi:.2f}]"
            )
    for i in refs:
        if times[first] and times[i]:
            r, lo, hi = ratio_ci(times[first], times[i])
            print(
                f"{label(runs[i])} vs 1F1B b={plans[first].micro_batch_size}: {r:.2f}x [{lo:.2f}, {hi:.2f}]"
            )
    for what, idx in (("curve plans", range(n_curve)), ("all fixed plans", range(len(runs)))):
        ok = [i for i in idx if times[i]]
        m_ok, c_ok = [med[i] for i in ok], [ci[i] for i in ok]
        cells = []
        preds = {"prior": [prior[i] for i in ok]}
        if all(predicted_rt[i] for i in ok):
            preds["+runtime"] = [statistics.median(predicted_rt[i]) for i in ok]
        if all(predicted_prof[i] for i in ok):
            preds["profiled"] = [statistics.median(predicted_prof[i]) for i in ok]
        for src, vals in preds.items():
            strict, n = pairwise(m_ok, vals)
            sep, n_sep = pairwise(m_ok, vals, c_ok)
            cells.append(f"{src} {strict:.2f} of {n} pairs, {sep:.2f} of the {n_sep} separated")
        print(f"cost model pairwise ranking, {what}: " + "; ".join(cells))
    if a.dump:
        with open(a.dump, "w") as fh:
            json.dump({"model": name, "network": net, "prior_s": dict(zip(map(label, runs), prior, strict=True)),
                       "recompute": [label(runs[i]) for i in sorted(recompute)],
                       "phases": dump}, fh)  # fmt: skip
    print(f"every plan run within its memory limit (search.pipeline.plan_memory_reasons): yes, largest "
          f"{max(max(v.memory.total / v.capacity for v in plan_memory(p, mem, i in recompute)) for i, p in enumerate(runs)):.1%}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["gpt", "unet", "both"], default="both")
    ap.add_argument("--network", choices=["steady", "preempted", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument(
        "--dilation", default="auto", help="time dilation D, or 'auto' (runtime.testbed.suggest_dilation)"
    )
    ap.add_argument("--b1", type=int, default=8, help="1F1B's largest micro-batch under the memory limit")
    ap.add_argument(
        "--adaptive-steps", type=int, default=0, help="adaptive steady steps per repeat (0: iterations + 1)"
    )
    ap.add_argument("--activation-factor", type=float, default=16.0, help="stored activations / layer output")
    ap.add_argument(
        "--dump", default="", help="write every fixed phase's steps and event records to this JSON file"
    )
    a = ap.parse_args()
    for name in ["gpt", "unet"] if a.model == "both" else [a.model]:
        for net in ["steady", "preempted"] if a.network == "both" else [a.network]:
            run_one(name, net, a)


if __name__ == "__main__":
    main()
