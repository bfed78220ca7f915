"""/agents: node agents register, claim gang slots, beat per slot; a pool of agents is a cluster."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status

from service.api.deps import SessionDep, SettingsDep, UserDep, WorkerDep
from service.api.schemas.agents import (
    AgentCreate,
    AgentPublic,
    AgentsPublic,
    PoolClusterCreate,
    SlotAckPublic,
    SlotClaimPublic,
    SlotDoneCreate,
    SlotHeartbeatCreate,
)
from service.api.schemas.specs import ClusterPublic
from service.api.schemas.trials import TrialPublic
from service.db import repo_agents, repo_gangs
from service.settings import Settings

router = APIRouter(prefix="/agents", tags=["agents"])
PoolPath = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._\-]+$")]
NamePath = Annotated[str, Path(min_length=1, max_length=200)]
SlotPath = Annotated[int, Path(ge=1, le=2**31 - 1)]


def _sweep(session: SessionDep, settings: Settings) -> None:
    """Abandon stale gangs before answering (every agent call runs it; cheap: open slots only).

    A slot silent for ``heartbeat_timeout_s`` or not joined within it ends its attempt."""
    t = settings.heartbeat_timeout_s
    repo_gangs.release_stale_gangs(session, timeout_s=t, join_timeout_s=t)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=AgentPublic)
def register(body: AgentCreate, session: SessionDep, worker: WorkerDep) -> AgentPublic:
    """Register this node (or refresh it after a restart: the slot it held is released)."""
    info = repo_agents.register_agent(
        session, **body.model_dump(exclude={"device"}), device=body.device, user_id=worker.user_id
    )
    return AgentPublic.model_validate(info)


@router.get("", response_model=AgentsPublic)
def list_agents(
    session: SessionDep,
    settings: SettingsDep,
    user: UserDep,
    pool: Annotated[str | None, Query(max_length=64)] = None,
) -> AgentsPublic:
    """Every agent (of ``pool``) by name, live or not, with the slot it holds."""
    data = [
        AgentPublic.model_validate(a)
        for a in repo_agents.list_agents(session, live_s=settings.heartbeat_timeout_s, pool=pool)
    ]
    return AgentsPublic(data=data, count=len(data))


@router.post(
    "/{name}/claim",
    response_model=SlotClaimPublic,
    responses={204: {"description": "Nothing for this agent now."}},
)
def claim(
    name: NamePath, session: SessionDep, settings: SettingsDep, worker: WorkerDep
) -> SlotClaimPublic | Response:
    """This agent's slot of a trial attempt: the one it holds, or a new gang with it in it."""
    _sweep(session, settings)
    got = repo_gangs.claim_slot(session, agent=name, live_s=settings.heartbeat_timeout_s)
    if got is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    fields: dict[str, Any] = {k: getattr(got, k) for k in SlotClaimPublic.model_fields if k != "trial"}
    fields["agents"] = list(got.agents)
    return SlotClaimPublic(trial=TrialPublic.model_validate(got.trial), **fields)


@router.post("/slots/{slot_id}/heartbeat", response_model=SlotAckPublic)
def slot_heartbeat(
    slot_id: SlotPath,
    body: SlotHeartbeatCreate,
    session: SessionDep,
    settings: SettingsDep,
    worker: WorkerDep,
) -> SlotAckPublic:
    """The slot's ranks run. ``accepted: false``: the attempt is over, kill them."""
    _sweep(session, settings)
    ack = repo_gangs.slot_heartbeat(session, slot_id=slot_id, claim_token=body.claim_token)
    return SlotAckPublic.model_validate(ack)


@router.post("/slots/{slot_id}/done", status_code=status.HTTP_204_NO_CONTENT)
def slot_done(slot_id: SlotPath, body: SlotDoneCreate, session: SessionDep, worker: WorkerDep) -> Response:
    """The slot's ranks ended (torchrun's exit code); the agent is free again."""
    repo_gangs.slot_done(
        session, slot_id=slot_id, claim_token=body.claim_token, exit_code=body.exit_code, reason=body.reason
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/pools/{pool}/cluster")
def pool_cluster(pool: PoolPath, session: SessionDep, settings: SettingsDep, user: UserDep) -> dict[str, Any]:
    """The ClusterSpec of the pool's live agents (one node per agent); 404 without a live agent."""
    spec = repo_agents.pool_cluster(session, pool=pool, live_s=settings.heartbeat_timeout_s)
    return spec.model_dump(mode="json")


@router.post("/pools/{pool}/cluster", status_code=status.HTTP_201_CREATED, response_model=ClusterPublic)
def store_pool_cluster(
    pool: PoolPath, body: PoolClusterCreate, session: SessionDep, settings: SettingsDep, user: UserDep
) -> ClusterPublic:
    """Store the pool's ClusterSpec as your cluster: a search on it runs its trials on the pool."""
    rec, spec = repo_agents.store_pool_cluster(
        session, pool=pool, live_s=settings.heartbeat_timeout_s, owner_id=user.user_id, name=body.name
    )
    return ClusterPublic.of(rec, spec)
