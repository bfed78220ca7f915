"""Deciding hybrid plans on heterogeneous GPUs (Whale §3.3): intra- and inter-TaskGraph balancing.

Where it lives (docs/architecture.md, "Layout"): load balancers and partitioners *decide*, so they are in
``search/``; the step-time prediction they are judged by is ``simulator.hybrid`` (everything that
predicts a cost is in ``simulator/``). The memory model is ``search.feasibility.MemoryModel``
(parameters, gradients, optimizer state, activations stashed per schedule, buffers), the one the
sampler and the pipeline candidates use; every memory check here goes through it, so this package
is in ``search/`` where it can import it (``simulator`` may not import ``search``).

Public API:
    memory_constrained_balance(profile, devices) -> Balance    Algorithm 1 (intra-TaskGraph shares)
    replicate_profile / split_profile / device_slots            its inputs from the memory and compute models
    stage_slots / balanced_partition / even_partition           inter-TaskGraph placement and layer cut
    balanced_data_parallel / balanced_pipeline (+ even_*)        HybridPlans and their baselines
    memory_reasons(plan, memory)                                 the one memory check of a HybridPlan
    auto_partition(model, cluster, memory, global_batch) -> AutoPlan   TaskGraphs chosen from the hardware
    rank_plans(cfg, cluster, global_batch) -> [RankedPlan]       3D plans (TP x PP x DP, ZeRO, recompute) of a GPT
"""

from search.hybrid.auto import AutoCandidate, AutoPlan, auto_partition
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
from search.hybrid.memory import autocast_activation_factor, device_slots, replicate_profile, split_profile
from search.hybrid.placement import (
    InfeasiblePartition,
    Partition,
    StageSlot,
    balanced_partition,
    evaluate_partition,
    even_partition,
    stage_slots,
)
from search.hybrid.plans import (
    PipelineChoice,
    balanced_data_parallel,
    balanced_pipeline,
    data_parallel,
    even_data_parallel,
    even_pipeline,
    memory_reasons,
    pipeline,
)
from search.hybrid.threed import RankedPlan, enumerate_plans, rank_plans

__all__ = [
    "AutoCandidate",
    "AutoPlan",
    "Balance",
    "DeviceSlot",
    "InfeasibleBalance",
    "InfeasiblePartition",
    "Partition",
    "PipelineChoice",
    "RankedPlan",
    "Shift",
    "StageSlot",
    "TaskGraphProfile",
    "auto_partition",
    "autocast_activation_factor",
    "balanced_data_parallel",
    "balanced_partition",
    "balanced_pipeline",
    "data_parallel",
    "device_slots",
    "enumerate_plans",
    "evaluate_partition",
    "even_data_parallel",
    "even_partition",
    "even_pipeline",
    "even_shares",
    "fits",
    "memory_constrained_balance",
    "memory_reasons",
    "pipeline",
    "proportional_shares",
    "rank_plans",
    "replicate_profile",
    "split_profile",
    "stage_slots",
]
