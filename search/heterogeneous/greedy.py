"""Greedy layer scheduling (the paper's Greedy baseline, after Shi et al. 2020): one layer at a time.

Decision (the paper gives no details): start from the cheapest single-type schedule, then sweep
the layers in forward order, moving each layer to the type that makes the whole schedule cheapest
with every other layer fixed; repeat sweeps until one changes nothing. It stops in a local
optimum: moving two neighbouring layers together is never tried.
"""

from __future__ import annotations

import math

from search.heterogeneous.base import Assignment, Objective, Scheduler, best_of


class GreedyScheduler(Scheduler):
    """Layer-by-layer best move, from the cheapest single-type schedule, until no move helps."""

    name = "greedy"

    def __init__(self, max_sweeps: int = 10) -> None:
        self.max_sweeps = max_sweeps

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        n, nt = objective.num_layers, objective.num_types
        current = best_of(objective, [(t,) * n for t in range(nt)]) or (0,) * n
        money = objective.money(current)
        for _ in range(self.max_sweeps):
            changed = False
            for layer in range(n):
                for t in range(nt):
                    cand = (*current[:layer], t, *current[layer + 1 :])
                    m = objective.money(cand)
                    if m < money * (1 - 1e-12):
                        current, money, changed = cand, m, True
            if not changed:
                break
        return (current if math.isfinite(money) else None), {}
