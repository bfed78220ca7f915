"""The tuner's first decision replayed offline on a ``pipeline_schedules.py --dump`` (issue 17).

``python benchmarks/pipeline_tuner_first_choice.py DUMP.json[.gz] ...``

For every repeat of the dump, the first measured step of the fixed 1F1B phase (the curve's first
plan) is what the online tuner sees at its first evaluation (one 1F1B step after the warm-up):
its event records become a ``Profile`` (``runtime.pipeline.profile.profile_records``), fed to an
``AutoTuner`` of this checkout over the curve plans with the unloaded-link floors the benchmark's
tuner gets, with that step's time. Printed: each candidate's estimate (undilated ms), the
candidate it would choose, and each plan's measured median in the dump. A replay of the decision
from the fixed phases' records, not a run of the tuner: the tuner's own first 1F1B step is another
step of the same trace.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_schedules import MODELS, cluster, label, memory_model, template

from runtime.pipeline.profile import profile_records
from runtime.pipeline.tuner import AutoTuner, TunerConfig
from search.pipeline import memory_curve
from simulator.pipeline.cost import prior_transfers


def first_step(records: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Every rank's events of the first step that its (phase-filtered) events fall in."""
    out = {}
    for r, rec in records.items():
        st = next(s for s in rec["steps"] if any(s[1] <= e[2] < s[2] for e in rec["events"]))
        out[r] = {**rec, "events": [e for e in rec["events"] if st[1] <= e[2] < st[2]]}
    return out


def replay(path: str, b1: int = 8, activation_factor: float = 16.0) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        dump = json.load(fh)
    make, gbps = MODELS[dump["model"]]
    model, cl = make(), cluster(gbps)
    plans = [c.plan for c in memory_curve(template(model), memory_model(model, cl, b1, activation_factor))]
    labels = [label(p) for p in plans]
    measured = {
        lab: statistics.median(t for ph in dump["phases"] if ph["plan"] == lab for t in ph["iteration_times"])
        for lab in labels
    }
    cells = ", ".join(f"{lab.split(' ', 1)[1]} {1000 * t:.0f}" for lab, t in measured.items())
    print(f"{path}: {dump['model']} {dump['network']}; measured (fixed plans) {cells} ms")
    for ph in dump["phases"]:
        if ph["plan"] != labels[0]:
            continue
        d = ph["dilation"]
        floors = {
            p.micro_batch_size: {k: v * d for k, v in prior_transfers(model, cl, p).items()} for p in plans
        }
        tuner = AutoTuner(list(plans), 0, TunerConfig(interval=2, margin=0.03), floors=floors)
        records = {int(k): v for k, v in ph["records"].items()}
        tuner.observe(profile_records(first_step(records)), [ph["iteration_times"][0] * d])
        est = {i: tuner.estimate(i) for i in range(len(plans))}
        known = {i: t for i, t in est.items() if t is not None}
        choice = tuner.decide(0)
        pred = ", ".join(f"{labels[i].split(' ', 1)[1]} {1000 * t / d:.0f}" for i, t in known.items())
        print(
            f"  repeat {ph['repeat']}: 1F1B step {1000 * ph['iteration_times'][0]:.0f} ms; "
            f"estimates {pred} ms; choice {labels[choice]}"
        )


if __name__ == "__main__":
    for p in sys.argv[1:]:
        replay(p)
