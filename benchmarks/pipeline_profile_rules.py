"""Transfer-sample rules compared on one testbed run (issue 17, why the tuner left kFkB).

``python benchmarks/pipeline_profile_rules.py [--model unet|gpt] [--network preempted|steady]
[--dilation 8]`` (root: network namespaces). Runs the memory curve's 1F1B (k=1, b=4) and its
largest-k plan (k=4, b=1) as fixed phases (1 warm-up + 2 measured steps each), then the online
tuner from 1F1B for 7 steps (an evaluation every 2), on the models, links and preemption trace of
``benchmarks/pipeline_schedules.py``. For each fixed plan it prints the measured steps and the
cost model fed with that plan's own profile under the two sampling rules of
``runtime.pipeline.profile``: ``wait`` (the runtime's receive wait blocked) and ``gap`` (the
compute started > 1 ms after the stage's previous action: the rule until 2026-11-25), the samples
per link (count, median, max, undilated ms), and per stage the gaps before computes and the waits;
then the tuner's evaluations.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_schedules as bm

from runtime.executor.config import ExecutorConfig
from runtime.pipeline import PipelineConfig, TunerConfig, TunerRun, run_pipeline
from runtime.pipeline.preempt import Background
from runtime.pipeline.profile import profile_records
from runtime.testbed import Testbed, dilated_scales
from search.pipeline import memory_curve
from simulator.pipeline.cost import TransferWindow, pipeline_length, prior_transfers


def _med(x: list[float]) -> float:
    return statistics.median(x) if x else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["gpt", "unet"], default="unet")
    ap.add_argument("--network", choices=["steady", "preempted"], default="preempted")
    ap.add_argument("--dilation", type=float, default=8.0)
    a = ap.parse_args()
    make, gbps = bm.MODELS[a.model]
    model, cl = make(), bm.cluster(gbps)
    plans = [c.plan for c in memory_curve(bm.template(model), bm.memory_model(model, cl, 4, 16.0))]
    scale, d = dilated_scales(cl, a.dilation)
    ex = ExecutorConfig(compute="replay", warmup=1, iterations=2, scale=scale, dilation=d,
                        efficiency=bm.EFFICIENCY, timeout_s=900, startup_timeout_s=300)  # fmt: skip
    cfg = PipelineConfig(ex)
    fixed_plans = [plans[0], plans[-1]]
    with Testbed(cl, scale=ex.link_scale) as tb:
        bg = Background(bm.trace(), tb, time_scale=d) if a.network == "preempted" else None
        if bg:
            bg.__enter__()
        try:
            fixed = run_pipeline(model, cl, fixed_plans, tb, cfg)
            tuned = run_pipeline(model, cl, plans, tb, cfg,
                                 TunerRun(steps=7, start=0, config=TunerConfig(interval=2, margin=0.03)))  # fmt: skip
        finally:
            if bg:
                bg.__exit__(None, None, None)
    for j, p in enumerate(fixed_plans):
        measured = " ".join(f"{1000 * t:.0f}" for t in fixed.measurements[j].iteration_times)
        print(f"{bm.label(p)}: measured [{measured}] ms")
        phase = bm.phase_records(fixed.records, j, ex.warmup)
        no_wait = {
            r: {**rec, "events": [e for e in rec["events"] if not str(e[0]).startswith("WAIT")]}
            for r, rec in phase.items()
        }
        for rule, recs in (("wait", phase), ("gap", no_wait)):
            prof = profile_records(recs)
            window = prof.feed(TransferWindow(window=64))
            transfers = {**prior_transfers(model, cl, p), **{k: v / d for k, v in window.means().items()}}
            length = pipeline_length(p, [f / d for f in prof.fwd], [b / d for b in prof.bwd], transfers)
            samples = ", ".join(
                f"{s}->{t}: {len(v)} x {1000 * _med(v) / d:.1f} (max {1000 * max(v) / d:.1f})"
                for (s, t), v in sorted(prof.transfers.items())
            )
            print(f"  rule {rule}: profiled {1000 * length:.0f} ms; samples (n x median ms) {samples}")
        for _, rec in sorted(phase.items()):
            gaps, waits, prev = [], [], None
            for kind, _, t0, t1 in rec["events"]:
                if str(kind).startswith("WAIT"):
                    waits.append(t1 - t0)
                    continue
                if kind in ("F", "B") and prev is not None:
                    gaps.append(t0 - prev)
                prev = t1
            print(f"  stage {rec['stage']}: gap before a compute median {1000 * _med(gaps) / d:.2f} ms, "
                  f"> 1 ms wall {sum(g > 1e-3 for g in gaps)}/{len(gaps)}; receive waits > 1 ms wall "
                  f"{sum(w > 1e-3 for w in waits)}/{len(waits)}")  # fmt: skip
    steps = " ".join(f"{1000 * t:.0f}" for t in tuned.measurements[0].iteration_times)
    print(f"adaptive (tuner from 1F1B): measured [{steps}] ms")
    for e in tuned.tuner_log:
        entry: dict[str, Any] = {k: e[k] for k in ("step", "current", "reason") if k in e}
        pred = {bm.label(plans[int(i)]): round(1000 * t / d) for i, t in e.get("predicted_s", {}).items()}
        ran = [round(1000 * t / d) for t in e.get("measured_s", [])]
        print(f"  {entry} measured {ran} predicted {pred}")


if __name__ == "__main__":
    main()
