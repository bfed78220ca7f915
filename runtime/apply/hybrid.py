"""Hybrid plans (Whale) applied to the user's module: uneven data parallelism through GradientSync.

A hybrid plan whose TaskGraphs are all ``replicate`` over every device, with the same per-device
batch shares in each (what the hybrid search's hardware-aware DP produces: Algorithm 1's shares
on mixed GPUs), is data parallelism with uneven shares: rank r trains on ``s_r`` of the step's
``G`` rows. Its gradient is the mean over its own rows; :class:`~runtime.apply.sync.GradientSync`
averages over the W ranks (one ring all-reduce group over every variable), so each rank's
gradient is weighted by ``W * s_r / G`` before it is synchronised (a tensor hook that runs before
autograd accumulates it): the average of the weighted gradients is the share-weighted mean, the
gradient of the mean loss over the global batch, exactly as ``runtime/hybrid`` decides for its
replicate TaskGraphs. The trials' synchronisation code (and the executor's mutation switch) is
therefore on this path.

Refused with the reason named (``PlanMismatch``), before any process group is touched: ``split``
TaskGraphs (tensor sharding of the user's layers is not applied), nested data parallelism over a
plan of several TaskGraphs with different device sets, pipelined hybrid plans
(``num_micro_batches > 1``: export the search as a pipeline plan), TaskGraphs whose shares differ
(rows would move between devices at the TaskGraph boundary: Whale's bridges), and TaskGraphs that
leave a device out.
"""

from __future__ import annotations

from runtime.apply.checks import PlanMismatch
from simulator.spec import CollectiveSync, Strategy, VariableStrategy
from simulator.spec.hybrid import HybridPlan, device_name


def hybrid_plan(plan: dict[str, object]) -> HybridPlan:
    doc = {k: v for k, v in plan.items() if k != "profiles"}  # the replay's profiles: not needed here
    return HybridPlan.model_validate(doc)


def rank_shares(hp: HybridPlan, devices: list[str]) -> list[int]:
    """Samples per step of each rank (``devices``: 'node:gpu' in rank order); PlanMismatch names what
    apply_plan does not apply."""
    if hp.num_micro_batches > 1:
        raise PlanMismatch(
            f"num_micro_batches: {hp.num_micro_batches}; a pipelined hybrid plan is not applied as hybrid "
            "(export the search as a pipeline plan)"
        )
    shares: dict[str, int] | None = None
    for t, tg in enumerate(hp.task_graphs):
        if tg.primitive != "replicate":
            raise PlanMismatch(
                f"task_graphs.{t}: {tg.primitive}({tg.degree}); tensor-split TaskGraphs are not applied "
                "(only replicate)"
            )
        mine = hp.device_shares(t)
        if set(mine) != set(devices):
            missing = sorted(set(devices) - set(mine))
            raise PlanMismatch(
                f"task_graphs.{t}: runs on {len(mine)} of the {len(devices)} devices"
                + (f" (not on {missing[0]})" if missing else "")
                + "; only TaskGraphs replicated over every device are applied"
            )
        if shares is not None and mine != shares:
            raise PlanMismatch(
                f"task_graphs.{t}: its batch shares differ from task_graphs.0's; moving rows between "
                "TaskGraphs (Whale's bridges) is not applied"
            )
        shares = mine
    assert shares is not None
    if sum(shares.values()) != hp.global_batch:
        raise PlanMismatch(f"batch_shares: sum to {sum(shares.values())}, global_batch is {hp.global_batch}")
    return [shares[d] for d in devices]


def allreduce_strategy(variables: list[str]) -> Strategy:
    """Every variable in one ring all-reduce group (the hybrid runtime's DP sync of a replicate TaskGraph)."""
    return Strategy(
        variables=tuple(
            VariableStrategy(variable=v, shards=(CollectiveSync(group=0, algorithm="ring"),))
            for v in variables
        )
    )


def devices_in_rank_order(cluster: object) -> list[str]:
    from simulator.spec.cluster import ClusterSpec

    assert isinstance(cluster, ClusterSpec)
    return [device_name(cluster, r) for r in range(cluster.num_gpus)]
