"""Schemas of measured compute profiles and of the compute time the cost model derives from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.api.schemas.common import Public
from service.domain import ProfileRecord


class ProfilePublic(Public):
    """A stored profile: its key, size at a glance, and the full Profile JSON."""

    id: int
    model: str = Field(examples=["ResNet50"])
    device: str = Field(examples=["H100-SXM5-80GB"])
    dtype: str = Field(examples=["float32"])
    batch: int
    layers: int = Field(description="Layers the profile times.")
    step_s: float = Field(description="Sum of the layers' forward and backward seconds.")
    source: str
    owner_id: int | None = Field(description="Uploader.")
    created_at: datetime
    profile: dict[str, Any] = Field(description="The full Profile JSON.")

    @classmethod
    def of(cls, rec: ProfileRecord) -> ProfilePublic:
        p = rec.profile
        return cls(
            id=rec.id,
            model=p.model,
            device=p.device,
            dtype=p.dtype,
            batch=p.batch,
            layers=len(p.layers),
            step_s=sum(lt.fwd_s + lt.bwd_s for lt in p.layers),
            source=p.source,
            owner_id=rec.owner_id,
            created_at=rec.created_at,
            profile=p.model_dump(mode="json"),
        )


class ProfilesPublic(Public):
    data: list[ProfilePublic]
    count: int


class ComputePublic(Public):
    """T_comp of one data-parallel step and which compute model produced it."""

    model: str
    cluster: str
    device: str = Field(description="Device type of the slowest worker node.")
    t_comp: float = Field(description="Forward + backward seconds per step (slowest node).")
    compute_source: Literal["roofline", "profile", "profile+roofline"]
    profiled_layers: int
