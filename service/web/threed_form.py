"""The create form's 3D space of a hybrid search (issue 42): a few fields instead of JSON.

``space`` '3d' with ``global_batch``, ``zero_stages``, ``recompute`` and ``micro_batches`` as
comma-separated lists becomes ``plan_options`` ``{"space": "3d", ...}`` (merged over any JSON
options of the form); an empty field keeps the kind's default. A malformed field is a ValueError
naming it (the form's one line); the API's own checks (``service.plans.hybrid_threed``) do the rest.
"""

from __future__ import annotations

from typing import Any

FIELDS = ("global_batch_3d", "zero_stages", "recompute", "micro_batches")


def _ints(field: str, text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"{field}: must be comma-separated whole numbers, got {text[:60]!r}")
    return [int(p) for p in parts]


def threed_options(plan: str, space: str, values: dict[str, str]) -> dict[str, Any]:
    """The 3D plan options of the form ({} when ``space`` is empty); ValueError naming a bad field."""
    given = [f for f in FIELDS if values.get(f, "").strip()]
    if not space.strip():
        if given:
            raise ValueError(f"{given[0]}: needs space 3d (a hybrid search)")
        return {}
    if plan != "hybrid":
        raise ValueError(f"space: 3d needs plan hybrid, not {plan}")
    if space.strip() != "3d":
        raise ValueError(f"space: must be 3d or empty, got {space[:60]!r}")
    out: dict[str, Any] = {"space": "3d"}
    if gb := values.get("global_batch_3d", "").strip():
        if not gb.isdigit():
            raise ValueError(f"global_batch: must be a whole number, got {gb[:60]!r}")
        out["global_batch"] = int(gb)
    if z := values.get("zero_stages", "").strip():
        out["zero_stages"] = _ints("zero_stages", z)
    if r := values.get("recompute", "").strip():
        out["recompute"] = [m.strip() for m in r.split(",")]
    if m := values.get("micro_batches", "").strip():
        out["micro_batches"] = _ints("micro_batches", m)
    return out
