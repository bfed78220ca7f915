"""Provisioning (HeterPS Section 5.1): exact against enumeration, Formulas 13-14, the Newton step."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from search.heterogeneous.base import Objective
from search.heterogeneous.provisioning import (
    balanced_units,
    max_throughput,
    provision,
    provision_many,
    real_units,
    units_needed,
)
from search.heterogeneous.testing import random_problem


def _enumerate(cm, stages):  # type: ignore[no-untyped-def]
    """Least money over every integer unit vector within the counts (the definition)."""
    best = math.inf
    ranges = [range(1, int(cm.count[s.rtype]) + 1) for s in stages]
    for units in itertools.product(*ranges):
        used: dict[int, int] = {}
        for s, k in zip(stages, units, strict=True):
            used[s.rtype] = used.get(s.rtype, 0) + k
        if any(n > cm.count[t] for t, n in used.items()):
            continue
        if any(k < s.min_units or not s.fits for s, k in zip(stages, units, strict=True)):
            continue
        r = cm.report(stages, units)
        if r.throughput >= cm.workload.throughput_limit:
            best = min(best, r.money)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_provision_equals_enumerating_every_integer_provisioning(seed: int) -> None:
    cm = random_problem(seed, layers=4, gpu_types=2)
    cm.count[0] = min(int(cm.count[0]), 60)  # keep the enumeration small
    for assignment in [(0, 1, 1, 1), (1, 1, 2, 2), (0, 2, 1, 2), (2, 2, 2, 2)]:
        stages = cm.stages(assignment)
        got = provision(cm, stages)
        want = _enumerate(cm, stages)
        if math.isinf(want):
            assert not got.feasible and got.reason
        else:
            assert got.money == pytest.approx(want, rel=1e-9), assignment
            assert cm.report(stages, got.units).money == pytest.approx(got.money, rel=1e-9)


def test_formula_14_is_the_least_integer_meeting_the_throughput() -> None:
    cm = random_problem(3)
    for stage in cm.stages((0, 1, 1, 2, 2)):
        for theta in (1e4, 5e4, 2e5):
            k = units_needed(stage, theta)
            if k is None:
                assert math.isinf(real_units(stage, theta)) or not stage.fits
                continue
            assert stage.throughput(k) >= theta
            assert k == stage.min_units or stage.throughput(k - 1) < theta


def test_formula_13_balances_a_stage_to_the_first_ones_throughput() -> None:
    cm = random_problem(4)
    first, other = cm.stages((1, 1, 2, 2, 2))
    for k1 in (1.0, 2.0, 3.5):
        k_i = balanced_units(other, first, k1)
        # Formula 13 equalises computation times: CT_i(k_i) = CT_1(k_1).
        assert other.ct(k_i) == pytest.approx(first.ct(k1), rel=1e-9)


def test_newton_step_finds_where_a_type_runs_out() -> None:
    cm = random_problem(5)
    stages = cm.stages((1, 1, 1, 2, 2))
    theta = max_throughput(stages, [int(c) for c in cm.count])
    for t in {s.rtype for s in stages}:
        need = sum(real_units(s, theta) for s in stages if s.rtype == t)
        assert need <= cm.count[t] * (1 + 1e-6)
    binding = [sum(real_units(s, theta * (1 + 1e-5)) for s in stages if s.rtype == t) for t in (1, 2)]
    assert any(b > cm.count[t] for b, t in zip(binding, (1, 2), strict=True))


def test_an_unreachable_limit_names_the_stage() -> None:
    cm = random_problem(6, limit_scale=1e4)
    got = provision(cm, cm.stages((0, 1, 1, 1, 1)))
    assert not got.feasible and got.stage is not None
    assert got.reason.startswith(f"stage {got.stage} (layers ")


@pytest.mark.parametrize("seed", range(6))
def test_provision_many_gives_provisions_numbers_to_the_last_bit(seed: int) -> None:
    """The batched level search: the same units, throughput, money and reasons as one at a time,
    on schedules of 1-8 stages, feasible or not (the padding of short schedules must not leak)."""
    rng = random.Random(seed)
    for limit_scale in (0.3, 1.0, 3.0):
        cm = random_problem(seed, layers=8, gpu_types=3, limit_scale=limit_scale)
        schedules = [tuple(rng.randrange(cm.num_types) for _ in range(cm.num_layers)) for _ in range(60)]
        schedules += [(0,) * cm.num_layers, tuple(i % cm.num_types for i in range(cm.num_layers))]
        stages = [cm.stages(a) for a in schedules]
        one = [provision(cm, s) for s in stages]
        assert provision_many(cm, stages) == one
        assert sum(p.feasible for p in one) > 0 or limit_scale > 1
        objective = Objective(cm)
        assert objective.money_many(schedules) == [p.money for p in one]
        assert objective.evaluations == len(set(schedules))
