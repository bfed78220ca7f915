"""One error type for every bad spec: a list of (field path, reason) pairs a person can act on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Issue:
    """One reason a spec is invalid, at one field path (e.g. ``layers.3.inputs.0``)."""

    path: Path
    reason: str

    @property
    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path) or "<root>"

    def __str__(self) -> str:
        return f"{self.dotted}: {self.reason}"


class SpecError(ValueError):
    """A model, cluster, strategy or plan that is not valid; ``issues`` names every field and reason."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        if not issues:
            raise ValueError("SpecError needs at least one issue")
        self.issues: tuple[Issue, ...] = tuple(issues)
        super().__init__("; ".join(str(i) for i in self.issues))

    @classmethod
    def from_pydantic(cls, err: ValidationError, prefix: Path = ()) -> SpecError:
        """Flatten pydantic's errors; structural errors carry their own relative path in ``ctx``."""
        issues: list[Issue] = []
        errors = err.errors(include_url=False)
        # An invalid item also makes its tuple "too short"; that echo hides nothing useful.
        item_locs = {tuple(e["loc"]) for e in errors if e.get("type") != "too_short"}
        for e in errors:
            if e.get("type") == "too_short" and any(
                loc[: len(e["loc"])] == tuple(e["loc"]) and len(loc) > len(e["loc"]) for loc in item_locs
            ):
                continue
            loc: Path = tuple(p for p in e["loc"] if not _is_union_tag(p))
            ctx = e.get("ctx") or {}
            if e.get("type") == "spec" and "path" in ctx:
                rel = tuple(_maybe_int(p) for p in str(ctx["path"]).split(".") if p)
                issues.append(Issue(prefix + loc + rel, str(ctx["reason"])))
            else:
                issues.append(Issue(prefix + loc, e["msg"]))
        return cls(issues)


def _maybe_int(p: str) -> str | int:
    return int(p) if p.isdigit() else p


def _is_union_tag(p: str | int) -> bool:
    # pydantic inserts the discriminator value ('ps', 'collective') into loc; it is not a field.
    return p in ("ps", "collective")


def structural(issues: Iterable[Issue]) -> None:
    """Raise the first structural issue inside a pydantic validator, keeping its relative path."""
    for issue in issues:
        raise PydanticCustomError("spec", "{path}: {reason}", {"path": issue.dotted, "reason": issue.reason})
