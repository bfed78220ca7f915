"""Schema of a search's trial export (``service.plans.trial_export``): the same columns for every kind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from service.api.schemas.common import Public


class TrialRowPublic(Public):
    """One trial as a spreadsheet row (``service.plans.trial_export.COLUMNS``)."""

    trial_id: int
    round: int | None = Field(description="Null for a baseline.")
    kind: Literal["baseline", "candidate"]
    baseline: str = Field(description="The baseline's name; empty for a candidate.")
    plan_kind: Literal["sync", "pipeline", "hybrid", "heterogeneous"]
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    plan: str = Field(description="What the plan does, in one line.")
    predicted_s: float | None = Field(description="Predicted iteration time, s.")
    measured_median_s: float | None = Field(description="Median measured iteration time, s.")
    iterations: int = Field(description="Iterations measured.")
    speedup: float | None = Field(
        description="Median time of the result's baseline (speedup_vs) / this trial's (> 1: faster)."
    )
    speedup_low: float | None = Field(description="95 % bootstrap interval of speedup, low end.")
    speedup_high: float | None = Field(description="95 % bootstrap interval of speedup, high end.")
    speedup_vs: str | None = Field(description="The result baseline the speed-up is against.")


class TrialsExportPublic(Public):
    """Every trial of a search, oldest first; speed-ups against the search's result baseline."""

    search_id: int
    plan_kind: Literal["sync", "pipeline", "hybrid", "heterogeneous"]
    speedup_vs: str | None = Field(
        description="The result baseline every row's speed-up is against (null before one is measured)."
    )
    columns: list[str] = Field(description="The CSV header, in order.")
    rows: list[TrialRowPublic]
