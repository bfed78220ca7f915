"""The hybrid cost model (Whale plans): per-device compute, DP sync, pipeline length, split collectives.

Public API:
    predict(model, cluster, plan, params) -> HybridCost    one step of a HybridPlan
    collective_seconds / ring_gbps / stage_seconds           its parts
    grad_buckets(model, first, last, cap)                    the DP all-reduce's buckets (runtime and model)
"""

from simulator.hybrid.buckets import BUCKET_BYTES, Bucket, grad_buckets
from simulator.hybrid.cost import (
    DeviceTimes,
    HybridCost,
    TaskGraphCost,
    collective_seconds,
    device_layer_times,
    predict,
    ring_gbps,
    stage_seconds,
)
from simulator.hybrid.sharding import ShardOp, shard_ops

__all__ = [
    "BUCKET_BYTES",
    "Bucket",
    "DeviceTimes",
    "HybridCost",
    "ShardOp",
    "TaskGraphCost",
    "collective_seconds",
    "device_layer_times",
    "grad_buckets",
    "predict",
    "ring_gbps",
    "shard_ops",
    "stage_seconds",
]
