"""Whale's intra-TaskGraph load balancing: Algorithm 1 (memory-constrained load balancing, §3.3.1).

A TaskGraph's work is cut into ``units`` (samples of the global batch for ``replicate``, columns
of the split dimension for ``split``) and shared among the N devices of its VirtualDevice. Whale
minimises Σ_i |L_i − DF_i / Σ_j DF_j| subject to Σ_i L_i = 1 and each device's memory (Formula 1)
with Algorithm 1:

    lines 3-10   load_ratios[i] = DF_i / Σ DF;  mem_utils[i] = bytes(i) / DM_i;
                 flop_utils[i] = load_i · TG_flop / DF_i;  mem_utils > 1 -> oom_devices, else free
    lines 11-20  while oom_devices and free_devices:
                     peak   = argmax over oom_devices of mem_utils
                     valley = argmin over free_devices of (flop_utils, mem_utils)
                     if shift_load(peak, valley) succeeds: update the profile, pop peak from oom
                     else: pop valley from free

``shift_load`` (§3.3.1): the peak's load drops by b and the valley's rises by b, "b is the maximum
number that the valley_device will not go OOM after getting the load from the peak_device".

Decisions where the paper is silent (written here so a reader can check them):

- Loads are whole units (a batch is whole samples), in multiples of ``granularity`` (a
  micro-batch when shares must be whole micro-batches). The proportional start rounds
  DF_i / Σ DF · units by largest remainder (Hamilton), ties to the faster device.
- Memory is ``TaskGraphProfile.memory(i, units)``, the bytes device i needs for that load — the
  one memory model of ``search.feasibility`` (``search.hybrid.memory`` builds it) — and not the
  paper's linear L_i · TG_mem: a replica holds its parameters, gradients and optimizer state
  whatever its share; the paper's formula is the case with no fixed part.
- b = min(the peak's overflow, the valley's spare room), both in units. The shift *succeeds* when
  b covers the overflow (the peak now fits: it leaves oom_devices). Otherwise the valley takes
  b (its spare room, "the maximum number that will not go OOM"), is full, and the shift counts as
  a failure: the valley leaves free_devices and the peak stays. Moving the partial b is what makes
  the loop end with no OOM device whenever the free devices' total room covers the total overflow
  (with all-or-nothing shifts two half-empty valleys could not absorb one peak).
- A device left in oom_devices when free_devices runs out makes the input infeasible:
  ``InfeasibleBalance`` names the devices, their bytes and capacity.

Shapes: N devices; shares (N,) units summing to ``units``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class InfeasibleBalance(ValueError):
    """No share of the TaskGraph's units fits every device's memory (the message says where)."""


@dataclass(frozen=True)
class DeviceSlot:
    """One physical device of a VirtualDevice as Algorithm 1 sees it."""

    name: str  # 'node:gpu'
    flops: float  # DF_i: FLOP/s the device computes (peak or achieved, see search.hybrid.memory)
    capacity: float  # DM_i: usable bytes of its memory


@dataclass(frozen=True)
class TaskGraphProfile:
    """A TaskGraph as Algorithm 1 sees it: its work in units, FLOPs per unit and memory per load."""

    units: int  # total units shared among the devices (global batch samples, split-dim size)
    flop_per_unit: float  # TG_flop / units: training FLOPs (forward + backward) of one unit
    # bytes(device index, units) device i needs to hold the TaskGraph with that load; nondecreasing
    # in units (``search.hybrid.memory`` builds it from the shared memory model)
    memory: Callable[[int, int], float]
    granularity: int = 1  # loads are multiples of this (1 sample, or one micro-batch)


@dataclass(frozen=True)
class Shift:
    """One successful or partial ``shift_load`` of Algorithm 1 (a trace for tests and the dashboard)."""

    peak: str
    valley: str
    units: int
    success: bool


@dataclass(frozen=True)
class Balance:
    """Algorithm 1's answer: units per device, the proportional start and the shifts that led there."""

    devices: tuple[str, ...]
    shares: tuple[int, ...]  # final units per device
    initial: tuple[int, ...]  # the capacity-proportional start (lines 3-4)
    mem_utils: tuple[float, ...]  # bytes / capacity per device under ``shares``
    flop_utils: tuple[float, ...]  # seconds of FLOPs per device under ``shares`` (load · TG_flop / DF)
    shifts: tuple[Shift, ...]

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.devices, self.shares, strict=True))


def _check(profile: TaskGraphProfile, devices: Sequence[DeviceSlot]) -> None:
    if not devices:
        raise ValueError("devices: a VirtualDevice needs at least one device")
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"devices: duplicate device names in {names}")
    for d in devices:
        if not (d.flops > 0 and math.isfinite(d.flops)):
            raise ValueError(f"devices.{d.name}.flops: must be a finite number > 0, got {d.flops}")
        if not (d.capacity > 0 and math.isfinite(d.capacity)):
            raise ValueError(f"devices.{d.name}.capacity: must be a finite number > 0, got {d.capacity}")
    if profile.granularity < 1:
        raise ValueError(f"profile.granularity: must be >= 1, got {profile.granularity}")
    if profile.units < 1 or profile.units % profile.granularity:
        raise ValueError(
            f"profile.units: must be a positive multiple of granularity {profile.granularity}, "
            f"got {profile.units}"
        )
    if not (profile.flop_per_unit >= 0 and math.isfinite(profile.flop_per_unit)):
        raise ValueError(f"profile.flop_per_unit: must be a finite number >= 0, got {profile.flop_per_unit}")


def proportional_shares(units: int, weights: Sequence[float], granularity: int = 1) -> list[int]:
    """``units`` cut in proportion to ``weights`` in multiples of ``granularity`` (largest remainder).

    Ties in the remainder go to the larger weight, then to the earlier device.
    """
    if any(not (w > 0 and math.isfinite(w)) for w in weights):
        raise ValueError(f"weights: must be finite numbers > 0, got {list(weights)}")
    if units % granularity:
        raise ValueError(f"units: {units} is not a multiple of granularity {granularity}")
    blocks = units // granularity
    total = sum(weights)
    exact = [blocks * w / total for w in weights]
    base = [math.floor(x) for x in exact]
    left = blocks - sum(base)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - base[i]), -weights[i], i))
    for i in order[:left]:
        base[i] += 1
    return [b * granularity for b in base]


def even_shares(units: int, n: int, granularity: int = 1) -> list[int]:
    """The homogeneous default: ``units`` cut as evenly as whole ``granularity`` blocks allow."""
    return proportional_shares(units, [1.0] * n, granularity)


def max_units(profile: TaskGraphProfile, device: int, capacity: float) -> int:
    """The largest load (a multiple of granularity, ≤ units) device ``device`` holds; −1 if not even 0."""
    g = profile.granularity
    if profile.memory(device, 0) > capacity:
        return -1
    lo, hi = 0, profile.units // g  # in blocks; lo fits
    if profile.memory(device, hi * g) <= capacity:
        return hi * g
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if profile.memory(device, mid * g) <= capacity:
            lo = mid
        else:
            hi = mid
    return lo * g


def memory_constrained_balance(profile: TaskGraphProfile, devices: Sequence[DeviceSlot]) -> Balance:
    """Algorithm 1 of Whale: capacity-proportional shares, load moved off devices that would OOM.

    Raises ``InfeasibleBalance`` when the devices' memory cannot hold the TaskGraph under any
    share, and ValueError naming the field for malformed input.
    """
    _check(profile, devices)
    n = len(devices)
    names = tuple(d.name for d in devices)
    df = [d.flops for d in devices]
    cap = [d.capacity for d in devices]
    limit = [max_units(profile, i, cap[i]) for i in range(n)]
    if min(limit) < 0:
        bad = [i for i in range(n) if limit[i] < 0]
        raise InfeasibleBalance(
            "devices: "
            + ", ".join(
                f"{names[i]} needs {profile.memory(i, 0) / 1e9:.3f} GB with no load "
                f"> {cap[i] / 1e9:.3f} GB usable"
                for i in bad
            )
            + " (parameters, gradients and optimizer state alone do not fit)"
        )

    # lines 3-10: proportional start and the profile
    load = proportional_shares(profile.units, df, profile.granularity)
    initial = tuple(load)

    def mem_util(i: int) -> float:
        return profile.memory(i, load[i]) / cap[i]

    def flop_util(i: int) -> float:
        return load[i] * profile.flop_per_unit / df[i]

    oom = [i for i in range(n) if mem_util(i) > 1]
    free = [i for i in range(n) if mem_util(i) <= 1]
    shifts: list[Shift] = []
    # lines 11-20
    while oom and free:
        peak = max(oom, key=lambda i: (mem_util(i), -i))
        valley = min(free, key=lambda i: (flop_util(i), mem_util(i), i))
        need = load[peak] - limit[peak]
        spare = limit[valley] - load[valley]
        b = min(need, max(spare, 0))
        load[peak] -= b
        load[valley] += b
        success = b == need
        if b or success:
            shifts.append(Shift(names[peak], names[valley], b, success))
        if success:
            oom.remove(peak)
        else:
            free.remove(valley)
    if oom:
        raise InfeasibleBalance(
            "devices: no share of "
            f"{profile.units} units fits; after every free device is full "
            + ", ".join(
                f"{names[i]} still needs {profile.memory(i, load[i]) / 1e9:.3f} GB "
                f"> {cap[i] / 1e9:.3f} GB usable ({load[i]} units, at most {limit[i]})"
                for i in sorted(oom)
            )
        )
    return Balance(
        devices=names,
        shares=tuple(load),
        initial=initial,
        mem_utils=tuple(mem_util(i) for i in range(n)),
        flop_utils=tuple(flop_util(i) for i in range(n)),
        shifts=tuple(shifts),
    )


def fits(profile: TaskGraphProfile, devices: Sequence[DeviceSlot], shares: Sequence[int]) -> list[str]:
    """Devices whose memory ``shares`` overflow, as 'name: X GB > Y GB' (empty: every device fits)."""
    return [
        f"{d.name}: {profile.memory(i, s) / 1e9:.3f} GB > {d.capacity / 1e9:.3f} GB usable ({s} units)"
        for i, (d, s) in enumerate(zip(devices, shares, strict=True))
        if profile.memory(i, s) > d.capacity
    ]
