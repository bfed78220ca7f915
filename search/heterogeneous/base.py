"""The layer-scheduler interface (HeterPS Section 5): a schedule, its provisioning, money and time taken.

Every scheduler answers the same question (Formulas 10-11): which resource type should run each
layer so that the provisioned plan meets the throughput limit within the available units at the
least money. They all score a candidate schedule the same way, through ``Objective``: the cost
model (``simulator.analytical.heterogeneous``) and the exact provisioning of Section 5.1
(``search.heterogeneous.provisioning``), except where a scheduler's own method fixes the units
(AIBox's 1 GPU : 6 CPU cores).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from search.heterogeneous.provisioning import Provisioning, provision, provision_many
from simulator.analytical.heterogeneous import HeterogeneousCostModel, StageProfile
from simulator.spec import ResourcePlan
from simulator.spec.resources import stage_bounds

Assignment = tuple[int, ...]  # the type index of every layer (Formula 9 as one choice per layer)


class Objective:
    """Money of a schedule under the least-money provisioning, memoised; counts distinct evaluations.

    Not thread safe (the memo is a plain dict); one objective per scheduling run.
    """

    def __init__(self, cost_model: HeterogeneousCostModel) -> None:
        self.cm = cost_model
        self.memo: dict[Assignment, Provisioning] = {}
        # stage profiles by (first, last, type, next type, previous type): schedules share most of them
        self._stages: dict[tuple[int, int, int, int | None, int | None], StageProfile] = {}

    @property
    def num_layers(self) -> int:
        return self.cm.num_layers

    @property
    def num_types(self) -> int:
        return self.cm.num_types

    @property
    def evaluations(self) -> int:
        return len(self.memo)

    def __call__(self, assignment: Sequence[int]) -> Provisioning:
        key = tuple(int(a) for a in assignment)
        got = self.memo.get(key)
        if got is None:
            got = provision(self.cm, self.stages(key))
            self.memo[key] = got
        return got

    def stages(self, key: Assignment) -> tuple[StageProfile, ...]:
        """``cm.stages(key)``, each stage profile built once per objective."""
        if len(key) != self.cm.num_layers:
            raise ValueError(f"assignment: {len(key)} entries for {self.cm.num_layers} layers")
        runs = stage_bounds(key)
        out = []
        for i, (a, b) in enumerate(runs):
            skey = (
                a,
                b,
                key[a],
                key[runs[i + 1][0]] if i + 1 < len(runs) else None,
                key[runs[i - 1][0]] if i > 0 else None,
            )
            st = self._stages.get(skey)
            if st is None:
                st = self._stages[skey] = self.cm.stage(*skey)
            out.append(st)
        return tuple(out)

    def money(self, assignment: Sequence[int]) -> float:
        """Money of the schedule; inf when no provisioning meets the limit."""
        return self(assignment).money

    def money_many(self, assignments: Sequence[Assignment]) -> list[float]:
        """``money`` of every assignment; the ones not memoised yet are provisioned in one batch
        (``provision_many``: the same numbers as one at a time)."""
        new = list(dict.fromkeys(a for a in assignments if a not in self.memo))
        if new:
            for a, got in zip(new, provision_many(self.cm, [self.stages(a) for a in new]), strict=True):
                self.memo[a] = got
        return [self.memo[a].money for a in assignments]

    def types_of(self, kind: str) -> list[int]:
        """Indices of the resource types of ``kind`` ('cpu' or 'gpu')."""
        return [i for i, t in enumerate(self.cm.types) if t.kind == kind]

    def plan(self, assignment: Sequence[int], units: Sequence[int]) -> ResourcePlan:
        names = [self.cm.types[a].name for a in assignment]
        return ResourcePlan.from_assignment(
            names, units, model=self.cm.model.name, cluster=self.cm.cluster.name
        )


@dataclass(frozen=True)
class ScheduleResult:
    """What a scheduler returns: the plan with its provisioning, money, throughput and time taken.

    ``plan`` is None when the scheduler found no schedule meeting the limit (``reason`` says why,
    naming the stage). ``complete`` is False when a time limit stopped an exhaustive method
    (``estimated_seconds`` extrapolates its full run); ``exact`` is True only when the method
    proves its answer optimal.
    """

    scheduler: str
    plan: ResourcePlan | None
    provisioning: tuple[int, ...]
    money: float
    throughput: float
    seconds: float
    evaluations: int
    reason: str = ""
    complete: bool = True
    exact: bool = False
    estimated_seconds: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def feasible(self) -> bool:
        return self.plan is not None


class Scheduler(ABC):
    """Schedules every layer of a model to a resource type (Formula 9) at the least money.

    Contract:
    - ``schedule(cost_model)`` returns a ``ScheduleResult``; it never raises for an infeasible
      throughput limit (the result has ``plan=None`` and a reason naming the stage).
    - The plan's stages are maximal runs and its units respect every type's count (Formula 11).
    - Seeded schedulers give the same plan for the same seed and cost model.
    - ``seconds`` is wall time of the whole call, model building excluded.
    - Not thread safe: one call at a time per instance.
    """

    #: Short name used by the benchmark.
    name: str = "scheduler"

    def schedule(self, cost_model: HeterogeneousCostModel) -> ScheduleResult:
        start = time.perf_counter()
        objective = Objective(cost_model)
        assignment, extra = self._search(objective)
        return self._result(objective, assignment, time.perf_counter() - start, **extra)

    @abstractmethod
    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        """The best assignment found (None: none feasible) and extra result fields."""

    def _result(
        self, objective: Objective, assignment: Assignment | None, seconds: float, **extra: object
    ) -> ScheduleResult:
        prov = objective(assignment) if assignment is not None else None
        if prov is None or not prov.feasible:
            reason = prov.reason if prov is not None else str(extra.pop("reason", "no feasible schedule"))
            extra.pop("reason", None)
            return ScheduleResult(
                self.name,
                None,
                (),
                math.inf,
                0.0,
                seconds,
                objective.evaluations,
                reason=reason,
                **extra,  # type: ignore[arg-type]
            )
        extra.pop("reason", None)
        return ScheduleResult(
            scheduler=self.name,
            plan=objective.plan(assignment, prov.units),  # type: ignore[arg-type]
            provisioning=prov.units,
            money=prov.money,
            throughput=prov.throughput,
            seconds=seconds,
            evaluations=objective.evaluations,
            **extra,  # type: ignore[arg-type]
        )


def best_of(objective: Objective, candidates: Sequence[Assignment]) -> Assignment | None:
    """The cheapest feasible candidate (first on ties), or None."""
    best: Assignment | None = None
    best_money = math.inf
    for a in candidates:
        m = objective.money(a)
        if m < best_money:
            best, best_money = a, m
    return best
