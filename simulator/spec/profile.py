"""Profile: measured forward and backward seconds of every layer of one model on one device.

A profile is keyed by (model, device, dtype, batch): the cost model uses it instead of the
roofline for exactly that key (``simulator.analytical.compute``). Written by
``strategist profile`` (``simulator/profile/``), uploaded by a pipeline (``POST /profiles``) or
stored as JSON under ``datasets/profiles/`` (format in ``datasets/README.md``, "Profiles").

Layer names must be the model's layer names; a profile need not list every layer (layers it does
not list fall back to the roofline, and the cost breakdown says how many did).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.spec.errors import Issue, SpecError, structural
from simulator.spec.limits import INT4_MAX, LIMITS, Name, SpecName, Text
from simulator.spec.model import ComputeDType, ModelSpec


class LayerTime(BaseModel):
    """One layer's measured seconds for the profile's whole batch (not per sample)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="The model's layer name.")
    fwd_s: float = Field(ge=0.0, le=LIMITS.seconds, description="Forward seconds for the batch.")
    bwd_s: float = Field(ge=0.0, le=LIMITS.seconds, description="Backward seconds for the batch.")


class Profile(BaseModel):
    """Measured per-layer times of ``model`` on ``device`` in ``dtype`` at per-device ``batch``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: Literal["profile"] = "profile"
    model: SpecName = Field(description="ModelSpec.name.")
    device: Name = Field(description="DeviceType.name the times were measured on.")
    dtype: ComputeDType = Field("float32", description="Arithmetic the model ran in.")
    batch: int = Field(ge=1, le=LIMITS.batch_size, description="Samples per forward/backward pass.")
    layers: tuple[LayerTime, ...] = Field(min_length=1, max_length=LIMITS.layers, fail_fast=True)
    step_s: float | None = Field(
        None,
        gt=0.0,
        le=LIMITS.seconds,
        description="Measured whole fwd+bwd seconds, when taken without per-layer hooks.",
    )
    source: Text = Field("", description="How the times were taken (tool, host, threads, date).")

    @model_validator(mode="after")
    def _check(self) -> Profile:
        seen: set[str] = set()
        issues = []
        for i, layer in enumerate(self.layers):
            if layer.name in seen:
                issues.append(Issue(("layers", i, "name"), f"duplicate layer name {layer.name!r}"))
            seen.add(layer.name)
        structural(issues)
        return self

    @property
    def key(self) -> tuple[str, str, str, int]:
        """(model, device, dtype, batch): what the cost model looks a profile up by."""
        return (self.model, self.device, self.dtype, self.batch)

    def times(self) -> dict[str, tuple[float, float]]:
        """Layer name -> (forward, backward) seconds for the batch."""
        return {layer.name: (layer.fwd_s, layer.bwd_s) for layer in self.layers}


class ProfileJob(BaseModel):
    """A profile job as the API hands it to a GPU-pool worker (``POST /profiles/jobs/claim``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    id: int = Field(ge=1, le=INT4_MAX)
    spec: ModelSpec = Field(description="The model to profile, as resolved when the job was queued.")
    device: Name | None = Field(
        None, description="DeviceType name to key the profile by; None: the worker's."
    )
    dtype: ComputeDType = "float32"
    batch: int = Field(ge=1, le=LIMITS.batch_size)
    repeats: int = Field(ge=1, le=100)


class ProfileJobResult(BaseModel):
    """What a worker reports for its job: the measured Profile, or why it could not measure one."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    worker: Name = Field(description="The worker that claimed the job.")
    profile: Profile | None = None
    error: Text | None = None

    @model_validator(mode="after")
    def _one(self) -> ProfileJobResult:
        if (self.profile is None) == (self.error is None):
            structural([Issue(("profile",), "give exactly one of profile and error")])
        return self


def parse_profile(text: str, where: str = "profile") -> Profile:
    """Parse a profile's JSON text; SpecError names the line (bad JSON) or the line and field path.

    Every message reads ``WHERE: line N: FIELD.PATH: reason`` (``where`` is e.g. the file name), so
    a CLI prints it as is. The API validates with ``Profile.model_validate`` and reports paths.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError([Issue((), f"{where}: line {e.lineno} column {e.colno}: {e.msg}")]) from None
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        issues = SpecError.from_pydantic(e).issues
        raise SpecError([Issue((), f"{where}: {_line_of(text, i.path)}{i}") for i in issues]) from None


def load_profile(path: str | Path) -> Profile:
    """Read a profile file (``parse_profile`` with the file name in every message)."""
    p = Path(path)
    return parse_profile(p.read_text(), str(p))


def _line_of(text: str, loc: tuple[str | int, ...]) -> str:
    """'line N: ' for the JSON line where the field at ``loc`` starts, or '' if it cannot be found.

    Follows the path through the text: for ('layers', 3, 'fwd_s') it finds the key "layers",
    the 4th element of the array after it, then the key "fwd_s" inside that element. Good enough
    for files written with one field per line (json.dumps(indent=...), hand-written JSON).
    """
    pos = 0
    for part in loc:
        if isinstance(part, str):
            pos = text.find(f'"{part}"', pos)
        else:
            start = text.find("[", pos)
            pos = -1 if start < 0 else _nth_element(text, start, part)
        if pos < 0:
            return ""
    return f"line {text.count(chr(10), 0, pos) + 1}: "


def _nth_element(text: str, start: int, n: int) -> int:
    """Offset of the n-th element of the JSON array opening at ``text[start] == '['``, or -1."""
    depth, index, in_str, esc = 0, 0, False, False
    for i in range(start + 1, len(text)):
        c = text[i]
        if depth == 0 and not in_str and index == n and not c.isspace() and c not in ",]":
            return i
        if in_str:
            esc, in_str = (False, True) if esc else (c == "\\", c != '"')
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                return -1
            depth -= 1
        elif c == "," and depth == 0:
            index += 1
    return -1
