"""All-CPU and all-GPU (the paper's CPU and GPU baselines): every layer on one type of that kind.

With several types of the kind (e.g. four GPU types), the cheapest of the uniform schedules is
taken, provisioned by the same least-cost method as every other schedule.
"""

from __future__ import annotations

from typing import Literal

from search.heterogeneous.base import Assignment, Objective, Scheduler, best_of


class SingleTypeScheduler(Scheduler):
    """Every layer on one resource type of ``kind``; the cheapest such type."""

    def __init__(self, kind: Literal["cpu", "gpu"]) -> None:
        self.kind = kind
        self.name = f"all-{kind}"

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        types = objective.types_of(self.kind)
        if not types:
            return None, {"reason": f"the cluster has no {self.kind.upper()} resource type"}
        n = objective.num_layers
        best = best_of(objective, [(t,) * n for t in types])
        if best is None:  # report why the first type fails, naming its stage
            return (types[0],) * n, {}
        return best, {}
