"""Pieces shared by the schema modules."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from simulator.spec.limits import LIMITS, NAME_PATTERN, printable_issue

#: A stored object's id in a request body (PostgreSQL ``integer`` range, see `service.api.params`).
Id = Annotated[int, Field(ge=1, le=LIMITS.id)]


def _spec_ref(value: Any) -> str | int:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= LIMITS.id:
            raise ValueError(f"an id is between 1 and {LIMITS.id}, got {value}")
        return value
    if isinstance(value, str):
        issue = printable_issue(value)
        if issue:
            raise ValueError(issue)
        return value
    raise ValueError("must be a name (a string) or an id (an integer)")


#: A model or cluster named in a request: a name (your upload, else the zoo's) or a stored id.
#: One validator, so an error names the field itself rather than each member of a union.
SpecRef = Annotated[
    str | int,
    PlainValidator(_spec_ref),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": LIMITS.name_chars, "pattern": NAME_PATTERN},
                {"type": "integer", "minimum": 1, "maximum": LIMITS.id},
            ]
        }
    ),
]


class Public(BaseModel):
    """Base of every response schema: built from domain objects by attribute."""

    model_config = ConfigDict(from_attributes=True)


class Message(BaseModel):
    """A plain message, e.g. an error's ``detail``."""

    detail: str
