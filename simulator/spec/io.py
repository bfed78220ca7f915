"""Reading and writing specs as JSON, with every error turned into a SpecError with field paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.spec.cluster import ClusterSpec
from simulator.spec.errors import Issue, SpecError
from simulator.spec.limits import LIMITS
from simulator.spec.model import ModelSpec
from simulator.spec.resources import ResourcePlan
from simulator.spec.strategy import Strategy

Spec = ModelSpec | ClusterSpec | Strategy | ResourcePlan
T = TypeVar("T", bound=BaseModel)

_KINDS: dict[str, type[ModelSpec] | type[ClusterSpec] | type[Strategy] | type[ResourcePlan]] = {
    "model": ModelSpec,
    "cluster": ClusterSpec,
    "strategy": Strategy,
    "resource_plan": ResourcePlan,
}


def parse_as(cls: type[T], data: Any) -> T:
    """Validate ``data`` as ``cls``; raise SpecError with field paths on failure."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise SpecError.from_pydantic(e) from None


def parse_spec(data: Any) -> Spec:
    """Validate a JSON object as the spec its ``kind`` names (or, without one, its shape suggests)."""
    if not isinstance(data, dict):
        raise SpecError([Issue((), "a spec must be a JSON object")])
    kind = data.get("kind")
    if kind is None:
        kind = "model" if "layers" in data else "cluster" if "nodes" in data else "strategy"
    if kind not in _KINDS:
        raise SpecError([Issue(("kind",), f"unknown kind {kind!r}; expected one of {sorted(_KINDS)}")])
    return parse_as(_KINDS[kind], data)


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file; every way the file can be wrong is a SpecError (OSError aside).

    The file is at most ``LIMITS.spec_file_bytes``; it must be UTF-8 JSON, nested no deeper than Python's
    parser can go.
    """
    p = Path(path)
    if p.is_file() and p.stat().st_size > LIMITS.spec_file_bytes:
        raise SpecError([Issue((), f"file is {p.stat().st_size} bytes, more than {LIMITS.spec_file_bytes}")])
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SpecError(
            [Issue((), f"not UTF-8 text: byte {e.start} is {e.object[e.start : e.start + 1]!r}")]
        ) from None
    except json.JSONDecodeError as e:
        raise SpecError([Issue((), f"not valid JSON: {e}")]) from None
    except RecursionError:
        raise SpecError([Issue((), "not valid JSON: nested too deeply")]) from None
    return parse_spec(data)


def dump_json(spec: BaseModel, indent: int | None = 2) -> str:
    """Serialise a spec to JSON (the inverse of ``parse_spec``)."""
    return spec.model_dump_json(indent=indent, exclude_none=False)
