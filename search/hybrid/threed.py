"""Ranking 3D-parallel plans (TP x PP x DP, ZeRO stage, recompute, micro-batch) for a GPT on one node.

Enumerates every ``simulator.threed.ThreeDPlan`` whose degrees multiply to the GPUs used and divide
the model (heads by tp, layers by pp, the global batch by micro-batch x dp), drops those the
memory model (``simulator.threed.predict_memory``) says run out of memory on the cluster's GPU,
and orders the rest by predicted iteration time (``simulator.threed.predict``). Collectives: the
NVSwitch A100 curve from published nccl-tests figures on an A100 node, else a curve scaled to the
node's GPU-to-GPU link (``simulator.threed.nccl.curve_for_link``). One node only: plans spanning
nodes need the inter-node links in the collective model, which this does not have yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import product

from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, DeviceType
from simulator.threed import (
    A100_NVSWITCH,
    Collectives,
    FrameworkParams,
    GPTConfig,
    MemoryConfig,
    Recompute,
    ThreeDCost,
    ThreeDMemory,
    ThreeDPlan,
    predict,
    predict_memory,
)
from simulator.threed.nccl import curve_for_link


@dataclass(frozen=True)
class RankedPlan:
    """One candidate with its predicted time and memory."""

    plan: ThreeDPlan
    cost: ThreeDCost
    memory: ThreeDMemory

    @property
    def seconds(self) -> float:
        return self.cost.total


def node_of(cluster: ClusterSpec) -> tuple[DeviceType, int, Collectives]:
    """The device type, GPUs and collective model of the cluster's first node."""
    node = cluster.nodes[0]
    device = next(d for d in cluster.device_types if d.name == node.device)
    gbps = node.intra_gbps or cluster.intra_node_gbps
    curve = A100_NVSWITCH if device.name.startswith("A100") and gbps >= 2400 else curve_for_link(gbps)
    return device, node.gpus, Collectives(curve)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(
    cfg: GPTConfig,
    gpus: int,
    global_batch: int,
    *,
    micro_batches: Iterable[int] = (1, 2, 4, 8),
    zero_stages: Iterable[int] = (0, 1, 2, 3),
    recomputes: Iterable[Recompute] = ("none", "selective", "full"),
    fused_attention: Iterable[bool] = (False,),
) -> list[ThreeDPlan]:
    """Every plan on exactly ``gpus`` GPUs that shards ``cfg`` and makes ``global_batch``."""
    plans = []
    for tp, pp in product(_divisors(gpus), _divisors(gpus)):
        if gpus % (tp * pp) or cfg.heads % tp or cfg.layers % pp:
            continue
        dp = gpus // (tp * pp)
        for mb, zero, rec, fused in product(micro_batches, zero_stages, recomputes, fused_attention):
            if global_batch % (mb * dp) or (zero and dp == 1):
                continue
            plans.append(
                ThreeDPlan(
                    tp=tp,
                    pp=pp,
                    dp=dp,
                    micro_batch=mb,
                    num_micro_batches=global_batch // (mb * dp),
                    zero_stage=zero,
                    recompute=rec,
                    fused_attention=fused,
                )
            )
    return plans


def rank_plans(
    cfg: GPTConfig,
    cluster: ClusterSpec,
    global_batch: int,
    *,
    gpus: int | None = None,
    plans: Sequence[ThreeDPlan] | None = None,
    params: CostParams | None = None,
    framework: FrameworkParams | None = None,
    memory: MemoryConfig | None = None,
    keep_oom: bool = False,
) -> list[RankedPlan]:
    """Candidates fastest first; those predicted to run out of memory dropped (or last, ``keep_oom``)."""
    device, node_gpus, comms = node_of(cluster)
    n = gpus or node_gpus
    if not 1 <= n <= node_gpus:
        raise ValueError(f"gpus: must be 1..{node_gpus} (one node of {cluster.name}), got {n}")
    if global_batch < 1:
        raise ValueError(f"global_batch: must be >= 1, got {global_batch}")
    ranked = []
    for plan in plans if plans is not None else enumerate_plans(cfg, n, global_batch):
        mem = predict_memory(cfg, plan, device, memory)
        if not mem.fits and not keep_oom:
            continue
        ranked.append(RankedPlan(plan, predict(cfg, plan, device, comms, params, framework), mem))
    ranked.sort(key=lambda r: (not r.memory.fits, r.seconds))
    return ranked
