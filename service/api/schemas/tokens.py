"""Schemas of API tokens and of the caller."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas.common import Public
from simulator.spec.limits import Name


class TokenCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "alice", "role": "user"}]}
    )

    name: Name = Field(description="User name (created if new).")
    role: Literal["user", "worker", "admin"]


class TokenPublic(Public):
    id: int
    prefix: str = Field(description="First characters of the secret, to recognise it.")
    user_id: int
    name: str
    role: Literal["user", "worker", "admin"]
    created_at: datetime
    revoked: bool


class TokensPublic(Public):
    data: list[TokenPublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class TokenIssuedPublic(Public):
    """A new token; ``token`` is the secret, shown this once and never again."""

    token: str
    info: TokenPublic


class MePublic(Public):
    user_id: int
    name: str
    role: Literal["user", "worker", "admin"]
    token_id: int


class HealthPublic(Public):
    status: Literal["alive"]


class ReadyPublic(Public):
    status: Literal["ready", "not ready"]
    checks: dict[str, str] = Field(
        examples=[{"database": "ok", "migrations": "ok (0001)", "broker": "ok"}],
        description="Each check: 'ok...' or the reason it failed; 'skipped' when not configured.",
    )
