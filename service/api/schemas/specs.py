"""Schemas of uploaded and zoo model and cluster specs."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.api.schemas.common import Public
from service.db.repo_specs import SpecSummary
from service.domain import SpecRecord
from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.defaults import cluster_defaults


def stored(rec: SpecSummary | SpecRecord) -> dict[str, Any]:
    """The fields every spec schema takes from the stored row, summary or full record alike."""
    return {
        "id": rec.id,
        "name": rec.name,
        "origin": rec.origin,
        "owner_id": rec.owner_id,
        "created_at": rec.created_at,
    }


class ModelSummary(Public):
    """A stored model spec's size at a glance (a list's item; the full spec: ``GET /models/{id}``)."""

    id: int
    name: str = Field(examples=["resnet50"])
    origin: Literal["upload", "zoo"]
    owner_id: int | None = Field(description="Uploader; null for the zoo.")
    created_at: datetime
    family: str = Field(examples=["IC"])
    batch_size: int
    layers: int = Field(description="Number of layers.")
    variables: int = Field(description="Number of trainable variables.")
    params: int = Field(description="Number of parameters.")

    @classmethod
    def of_summary(cls, rec: SpecSummary) -> ModelSummary:
        f = rec.facts
        return cls(
            **stored(rec),
            family=str(f.get("family", "")),
            batch_size=int(f.get("batch_size", 0)),
            layers=int(f.get("layers", 0)),
            variables=int(f.get("variables", 0)),
            params=int(f.get("params", 0)),
        )


class ModelPublic(ModelSummary):
    """A stored model spec and its size at a glance."""

    spec: dict[str, Any] = Field(description="The full ModelSpec JSON.")

    @classmethod
    def of(cls, rec: SpecRecord, spec: ModelSpec | None = None) -> ModelPublic:
        m = spec or rec.model_spec()
        return cls(
            **stored(rec),
            family=m.family,
            batch_size=m.batch_size,
            layers=len(m.layers),
            variables=len(m.variables),
            params=m.params,
            spec=rec.body,
        )


class ModelsPublic(Public):
    data: list[ModelSummary] = Field(description="Summaries; the full spec is at /models/{id}.")
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class SpecDefaultPublic(Public):
    """A field the spec leaves at its default (``simulator.spec.defaults``)."""

    field: str = Field(examples=["nodes[0].latency_us"])
    value: Any = Field(description="The default value it takes (null: no rate, the FP32 one is used).")
    changes_answer: bool = Field(description="True when the default enters a prediction.")
    note: str


class ClusterSummary(Public):
    """A stored cluster spec's size at a glance (a list's item; the full spec: ``GET /clusters/{id}``)."""

    id: int
    name: str = Field(examples=["B1"])
    origin: Literal["upload", "zoo"]
    owner_id: int | None = Field(description="Uploader; null for the zoo.")
    created_at: datetime
    nodes: int
    gpus: int

    @classmethod
    def of_summary(cls, rec: SpecSummary) -> ClusterSummary:
        f = rec.facts
        return cls(
            **stored(rec),
            nodes=int(f.get("nodes", 0)),
            gpus=int(f.get("gpus", 0)),
        )


class ClusterPublic(ClusterSummary):
    """A stored cluster spec and its size at a glance."""

    spec: dict[str, Any] = Field(description="The full ClusterSpec JSON.")
    defaults: list[SpecDefaultPublic] = Field(
        default_factory=list,
        description="Fields left at their default: which, the value, whether it changes the answer.",
    )

    @classmethod
    def of(cls, rec: SpecRecord, spec: ClusterSpec | None = None) -> ClusterPublic:
        c = spec or rec.cluster_spec()
        return cls(
            **stored(rec),
            nodes=len(c.nodes),
            gpus=c.num_gpus,
            spec=rec.body,
            defaults=[SpecDefaultPublic(**asdict(n)) for n in cluster_defaults(c)],
        )


class ClustersPublic(Public):
    data: list[ClusterSummary] = Field(description="Summaries; the full spec is at /clusters/{id}.")
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class ZooPublic(Public):
    """Names available in the built-in zoo."""

    data: list[str] = Field(examples=[["A1", "B1"]])
    count: int
