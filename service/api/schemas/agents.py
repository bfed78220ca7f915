"""Schemas of the node-agent endpoints (issue 41): registration, gang slots, a pool's cluster."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas.common import Public
from service.api.schemas.trials import TrialPublic
from simulator.spec import DeviceType
from simulator.spec.limits import LIMITS, Name

ClaimToken = Annotated[Name, Field(max_length=64)]
PoolName = Annotated[Name, Field(max_length=64)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AgentCreate(_Request):
    """A node registering (or re-registering: any slot it held is released)."""

    name: Name = Field(description="Unique agent name; it names the node in the pool's ClusterSpec.")
    pool: PoolName = Field(description="The pool (cluster) this node belongs to.")
    host: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9.:\-\[\]]+$")] = Field(
        description="Address the other nodes reach this one at (the rendezvous endpoint when node 0)."
    )
    rdzv_port: int = Field(ge=1, le=65535, description="TCP port of torchrun's c10d rendezvous on this node.")
    nic: Annotated[str, Field(max_length=64)] = Field("", description="Interface for NCCL/Gloo traffic.")
    nic_gbps: float = Field(ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="NIC rate, Gbit/s.")
    intra_gbps: float = Field(
        100.0, ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="GPU-to-GPU rate inside the node."
    )
    device: DeviceType = Field(description="The node's GPU type (as measured or configured).")
    gpus: int = Field(ge=0, le=LIMITS.gpus_per_node, description="GPUs on the node.")


class AgentPublic(Public):
    id: int
    name: str
    pool: str
    host: str
    rdzv_port: int
    nic: str
    nic_gbps: float
    intra_gbps: float
    device: dict[str, Any]
    gpus: int
    slot_id: int | None = Field(description="The gang slot it holds now; null: idle.")
    last_seen_at: datetime
    live: bool


class AgentsPublic(Public):
    data: list[AgentPublic]
    count: int


class SlotClaimPublic(Public):
    """The caller's node of a trial attempt: start torchrun with these."""

    slot_id: int
    trial: TrialPublic
    attempt: int
    claim_token: str
    node_rank: int
    nnodes: int
    rdzv_endpoint: str = Field(description="host:port of node 0's agent (c10d rendezvous).")
    rdzv_id: str = Field(description="torchrun --rdzv-id: trial<id>-<attempt>.")
    agents: list[str] = Field(description="The gang's agents, by node rank.")
    model: dict[str, Any]
    cluster: dict[str, Any]
    model_factory: str | None = Field(
        None, description="The search's own model ('module:function'): run it, not the spec's layers."
    )


class SlotHeartbeatCreate(_Request):
    claim_token: ClaimToken


class SlotAckPublic(Public):
    accepted: bool = Field(description="False: the attempt is over (requeued or finished); kill its ranks.")
    stop: bool = Field(description="True: the search was cancelled; stop the ranks.")
    nnodes: int
    done: int = Field(description="Slots of the attempt whose ranks have ended.")


class SlotDoneCreate(_Request):
    claim_token: ClaimToken
    exit_code: int = Field(ge=-255, le=255, description="torchrun's exit status on this node.")
    reason: Annotated[str, Field(max_length=2000)] | None = None


class PoolClusterCreate(_Request):
    name: Name | None = Field(None, description="Spec name; default: the pool's name.")
