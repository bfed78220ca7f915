"""Algorithm 1 (Whale §3.3.1): hand-worked shares, shifts, the valley rule and infeasible input."""

from __future__ import annotations

import random

import pytest

from search.hybrid import (
    DeviceSlot,
    InfeasibleBalance,
    TaskGraphProfile,
    even_shares,
    fits,
    memory_constrained_balance,
    proportional_shares,
)


def affine(fixed: float, per_unit: float, units: int, granularity: int = 1) -> TaskGraphProfile:
    """Every device needs ``fixed + per_unit * u`` bytes for u units (a replica with its batch)."""
    return TaskGraphProfile(
        units=units, flop_per_unit=1.0, memory=lambda _i, u: fixed + per_unit * u, granularity=granularity
    )


def test_shares_are_proportional_to_capacity_when_memory_is_ample() -> None:
    devs = [DeviceSlot("a:0", 2.0, 1e9), DeviceSlot("b:0", 1.0, 1e9), DeviceSlot("b:1", 1.0, 1e9)]
    bal = memory_constrained_balance(affine(0, 1, 100), devs)
    assert bal.shares == (50, 25, 25) == bal.initial
    assert bal.shifts == ()
    # flop_utils = load · flop / DF: balanced compute times
    assert bal.flop_utils == pytest.approx((25.0, 25.0, 25.0))


def test_largest_remainder_rounding_and_granularity() -> None:
    assert proportional_shares(10, [1.0, 1.0, 1.0]) == [4, 3, 3]
    assert proportional_shares(12, [3.0, 1.0], granularity=4) == [8, 4]  # 2.25 / 0.75 blocks of 4
    assert even_shares(16, 3, granularity=2) == [6, 6, 4]
    with pytest.raises(ValueError, match="units: 10 is not a multiple of granularity 4"):
        proportional_shares(10, [1.0], granularity=4)


def test_overflow_moves_to_the_device_with_spare_memory() -> None:
    # fast a (DF 3) holds 1 + u <= 40 -> at most 39 units; slow b (DF 1) up to 99.
    devs = [DeviceSlot("a:0", 3.0, 40.0), DeviceSlot("b:0", 1.0, 100.0)]
    bal = memory_constrained_balance(affine(1, 1, 80), devs)
    assert bal.initial == (60, 20)
    assert bal.shares == (39, 41)
    assert [(s.peak, s.valley, s.units, s.success) for s in bal.shifts] == [("a:0", "b:0", 21, True)]
    assert max(bal.mem_utils) <= 1.0


def test_only_algorithm_1_fits_where_even_and_proportional_overflow() -> None:
    # a is fast and small, b slow and large: even gives a 50 (> 39), proportional 75 (> 39).
    devs = [DeviceSlot("a:0", 3.0, 40.0), DeviceSlot("b:0", 1.0, 100.0)]
    prof = affine(1, 1, 100)
    assert fits(prof, devs, even_shares(100, 2)) == ["a:0: 0.000 GB > 0.000 GB usable (50 units)"]
    assert fits(prof, devs, proportional_shares(100, [3.0, 1.0]))
    bal = memory_constrained_balance(prof, devs)
    assert bal.shares == (39, 61) and fits(prof, devs, bal.shares) == []


def test_partial_shifts_fill_several_valleys() -> None:
    # peak a needs to shed 30 units; valleys b and c have 12 and 50 spare; b is the emptier (valley first).
    devs = [DeviceSlot("a:0", 8.0, 20.0), DeviceSlot("b:0", 1.0, 17.0), DeviceSlot("c:0", 1.0, 60.0)]
    bal = memory_constrained_balance(affine(0, 1, 60), devs)
    assert bal.initial == (48, 6, 6)
    # both valleys have flop_util 6; b has the higher mem_util (6/17 > 6/60): c is the valley first
    assert [(s.valley, s.units, s.success) for s in bal.shifts] == [("c:0", 28, True)]
    assert bal.shares == (20, 6, 34)
    # c is the first valley (equal flop_utils 6, mem_util 12/30 < 6/10) but has 18 spare for 22:
    # it fills (a partial shift, c leaves free_devices) and b takes the remaining 4
    devs2 = [DeviceSlot("a:0", 7.0, 20.0), DeviceSlot("b:0", 1.0, 10.0), DeviceSlot("c:0", 2.0, 30.0)]
    bal2 = memory_constrained_balance(affine(0, 1, 60), devs2)
    assert bal2.initial == (42, 6, 12)
    assert [(s.valley, s.units, s.success) for s in bal2.shifts] == [("c:0", 18, False), ("b:0", 4, True)]
    assert bal2.shares == (20, 10, 30)


def test_valley_is_the_lowest_flop_load_among_free_devices() -> None:
    # b and c have room; c is faster, so with equal loads... its flop_util is lower: it receives.
    devs = [DeviceSlot("a:0", 10.0, 5.0), DeviceSlot("b:0", 1.0, 100.0), DeviceSlot("c:0", 4.0, 100.0)]
    bal = memory_constrained_balance(affine(0, 1, 15), devs)
    assert bal.initial == (10, 1, 4)
    # flop_utils: b 1/1 = 1, c 4/4 = 1 -> tie; mem_utils b 0.01 < c 0.04 -> b is the valley
    assert bal.shifts[0].valley == "b:0" and bal.shares == (5, 6, 4)


def test_infeasible_input_names_the_devices() -> None:
    devs = [DeviceSlot("a:0", 1.0, 10.0), DeviceSlot("b:0", 1.0, 10.0)]
    with pytest.raises(InfeasibleBalance, match=r"a:0 still needs .* \(11 units, at most 10\)"):
        memory_constrained_balance(affine(0, 1, 21), devs)
    with pytest.raises(InfeasibleBalance, match=r"devices: a:0 needs .* with no load"):
        memory_constrained_balance(affine(11, 1, 4), [DeviceSlot("a:0", 1.0, 10.0), DeviceSlot("b:0", 1, 99)])


@pytest.mark.parametrize(
    ("devices", "units", "field"),
    [
        ([DeviceSlot("a:0", 0.0, 1.0)], 4, "devices.a:0.flops"),
        ([DeviceSlot("a:0", 1.0, float("nan"))], 4, "devices.a:0.capacity"),
        ([DeviceSlot("a:0", 1.0, 1.0), DeviceSlot("a:0", 1.0, 1.0)], 4, "devices: duplicate"),
        ([], 4, "devices: a VirtualDevice"),
        ([DeviceSlot("a:0", 1.0, 1.0)], 0, "profile.units"),
    ],
)
def test_malformed_input_names_the_field(devices: list[DeviceSlot], units: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        memory_constrained_balance(affine(0, 1, max(units, 0)) if units else affine(0, 1, 0), devices)


def test_granularity_keeps_whole_micro_batches() -> None:
    devs = [DeviceSlot("a:0", 3.0, 41.0), DeviceSlot("b:0", 1.0, 1000.0)]
    bal = memory_constrained_balance(affine(0, 1, 96, granularity=8), devs)
    assert all(s % 8 == 0 for s in bal.shares) and sum(bal.shares) == 96
    assert bal.shares == (40, 56)


def test_random_inputs_fit_whenever_the_total_room_suffices() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 6)
        devs = [DeviceSlot(f"n{i}:0", rng.uniform(0.5, 5), rng.uniform(5, 60)) for i in range(n)]
        fixed, per = rng.uniform(0, 4), rng.uniform(0.2, 2)
        units = rng.randint(1, 120)
        prof = affine(fixed, per, units)
        room = sum(max(-1, int((d.capacity - fixed) // per)) for d in devs)
        feasible = all(d.capacity >= fixed for d in devs) and room >= units
        if feasible:
            bal = memory_constrained_balance(prof, devs)
            assert sum(bal.shares) == units and min(bal.shares) >= 0
            assert fits(prof, devs, bal.shares) == []
            # a device that was never OOM only gains load
            for i in range(n):
                if prof.memory(i, bal.initial[i]) <= devs[i].capacity:
                    assert bal.shares[i] >= bal.initial[i]
        else:
            with pytest.raises(InfeasibleBalance):
                memory_constrained_balance(prof, devs)
