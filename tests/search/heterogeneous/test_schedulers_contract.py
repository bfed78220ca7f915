"""Every layer scheduler honours one contract; the exact DP equals brute force; RL reaches it on small cases."""

from __future__ import annotations

import math
from functools import cache

import pytest

from search.heterogeneous import (
    AIBoxScheduler,
    BruteForceScheduler,
    ExactScheduler,
    GreedyScheduler,
    OptunaScheduler,
    RLConfig,
    RLScheduler,
    Scheduler,
    ScheduleResult,
    SingleTypeScheduler,
)
from search.heterogeneous.testing import random_problem


@cache
def _brute_force(seed: int, layers: int = 5) -> ScheduleResult:
    return BruteForceScheduler().schedule(random_problem(seed, layers=layers, gpu_types=2))


def _schedulers() -> list[Scheduler]:
    return [
        BruteForceScheduler(),
        ExactScheduler(),
        RLScheduler(RLConfig(rounds=30, plans_per_round=16), seed=1),
        OptunaScheduler("tpe", trials=40, seed=1),
        OptunaScheduler("gp", trials=12, seed=1),
        OptunaScheduler("nsga2", trials=60, seed=1),
        GreedyScheduler(),
        SingleTypeScheduler("cpu"),
        SingleTypeScheduler("gpu"),
        AIBoxScheduler(),
    ]


@pytest.mark.parametrize("scheduler", _schedulers(), ids=lambda s: s.name)
def test_every_scheduler_returns_a_valid_priced_plan(scheduler: Scheduler) -> None:
    cm = random_problem(0, layers=5, gpu_types=2)
    r = scheduler.schedule(cm)
    assert r.scheduler == scheduler.name and r.seconds >= 0
    if not r.feasible:
        assert r.reason and math.isinf(r.money)
        return
    assert r.plan is not None
    r.plan.check(cm.model, cm.cluster)  # stages maximal, counts respected (Formula 11)
    assert tuple(s.units for s in r.plan.stages) == r.provisioning
    report = cm.evaluate(r.plan)
    assert report.money == pytest.approx(r.money, rel=1e-9)
    assert report.throughput == pytest.approx(r.throughput, rel=1e-9)
    assert r.throughput >= cm.workload.throughput_limit
    assert r.money >= _brute_force(0).money * (1 - 1e-9)  # nothing beats the exhaustive answer


@pytest.mark.parametrize("seed", range(10))
def test_exact_dp_equals_brute_force(seed: int) -> None:
    cm = random_problem(seed, layers=5, gpu_types=2)
    bf = _brute_force(seed)
    dp = ExactScheduler().schedule(cm)
    assert bf.complete and bf.exact
    if not bf.feasible:
        assert not dp.feasible and dp.reason
        return
    assert dp.exact
    assert dp.money == pytest.approx(bf.money, rel=1e-9)


def test_seeded_schedulers_repeat_themselves() -> None:
    cm = random_problem(2, layers=5)
    for make in (
        lambda: RLScheduler(RLConfig(rounds=10, plans_per_round=8), seed=3),
        lambda: OptunaScheduler("nsga2", trials=30, seed=3),
    ):
        a, b = make().schedule(cm), make().schedule(cm)
        assert a.plan == b.plan and a.money == b.money


def test_rl_reaches_the_optimum_on_a_small_case() -> None:
    cm = random_problem(1, layers=5, gpu_types=2)
    bf = _brute_force(1)
    rl = RLScheduler(RLConfig(rounds=300, time_limit=30.0), seed=0).schedule(cm)
    assert bf.feasible and rl.money <= bf.money * 1.005


def test_brute_force_time_limit_extrapolates() -> None:
    cm = random_problem(4, layers=9, gpu_types=2)
    r = BruteForceScheduler(time_limit=0.2).schedule(cm)
    assert not r.complete and r.estimated_seconds is not None and r.estimated_seconds > 0.2


def test_an_impossible_limit_gives_no_plan_and_a_reason() -> None:
    cm = random_problem(5, limit_scale=1e4)
    for s in (ExactScheduler(), GreedyScheduler(), SingleTypeScheduler("gpu"), AIBoxScheduler()):
        r = s.schedule(cm)
        assert r.plan is None and math.isinf(r.money) and r.reason, s.name


def test_aibox_keeps_one_gpu_to_six_cores_above_the_tables_floor() -> None:
    cm = random_problem(0, layers=5, gpu_types=2)
    r = AIBoxScheduler().schedule(cm)
    assert r.plan is not None
    cpu, gpu = r.plan.stages
    assert cpu.resource_type == "cpu" and (cpu.first_layer, cpu.last_layer) == (0, 1)
    floor = cm.stage(0, 1, 0, cm.type_index[gpu.resource_type], None).min_units
    assert cpu.units == max(6 * gpu.units, floor)
    if gpu.units > 1:  # one GPU fewer (and its six cores) misses the limit
        stages = cm.plan_stages(r.plan)
        fewer = [max(6 * (gpu.units - 1), floor), gpu.units - 1]
        assert cm.report(stages, fewer).throughput < cm.workload.throughput_limit
