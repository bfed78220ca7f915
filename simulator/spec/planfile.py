"""The plan file: a searched plan, the model and cluster it was searched for, and where it came from.

``strategist export`` writes it, ``runtime.apply.load_plan`` reads it and ``apply_plan`` applies it
to the user's ``nn.Module``. ``plan`` is the kind's own document exactly as the API serialises it
(``sync``: a ``Strategy``; ``pipeline`` / ``hybrid`` / ``heterogeneous``: the plan documents the
trial workers receive). ``variables`` is the model's fingerprint (every variable's name and
shape, forward order), so a plan for another model is refused by name before anything runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec.cluster import ClusterSpec
from simulator.spec.model import ModelSpec
from simulator.spec.strategy import Strategy

FORMAT: Literal[1] = 1
PlanKind = Literal["sync", "pipeline", "hybrid", "heterogeneous"]


class PlanVariable(BaseModel):
    """One variable of the model the plan is for (the fingerprint's unit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    shape: tuple[int, ...]


class Provenance(BaseModel):
    """Where the plan came from (all optional: a hand-written plan has none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    search_id: int | None = None
    trial_id: int | None = None
    iteration_time_s: float | None = Field(None, description="Measured seconds per iteration, if any.")
    source: str = Field("", description="Free text, e.g. the API URL or the search that produced it.")


class PlanFile(BaseModel):
    """A plan ready to be applied to a user's model (``format`` is the file's version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = FORMAT
    kind: PlanKind
    plan: dict[str, Any] = Field(description="The kind's own document (sync: a Strategy).")
    model: str = Field(description="Name of the model the plan was searched for.")
    variables: tuple[PlanVariable, ...] = Field(min_length=1)
    fingerprint: str = Field("", description="sha256 of the variables (filled in when empty).")
    world_size: int = Field(ge=1, description="Number of training processes (one per GPU).")
    model_spec: ModelSpec
    cluster: ClusterSpec
    provenance: Provenance = Provenance()

    @model_validator(mode="after")
    def _check(self) -> PlanFile:
        want = variables_fingerprint(self.variables)
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", want)
        elif self.fingerprint != want:
            raise ValueError(f"fingerprint: {self.fingerprint} does not match the variables ({want})")
        spec_vars = tuple(PlanVariable(name=v.name, shape=v.shape) for v in self.model_spec.variables)
        if spec_vars != self.variables:
            raise ValueError("variables: differ from model_spec's variables")
        if self.world_size != self.cluster.num_gpus:
            raise ValueError(
                f"world_size: {self.world_size} but the cluster has {self.cluster.num_gpus} GPUs"
            )
        if self.kind == "sync":
            self.strategy().check(self.model_spec, self.cluster)
        return self

    def strategy(self) -> Strategy:
        """The sync plan's Strategy (ValueError for another kind)."""
        if self.kind != "sync":
            raise ValueError(f"kind: a {self.kind} plan has no Strategy")
        return Strategy.model_validate(self.plan)


def variables_fingerprint(variables: tuple[PlanVariable, ...]) -> str:
    """sha256 over the variables' names and shapes in order (a plan-to-model identity)."""
    text = json.dumps([[v.name, list(v.shape)] for v in variables], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def sync_plan_file(
    strategy: Strategy,
    model: ModelSpec,
    cluster: ClusterSpec,
    provenance: Provenance | None = None,
) -> PlanFile:
    """The plan file of a sync ``strategy`` for ``model`` on ``cluster`` (checked on creation)."""
    return PlanFile(
        kind="sync",
        plan=strategy.model_dump(mode="json"),
        model=model.name,
        variables=tuple(PlanVariable(name=v.name, shape=v.shape) for v in model.variables),
        world_size=cluster.num_gpus,
        model_spec=model,
        cluster=cluster,
        provenance=provenance or Provenance(),
    )


def read_plan_file(path: str | Path) -> PlanFile:
    """Parse a plan file (pydantic's ValidationError names the field that is wrong)."""
    return PlanFile.model_validate_json(Path(path).read_text())


def write_plan_file(plan: PlanFile, path: str | Path) -> None:
    Path(path).write_text(plan.model_dump_json(indent=2) + "\n")
