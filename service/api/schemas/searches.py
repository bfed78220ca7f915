"""Schemas of searches, their status and their rounds."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.api.schemas.common import Public, SpecRef
from simulator.spec.limits import LIMITS, Label

#: ``module.path:function`` (dotted Python identifiers on both sides), as ``import-model`` takes it.
FACTORY_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


class SearchCreate(BaseModel):
    """Start a strategy search of a model on a cluster."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": "ResNet50",
                    "cluster": "B1",
                    "objective": "time",
                    "trial_budget": 8,
                    "candidates_per_round": 4,
                    "samples_per_round": 200,
                    "approval_required": False,
                    "seed": 0,
                    "name": "ResNet50 on B1",
                }
            ]
        },
    )

    model: SpecRef = Field(description="Name of your uploaded model (else the zoo's, any case), or its id.")
    cluster: SpecRef = Field(
        description="Name of your uploaded cluster (else the zoo's, any case), or its id."
    )
    objective: Literal["time", "cost"] = Field("time", description="Minimise iteration time or cost.")
    trial_budget: int = Field(
        8, ge=1, le=LIMITS.trial_budget, description="Candidate trials in total (baselines extra)."
    )
    candidates_per_round: int = Field(
        4, ge=1, le=LIMITS.candidates_per_round, description="K: trials per round."
    )
    samples_per_round: int = Field(
        200, ge=1, le=LIMITS.samples_per_round, description="M: strategies sampled and scored."
    )
    approval_required: bool = Field(False, description="Wait for approval before a round's trials run.")
    compression: Literal["none", "fp16", "powersgd", "all"] = Field(
        "none",
        description="Lossy gradient compression the search may use: none (lossless, the default), fp16, "
        "powersgd or all. Lossy strategies are compared only with lossy baselines.",
    )
    seed: int = Field(0, ge=0, le=LIMITS.seed, description="Seed of the sampler.")
    name: Label = Field("", description="A label for people.")
    plan_kind: Literal["sync", "pipeline", "hybrid", "heterogeneous"] = Field(
        "sync",
        description="What to plan: 'sync' (AutoSync synchronization strategies, the default), 'pipeline', "
        "'hybrid' or 'heterogeneous' (HeterPS layer-to-resource-type schedules with provisioning; "
        "objective 'cost').",
    )
    plan_options: dict[str, Any] | None = Field(
        None,
        description="The plan kind's options, validated by that kind (service.plans); e.g. for "
        '\'heterogeneous\': {"throughput_limit": 100000, "scheduler": "exact"}; for \'pipeline\': '
        '{"stages": 4 or "choose", "memory_per_device_gb": 16, "global_batch": 64, "adaptive": true}; for '
        '\'hybrid\': {"annotations": {"classifier": {"primitive": "split", "degree": 4}}, "global_batch": 256} '
        "(no annotations: automatic partition). Null for 'sync'.",
        examples=[{"throughput_limit": 100000, "scheduler": "exact"}],
    )
    model_factory: str | None = Field(
        None,
        max_length=300,
        pattern=FACTORY_PATTERN,
        description="Your own model: 'module:function' returning (nn.Module, batch factory), importable "
        "on the agents. Trials on an agent pool then run real forward and backward of that module "
        "with the plan applied (docs/clusters.md). `model` stays the ModelSpec extracted from it "
        "(`strategist import-model module:function -o spec.json`, then upload); the API only checks "
        "the form (it never imports your code), each agent checks that it imports and matches the "
        "spec, else the trial fails naming why. Sync searches only.",
        examples=["mypkg.models:make_model"],
    )

    @model_validator(mode="after")
    def _sizes(self) -> Self:
        if self.candidates_per_round > self.samples_per_round:
            raise ValueError("candidates_per_round cannot exceed samples_per_round")
        if self.model_factory is not None and self.plan_kind != "sync":
            raise ValueError("model_factory: only a 'sync' search runs the user's own model")
        return self


class SearchPublic(Public):
    id: int
    name: str
    owner_id: int
    model_spec_id: int
    cluster_spec_id: int
    model_name: str
    cluster_name: str
    objective: Literal["time", "cost"]
    trial_budget: int
    candidates_per_round: int
    samples_per_round: int
    approval_required: bool
    seed: int
    compression: Literal["none", "fp16", "powersgd", "all"]
    space: Literal["lossless", "lossy"] = Field(description="'lossy' if the search may compress gradients.")
    plan_kind: Literal["sync", "pipeline", "hybrid", "heterogeneous"] = "sync"
    plan_options: dict[str, Any] | None = Field(
        None, description="The kind's options as stored (defaults filled)."
    )
    model_factory: str | None = Field(None, description="The user's own model ('module:function'), if named.")
    state: Literal["pending", "running", "awaiting_approval", "completed", "cancelled", "failed"]
    current_round: int = Field(description="Index of the newest round (0 before round 1).")
    failure_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class SearchesPublic(Public):
    data: list[SearchPublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class MeasuredPublic(Public):
    label: str = Field(
        examples=["trial:12", "horovod@16MiB"],
        description="A candidate trial ('trial:<id>') or a baseline member.",
    )
    space: Literal["lossless", "lossy"]
    median: float = Field(description="Median iteration time, s.")


class FamilyPublic(Public):
    """A baseline family: every member measured; tuned = the fastest, never slower than untuned."""

    family: str = Field(examples=["horovod", "ps", "horovod-fp16", "ddp-powersgd"])
    lossy: bool
    tuned: MeasuredPublic | None
    untuned: MeasuredPublic | None
    measured: int = Field(description="Members measured so far.")
    members: list[str]


class RatioPublic(Public):
    family: str
    baseline: str = Field(description="The family's tuned member.")
    ratio: float = Field(description="Baseline median / winner median (> 1: the winner is faster).")
    low: float = Field(description="95 % bootstrap interval of the ratio, low end.")
    high: float


class SpaceReportPublic(Public):
    """The best candidate of one space against that space's tuned baselines only."""

    space: Literal["lossless", "lossy"]
    winner: MeasuredPublic | None
    ratios: list[RatioPublic]
    accuracy: str = Field(
        description="'lossless', or for a lossy winner its time-to-accuracy verdict "
        "('lossy, accuracy not verified' until one is measured)."
    )


class BaselinePublic(Public):
    name: str = Field(examples=["horovod"])
    trial_id: int
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    median_time: float | None = Field(description="Measured median iteration time, s.")


class ResultPickPublic(Public):
    """One measured plan of a result: a candidate trial or a baseline."""

    trial_id: int
    label: str = Field(examples=["trial:12", "1f1b", "horovod@16MiB"])
    description: str = Field(description="What the plan does, in one line.")
    value: float = Field(description="Median iteration time, s (metric 'time'), or money (metric 'money').")


class PlanResultPublic(Public):
    """The answer of a search, one shape for every plan kind (``service.plans.results``)."""

    plan_kind: Literal["sync", "pipeline", "hybrid", "heterogeneous"]
    metric: Literal["time", "money"] = Field(description="What best and baseline compare.")
    best: ResultPickPublic | None = Field(description="The kind's best measured candidate.")
    baseline: ResultPickPublic | None = Field(
        description="The strongest measured baseline it is compared with."
    )
    ratio: float | None = Field(description="baseline / best (> 1: the search's plan is better).")
    slower: bool = Field(
        description="True when the best does not beat its baseline (ratio < 1): keep the baseline."
    )
    recommended: ResultPickPublic | None = Field(
        description="The simplest candidate within the measurement noise of the best (see rule)."
    )
    recommended_reason: str
    verdict: str = Field(examples=["2.11x speed-up vs 1f1b (310.0 ms -> 146.9 ms)"])
    rule: str = Field(description="How the recommended plan is chosen.")


class SearchStatusPublic(Public):
    """A search and its progress: trials, the best measured candidate, speed-up per baseline."""

    search: SearchPublic
    trials_by_state: dict[str, int] = Field(examples=[{"queued": 1, "running": 1, "succeeded": 4}])
    candidate_trials_done: int = Field(description="Finished candidate trials (of trial_budget).")
    best_trial_id: int | None
    best_candidate_id: int | None
    best_time: float | None = Field(description="Best measured median iteration time so far, s.")
    baselines: list[BaselinePublic]
    families: list[FamilyPublic] = Field(default_factory=list)
    reports: list[SpaceReportPublic] = Field(
        default_factory=list, description="Per space: its best candidate vs its tuned baselines."
    )
    speedups: dict[str, float] = Field(
        description="Baseline family → its tuned median / the best same-space candidate's median "
        "(> 1: faster than the baseline).",
        examples=[{"horovod": 1.42, "ps": 2.1}],
    )
    state_detail: str | None = Field(
        None,
        description="Why trials are not moving, when no live worker can run them (null otherwise).",
        examples=["3 trial(s) queued on cluster B9 for 75 s with no live worker for it (...)"],
    )
    result: PlanResultPublic | None = Field(
        None, description="Best, baseline, ratio and recommendation, the same shape for every plan kind."
    )


class RoundPublic(Public):
    id: int
    search_id: int
    index: int
    state: Literal["proposed", "awaiting_approval", "running", "completed", "cancelled"]
    simulator_version_id: int | None
    simulator_kind: str = Field(examples=["analytical"])
    samples: int
    created_at: datetime
    finished_at: datetime | None


class RoundsPublic(Public):
    data: list[RoundPublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )
