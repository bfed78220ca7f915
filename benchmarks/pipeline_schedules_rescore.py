"""Re-score the cost model on a measured ``pipeline_schedules.py --dump`` file (issue 17).

``python benchmarks/pipeline_schedules_rescore.py DUMP.json[.gz]`` prints, for every fixed plan of
the run, the measured median and the predictions the benchmark prints (``prior``, ``+runtime``,
``profiled``; see ``pipeline_schedules``'s docstring) computed by *this* checkout's code from the
run's event records, and the pairwise ranking over the curve plans and over all fixed plans, as the
benchmark computes them. Use it to score a cost-model change on a run measured before the change
(say so when quoting the figures: the measurement is the run's, the predictions this code's).
It also prints the per-action runtime cost the ``+runtime`` column adds (median over the phases):
each stage's forward / backward beyond the modelled compute and its host time per action.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_schedules as ps

from runtime.executor.config import ExecutorConfig
from runtime.pipeline import PipelineConfig
from runtime.pipeline.profile import profile_records
from search.pipeline.candidates import with_kb
from simulator.metrics import median_ci95
from simulator.pipeline.cost import TransferWindow, pipeline_length, plan_stage_times, prior_transfers


def load(path: str) -> dict[str, Any]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def main() -> None:
    d = load(sys.argv[1])
    make, gbps = ps.MODELS[d["model"]]
    model, cl = make(), ps.cluster(gbps)
    cfg = PipelineConfig(ExecutorConfig(compute="replay", efficiency=ps.EFFICIENCY))
    order: list[str] = []
    rows: dict[str, dict[str, list[Any]]] = {}
    for ph in d["phases"]:
        lab, D = ph["plan"], ph["dilation"]
        _, k, b = lab.split()
        p = with_kb(ps.template(model), int(k[2:]), int(b[2:]))
        prof = profile_records({int(r): v for r, v in ph["records"].items()})
        fm, bm = plan_stage_times(model, cl, p, params=cfg.cost_params(model.name))
        pt = prior_transfers(model, cl, p)
        # every message of the phase; one not waited for at the unloaded link's bytes / bandwidth
        window = prof.feed(TransferWindow(window=10**6), {key: v * D for key, v in pt.items()})
        measured = {**pt, **{key: v / D for key, v in window.means().items()}}
        fw, bw, host = ([x / D for x in xs] for xs in (prof.fwd, prof.bwd, prof.host))
        if lab not in rows:
            order.append(lab)
        r = rows.setdefault(lab, {"t": [], "prior": [], "+runtime": [], "profiled": [], "extra": []})
        r["t"] += ph["iteration_times"]
        r["prior"].append(pipeline_length(p, fm, bm, pt))
        r["+runtime"].append(pipeline_length(p, fw, bw, pt, host=host))
        r["profiled"].append(pipeline_length(p, fw, bw, measured, host=host))
        r["extra"].append(
            [f - m for f, m in zip(fw, fm, strict=True)] + [b - m for b, m in zip(bw, bm, strict=True)] + host
        )
    print(f"{d['model']} on the {d['network']} network: {sys.argv[1]}")
    print(f"{'plan':<16} {'measured ms':>12} {'prior':>7} {'+runtime':>9} {'profiled':>9}   runtime per action ms "
          f"(F beyond model x P, B beyond model x P, host x P)")  # fmt: skip
    for lab in order:
        r = rows[lab]
        extra = [statistics.median(c) for c in zip(*r["extra"], strict=True)]
        cells = " ".join(f"{1000 * statistics.median(r[k]):>{w}.0f}" for k, w in (("prior", 7), ("+runtime", 9),
                                                                                 ("profiled", 9)))  # fmt: skip
        print(f"{lab:<16} {1000 * statistics.median(r['t']):>12.0f} {cells}   "
              + " ".join(f"{1000 * x:.2f}" for x in extra))  # fmt: skip
    fixed = order
    curve = [lab for lab in order if lab != "1f1b k=1 b=1" and not lab.startswith("gpipe")]
    for what, labs in (("curve plans", curve), ("all fixed plans", fixed)):
        meas = [statistics.median(rows[lab]["t"]) for lab in labs]
        ci = [median_ci95(rows[lab]["t"]) for lab in labs]
        cells = []
        for src in ("prior", "+runtime", "profiled"):
            vals = [statistics.median(rows[lab][src]) for lab in labs]
            strict, n = ps.pairwise(meas, vals)
            sep, n_sep = ps.pairwise(meas, vals, ci)
            cells.append(f"{src} {strict:.2f} of {n} pairs, {sep:.2f} of the {n_sep} separated")
        print(f"cost model pairwise ranking, {what}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
