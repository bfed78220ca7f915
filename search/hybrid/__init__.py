"""Deciding hybrid plans on heterogeneous GPUs (Whale §3.3): intra- and inter-TaskGraph balancing.

Public API:
    memory_constrained_balance(profile, devices) -> Balance    Algorithm 1 (intra-TaskGraph shares)
    replicate_profile / split_profile / device_slots            its inputs from the memory and compute models
    stage_slots / balanced_partition / even_partition           inter-TaskGraph placement and layer cut
"""

from search.hybrid.balance import (
    Balance,
    DeviceSlot,
    InfeasibleBalance,
    Shift,
    TaskGraphProfile,
    even_shares,
    fits,
    memory_constrained_balance,
    proportional_shares,
)
from search.hybrid.memory import device_slots, replicate_profile, split_profile
from search.hybrid.placement import (
    InfeasiblePartition,
    Partition,
    StageSlot,
    balanced_partition,
    evaluate_partition,
    even_partition,
    stage_slots,
)

__all__ = [
    "Balance",
    "DeviceSlot",
    "InfeasibleBalance",
    "InfeasiblePartition",
    "Partition",
    "Shift",
    "StageSlot",
    "TaskGraphProfile",
    "balanced_partition",
    "device_slots",
    "evaluate_partition",
    "even_partition",
    "even_shares",
    "fits",
    "memory_constrained_balance",
    "proportional_shares",
    "replicate_profile",
    "split_profile",
    "stage_slots",
]
