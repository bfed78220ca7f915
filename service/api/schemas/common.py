"""Pieces shared by the schema modules."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Public(BaseModel):
    """Base of every response schema: built from domain objects by attribute."""

    model_config = ConfigDict(from_attributes=True)


class Message(BaseModel):
    """A plain message, e.g. an error's ``detail``."""

    detail: str
