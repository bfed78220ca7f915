"""Schemas of measured compute profiles and of the compute time the cost model derives from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas.common import Public, SpecRef
from service.domain import ProfileJobRecord, ProfileRecord
from simulator.spec.limits import LIMITS, Label, Name
from simulator.spec.model import ComputeDType


class ProfileSummary(Public):
    """A stored profile's key and size at a glance (a list's item; the full Profile JSON is at
    ``GET /profiles/{id}``), so a page's bytes do not grow with the profiled models' layers."""

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

    @classmethod
    def fields_of(cls, rec: ProfileRecord) -> dict[str, Any]:
        p = rec.profile
        return {
            "id": rec.id,
            "model": p.model,
            "device": p.device,
            "dtype": p.dtype,
            "batch": p.batch,
            "layers": len(p.layers),
            "step_s": sum(lt.fwd_s + lt.bwd_s for lt in p.layers),
            "source": p.source,
            "owner_id": rec.owner_id,
            "created_at": rec.created_at,
        }

    @classmethod
    def of_summary(cls, rec: ProfileRecord) -> ProfileSummary:
        return cls(**cls.fields_of(rec))


class ProfilePublic(ProfileSummary):
    """A stored profile: its key, size at a glance, and the full Profile JSON."""

    profile: dict[str, Any] = Field(description="The full Profile JSON.")

    @classmethod
    def of(cls, rec: ProfileRecord) -> ProfilePublic:
        return cls(**cls.fields_of(rec), profile=rec.profile.model_dump(mode="json"))


class ProfilesPublic(Public):
    data: list[ProfileSummary] = Field(description="Summaries; the full profile is at /profiles/{id}.")
    count: int
    next_cursor: int | None = None


class ComputePublic(Public):
    """T_comp of one data-parallel step and which compute model produced it."""

    model: str
    cluster: str
    device: str = Field(description="Device type of the slowest worker node.")
    t_comp: float = Field(description="Forward + backward seconds per step (slowest node).")
    compute_source: Literal["roofline", "profile", "profile+roofline"]
    profiled_layers: int


class ProfileJobCreate(BaseModel):
    """Queue a profile job: measure ``model``'s per-layer fwd/bwd on a GPU-pool worker."""

    model_config = ConfigDict(extra="forbid")

    model: SpecRef = Field(description="Model spec id, or name (your upload of that name, else the zoo's).")
    batch: int = Field(ge=1, le=LIMITS.batch_size, description="Per-device batch to profile at.")
    dtype: ComputeDType = "float32"
    device: Name | None = Field(
        None, description="DeviceType name to key the profile by; default: the worker's GPU name."
    )
    repeats: int = Field(3, ge=1, le=100, description="Timed runs per layer (median).")


class ProfileJobPublic(Public):
    """A profile job and how it ended; ``profile_id`` is the stored profile once it is done."""

    id: int
    model: str
    device: str | None
    dtype: str
    batch: int
    repeats: int
    state: Literal["queued", "running", "done", "failed"]
    worker: str | None
    profile_id: int | None
    error: str | None
    owner_id: int | None
    created_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, rec: ProfileJobRecord) -> ProfileJobPublic:
        return cls(
            id=rec.id,
            model=rec.model,
            device=rec.device,
            dtype=rec.dtype,
            batch=rec.batch,
            repeats=rec.repeats,
            state=rec.state,
            worker=rec.worker,
            profile_id=rec.profile_id,
            error=rec.error,
            owner_id=rec.owner_id,
            created_at=rec.created_at,
            finished_at=rec.finished_at,
        )


class ProfileJobRelease(BaseModel):
    """The worker running a profile job hands it back (it is stopping normally): queue it again."""

    model_config = ConfigDict(extra="forbid")

    worker: Name = Field(description="The worker that claimed the job.")
    reason: Label = Field(default="", description="Why it was handed back (shown in the log).")


class ProfileJobReleasePublic(Public):
    """Whether the job was handed back, and the job after it."""

    released: bool = Field(description="False: the job was not running for this worker (nothing changed).")
    job: ProfileJobPublic
