"""AIBox's heuristic (Zhao et al. CIKM'19, as HeterPS describes it): embeddings on CPUs, the rest on GPUs.

Schedule: the leading run of embedding layers (at least the first layer) on the cheapest CPU
type, every other layer on one GPU type. Provisioning: AIBox's fixed ratio of 1 GPU to 6 CPU
cores (HeterPS Section 6.1), with the fewest GPUs g (and 6g cores) that meet the throughput limit
and the tables' memory within the counts. Decision: when the sparse tables need more cores' host
memory than 6g, the CPU stage gets that many (otherwise AIBox could not hold a large table). Every GPU type is tried; the cheapest result is kept.
(HeterPS Section 6.2 says "first layer in GPUs and the rest in CPUs"; its introduction and
AIBox itself put the first, sparse layer on CPUs, which is what we do.)
"""

from __future__ import annotations

import math
import time

from search.heterogeneous.base import Objective, Scheduler, ScheduleResult
from simulator.analytical.heterogeneous import HeterogeneousCostModel

CORES_PER_GPU = 6


class AIBoxScheduler(Scheduler):
    """Leading embeddings on CPU cores, the rest on GPUs, 1 GPU : 6 cores."""

    name = "aibox"

    def schedule(self, cost_model: HeterogeneousCostModel) -> ScheduleResult:
        start = time.perf_counter()
        objective = Objective(cost_model)
        cpus, gpus = objective.types_of("cpu"), objective.types_of("gpu")
        if not cpus or not gpus:
            return self._none(objective, start, "AIBox needs a CPU and a GPU resource type")
        cpu = min(cpus, key=lambda t: cost_model.types[t].price_per_hour)
        layers = cost_model.model.layers
        lead = 1
        while lead < len(layers) and layers[lead].kind == "embedding":
            lead += 1
        limit = cost_model.workload.throughput_limit
        best: ScheduleResult | None = None
        reasons = []
        for gpu in gpus:
            assignment = (cpu,) * lead + (gpu,) * (len(layers) - lead)
            stages = cost_model.stages(assignment)
            for g in range(1, int(cost_model.count[gpu]) + 1):
                units = [max(CORES_PER_GPU * g, s.min_units) if s.rtype == cpu else g for s in stages]
                if (
                    sum(k for s, k in zip(stages, units, strict=True) if s.rtype == cpu)
                    > cost_model.count[cpu]
                ):
                    reasons.append(
                        f"{cost_model.types[gpu].name}: {CORES_PER_GPU * g} cores exceed the CPU count"
                    )
                    break
                if any(k < s.min_units or not s.fits for s, k in zip(stages, units, strict=True)):
                    continue
                report = cost_model.report(stages, units)
                if report.throughput >= limit:
                    if best is None or report.money < best.money:
                        best = ScheduleResult(
                            self.name,
                            objective.plan(assignment, units),
                            tuple(units),
                            report.money,
                            report.throughput,
                            0.0,
                            len(gpus),
                        )
                    break
            else:
                reasons.append(
                    f"{cost_model.types[gpu].name}: all {cost_model.count[gpu]} GPUs do not reach {limit:g}"
                )
        if best is None:
            return self._none(objective, start, "; ".join(reasons) or "no GPU type meets the limit")
        return ScheduleResult(
            best.scheduler, best.plan, best.provisioning, best.money, best.throughput,
            time.perf_counter() - start, best.evaluations,
        )  # fmt: skip

    def _search(self, objective: Objective) -> tuple[None, dict[str, object]]:
        raise NotImplementedError("AIBox provisions by its own ratio; schedule() is overridden")

    def _none(self, objective: Objective, start: float, reason: str) -> ScheduleResult:
        return ScheduleResult(
            self.name, None, (), math.inf, 0.0, time.perf_counter() - start, 0, reason=reason
        )
