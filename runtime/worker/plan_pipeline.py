"""A pipeline search's trial (issue 17): its plan document, and the runner that measures it on the testbed.

The document (a candidate's ``strategy`` JSON with ``"kind": "pipeline"``) holds the (k, b)
candidates of one stage partition on the memory-limit curve (``search.pipeline.memory_curve``)
and the one to start on. ``adaptive``: the run is the online auto-tuner over those candidates
(``runtime.pipeline.run_pipeline`` with ``TunerRun``), which may switch (k, b) at a step boundary
without restarting the processes; otherwise the start plan runs fixed (the 1F1B baseline).

The runner returns the run's Measurement (iteration times in the real cluster's seconds, the
executor's protocol: scale, dilation, probe) with ``details``:

- ``chosen``: (schedule, k, b, candidate index) of the plan running at the end of the run, and
  ``start`` the same for the plan it started on;
- ``switches``: every switch the tuner made (step, from, to, reason) and ``evaluations`` (how many
  times it re-evaluated);
- ``steps``: per step, the candidate that ran it and its seconds;
- ``gantt``: the measured schedule of the last step, one row per compute action from the
  executor's timestamps: [replica, stage, 'F'|'B', micro-batch, start s, end s] from the step's
  start (dilation divided out), and ``stages`` / ``replicas``.

This module imports only the spec at load time, so the service can build documents with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec import Plan
from simulator.spec.limits import LIMITS
from simulator.spec.measurement import Measurement
from simulator.spec.profile import Profile

if TYPE_CHECKING:
    from runtime.worker.plans import TrialContext


class PipelineTrial(BaseModel):
    """The plan document of a pipeline trial (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["pipeline"] = "pipeline"
    candidates: tuple[Plan, ...] = Field(
        min_length=1, max_length=64, description="(k, b) plans of one stage partition (memory curve)."
    )
    start: int = Field(0, ge=0, lt=64, description="Index of the candidate the run starts on.")
    adaptive: bool = Field(True, description="Run the online tuner over the candidates; False: start fixed.")
    tuner_interval: int = Field(2, ge=1, le=LIMITS.iterations, description="Steps between re-evaluations.")
    profiles: tuple[Profile, ...] | None = Field(
        None,
        max_length=256,
        description="Measured profiles the search ranked the plan with; the replay computes with "
        "them (None: the executor session's, the profile store's).",
    )

    @model_validator(mode="after")
    def _check(self) -> PipelineTrial:
        if self.start >= len(self.candidates):
            raise ValueError(f"start: {self.start} is not an index of candidates ({len(self.candidates)})")
        first = self.candidates[0]
        for i, p in enumerate(self.candidates):
            if p.stages != first.stages or p.global_batch != first.global_batch:
                raise ValueError(
                    f"candidates.{i}: every candidate keeps the stages and global batch of candidates.0"
                )
        return self

    @property
    def plan(self) -> Plan:
        """The plan the run starts on."""
        return self.candidates[self.start]


def kb(plan: Plan) -> dict[str, Any]:
    """A plan's schedule, group size k and micro-batch size b (per pipeline replica 0)."""
    return {
        "schedule": plan.schedule,
        "k": plan.group_size(plan.replica_micro_batches(0)),
        "b": plan.micro_batch_size,
    }


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Measure a pipeline trial on the context's launcher; failures are Measurements."""
    from runtime.pipeline import PipelineConfig, TunerConfig, TunerRun, run_pipeline

    trial = PipelineTrial.model_validate(document)
    session = context.session()
    cfg = PipelineConfig(executor=session.config, profiles=replay_profiles(trial, session.profiles))
    tuner = None
    if trial.adaptive and len(trial.candidates) > 1:
        steps = cfg.executor.warmup + cfg.executor.iterations
        tuner = TunerRun(steps=steps, start=trial.start, config=TunerConfig(interval=trial.tuner_interval))
        plans: Any = list(trial.candidates)
    else:
        plans = trial.plan
    try:
        result = run_pipeline(context.model, context.cluster, plans, session.launcher, cfg, tuner)
    except ValueError as e:
        return Measurement(failure=str(e), scale=cfg.scale, compute_mode=cfg.compute)
    m = result.measurements[0]
    if m.failure is not None:
        return m
    indices = list(range(len(trial.candidates))) if tuner is not None else [trial.start]
    return m.model_copy(
        update={"details": pipeline_details(trial, indices, result.records, result.tuner_log, cfg.dilation)}
    )


def replay_profiles(trial: PipelineTrial, session_profiles: tuple[Profile, ...]) -> tuple[Profile, ...]:
    """The measured profiles the replay computes with: the ones the search ranked the plan with
    (the document's, e.g. uploaded through the API), else the session's (the profile store's of
    the model), so the replay and the ranking agree on compute (issue 15)."""
    return trial.profiles if trial.profiles is not None else session_profiles


def pipeline_details(
    trial: PipelineTrial,
    indices: list[int],
    records: dict[int, dict[str, Any]],
    tuner_log: tuple[dict[str, Any], ...],
    dilation: float,
) -> dict[str, Any]:
    """The measured extras of a run (see the module docstring); ``indices`` maps a run's phase /
    tuner candidate number to the document's candidate index."""
    cands = trial.candidates
    switches = []
    for entry in tuner_log:
        if "switch_to" in entry:
            a, b = indices[int(entry["current"])], indices[int(entry["switch_to"])]
            switches.append(
                {
                    "step": int(entry["step"]),
                    "from": kb(cands[a]),
                    "to": kb(cands[b]),
                    "reason": entry["reason"],
                }
            )
    steps0 = records[0]["steps"]
    ends = [max(rec["steps"][i][2] for rec in records.values()) for i in range(len(steps0))]
    starts = [min(rec["steps"][i][1] for rec in records.values()) for i in range(len(steps0))]
    steps = [[indices[int(st[0])], (e - s) / dilation] for st, s, e in zip(steps0, starts, ends, strict=True)]
    last = indices[int(steps0[-1][0])]
    t0, t1 = starts[-1], ends[-1]
    # each process's own actions of its last step (a stage may still run the previous step's
    # backward after another stage began the last one)
    rows = sorted(
        [
            int(rec["replica"]),
            int(rec["stage"]),
            str(kind),
            int(mb),
            round((s - t0) / dilation, 6),
            round((e - t0) / dilation, 6),
        ]
        for rec in records.values()
        for kind, mb, s, e in rec["events"]
        if kind in ("F", "B") and rec["steps"][-1][1] <= s < rec["steps"][-1][2]
    )
    plan = cands[0]
    return {
        "plan_kind": "pipeline",
        "adaptive": len(indices) > 1,
        "start": {**kb(cands[trial.start]), "candidate": trial.start},
        "chosen": {**kb(cands[last]), "candidate": last},
        "switches": switches,
        "evaluations": len(tuner_log),
        "steps": steps,
        "gantt": {
            "step": len(steps0) - 1,
            "stages": len(plan.stages),
            "replicas": plan.stages[0].replicate,
            "seconds": round((t1 - t0) / dilation, 6),
            "rows": rows,
        },
    }
