"""Brute force (HeterPS's BF baseline): every one of the T^L schedules, each provisioned exactly.

Exact but exponential; the paper reports its scheduling time in Table 2. ``time_limit`` stops
the enumeration; the result then says ``complete=False`` and extrapolates the full run's time
from the rate so far (the paper's "E" entries).
"""

from __future__ import annotations

import itertools
import math
import time

from search.heterogeneous.base import Assignment, Objective, Scheduler
from search.heterogeneous.provisioning import provision


class BruteForceScheduler(Scheduler):
    """Enumerates all T^L layer-to-type assignments in lexicographic order."""

    name = "brute-force"

    def __init__(self, time_limit: float | None = None) -> None:
        self.time_limit = time_limit

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        cm = objective.cm
        total = cm.num_types**cm.num_layers
        start = time.perf_counter()
        best: Assignment | None = None
        best_money = math.inf
        # No memo: every schedule is seen once, and a dict of T^L entries would not fit in memory.
        for done, assignment in enumerate(itertools.product(range(cm.num_types), repeat=cm.num_layers), 1):
            money = provision(cm, cm.stages(assignment)).money
            if money < best_money:
                best, best_money = assignment, money
            if self.time_limit is not None and done % 256 == 0:
                elapsed = time.perf_counter() - start
                if elapsed > self.time_limit:
                    return best, {
                        "complete": False,
                        "estimated_seconds": elapsed * total / done,
                        "notes": (f"stopped after {done} of {total} schedules",),
                    }
        extra: dict[str, object] = {"exact": True}
        if best is None:
            extra["reason"] = f"none of the {total} schedules reaches the throughput limit within the counts"
        return best, extra
