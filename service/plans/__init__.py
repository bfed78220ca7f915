"""Search plan kinds other than AutoSync's 'sync': one ``PlanKind`` per module, looked up by name.

``plan_kind(name)`` is the one dispatch on ``searches.plan_kind``: None for 'sync' (the AutoSync
loop in ``service.loop``), else the kind's planner. Modules are imported on first use, so the CLI
and the API pay for a kind's search code only when a search of that kind needs it.
"""

from __future__ import annotations

import importlib

from service.plans.base import OptionsInvalid, PlanKind, RoundAsk, RoundPlan

#: plan_kind → "module:class" of its PlanKind ('sync' is the loop's own and has none).
KINDS: dict[str, str] = {
    "heterogeneous": "service.plans.heterogeneous:HeterogeneousPlans",
    "hybrid": "service.plans.hybrid:HybridPlans",
    "pipeline": "service.plans.pipeline:PipelinePlans",
}


def plan_kind(name: str) -> PlanKind | None:
    """The planner of ``name``; None for 'sync'; ValueError for a kind no module implements yet."""
    if name == "sync":
        return None
    where = KINDS.get(name)
    if where is None:
        raise ValueError(f"plan_kind: {name!r} is not implemented (known: sync, {', '.join(sorted(KINDS))})")
    module, cls = where.split(":")
    kind: PlanKind = getattr(importlib.import_module(module), cls)()
    return kind


__all__ = ["KINDS", "OptionsInvalid", "PlanKind", "RoundAsk", "RoundPlan", "plan_kind"]
