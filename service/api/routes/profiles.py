"""/profiles: upload (validated), list and get measured compute profiles; the compute they give."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, status

from service.api.deps import SessionDep, require
from service.api.errors import SpecInvalid
from service.api.params import IdPath
from service.api.schemas.profiles import ComputePublic, ProfilePublic, ProfilesPublic
from service.compute import estimate_compute
from service.db import repository as repo
from service.domain import Principal
from simulator.spec import SpecError
from simulator.spec.io import parse_as
from simulator.spec.limits import LIMITS, NAME_PATTERN
from simulator.spec.profile import Profile

router = APIRouter(prefix="/profiles", tags=["profiles"])

#: Users, admins and workers (a GPU worker pool's profiling jobs) may upload and read profiles.
CallerDep = Annotated[Principal, Depends(require("user", "admin", "worker"))]

_EXAMPLE = {
    "kind": "profile",
    "model": "NCF-dense",
    "device": "T4-16GB",
    "dtype": "float32",
    "batch": 256,
    "layers": [{"name": "embedding_user", "fwd_s": 0.0001, "bwd_s": 0.0021}],
    "source": "strategist profile on cuda",
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProfilePublic)
def upload_profile(
    session: SessionDep,
    caller: CallerDep,
    body: Annotated[dict[str, Any], Body(openapi_examples={"one-layer": {"value": _EXAMPLE}})],
) -> ProfilePublic:
    """Store a Profile as the newest for its (model, device, dtype, batch); 422 names every bad field."""
    try:
        profile = parse_as(Profile, body)
    except SpecError as e:
        raise SpecInvalid(e, ["body"]) from None
    return ProfilePublic.of(repo.store_profile(session, profile=profile, owner_id=caller.user_id))


@router.get("", response_model=ProfilesPublic)
def list_profiles(
    session: SessionDep,
    caller: CallerDep,
    model: Annotated[str | None, Query(max_length=LIMITS.name_chars, pattern=NAME_PATTERN)] = None,
) -> ProfilesPublic:
    """Every stored profile (of ``model`` if given), newest first."""
    data = [ProfilePublic.of(r) for r in repo.list_profiles(session, model=model)]
    return ProfilesPublic(data=data, count=len(data))


@router.get("/compute", response_model=ComputePublic)
def compute(
    session: SessionDep,
    caller: CallerDep,
    model: Annotated[str, Query(min_length=1, max_length=LIMITS.name_chars, pattern=NAME_PATTERN)],
    cluster: Annotated[str, Query(min_length=1, max_length=LIMITS.name_chars, pattern=NAME_PATTERN)],
) -> ComputePublic:
    """T_comp of ``model`` on ``cluster``: the stored profile for its key, else the roofline."""
    est = estimate_compute(session, model=model, cluster=cluster, owner_id=caller.user_id)
    return ComputePublic.model_validate(est)


@router.get("/{profile_id}", response_model=ProfilePublic)
def get_profile(profile_id: IdPath, session: SessionDep, caller: CallerDep) -> ProfilePublic:
    """A stored profile by id; 404 if none."""
    return ProfilePublic.of(repo.get_profile(session, profile_id=profile_id))
