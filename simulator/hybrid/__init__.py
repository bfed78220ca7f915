"""The hybrid cost model (Whale plans): per-device compute, DP sync, pipeline length, split collectives.

Public API:
    predict(model, cluster, plan, params) -> HybridCost    one step of a HybridPlan
    collective_seconds / ring_gbps / stage_seconds           its parts
"""

from simulator.hybrid.cost import (
    HybridCost,
    TaskGraphCost,
    collective_seconds,
    predict,
    ring_gbps,
    stage_seconds,
)
from simulator.hybrid.sharding import ShardOp, shard_ops

__all__ = [
    "HybridCost",
    "ShardOp",
    "TaskGraphCost",
    "collective_seconds",
    "predict",
    "ring_gbps",
    "shard_ops",
    "stage_seconds",
]
