"""The executor issues exactly the collective calls the cost model charges for (simulator.spec.comm).

Every collective unit of random strategies is run through the executor's own ``run_collective``
with torch.distributed replaced by a recorder (no processes: the calls are counted, all-gathers
return copies of the input), on the leader of a multi-node cluster so that hierarchical
all-reduces issue all three of their calls. The counts must equal ``comm.primitive_calls`` for
the unit's parts, and the analytical cost model's calls (``encode``: one per unit and op, run
``call_repeats`` times) must be the same units with the same number of runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

from runtime.executor import collective
from runtime.executor.groups import CommGroups
from runtime.executor.layout import RankLayout
from runtime.executor.plan import CollectiveUnit, build_plan, unsupported_reason
from runtime.executor.powersgd import PowerSGD
from runtime.executor.shards import ReplayShards, powersgd_rank
from simulator.analytical import cluster_arrays, encode, model_arrays
from simulator.analytical.arrays import OP_NAMES
from simulator.analytical.testing import make_cluster, make_model, random_strategies
from simulator.spec import CollectiveSync, Compressor, Strategy, Variable, VariableStrategy, comm
from simulator.spec.strategy import Partition


class Recorder:
    """Stands in for ``torch.distributed`` inside runtime.executor.collective; counts calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def all_reduce(self, t: torch.Tensor, group: Any = None) -> None:
        self.calls["allreduce"] += 1

    def reduce(self, t: torch.Tensor, dst: int, group: Any = None) -> None:
        self.calls["allreduce"] += 1  # a hierarchical all-reduce's first pass

    def broadcast(self, t: torch.Tensor, src: int, group: Any = None) -> None:
        self.calls["allreduce"] += 1  # its last pass

    def all_gather(self, out: list[torch.Tensor], t: torch.Tensor, group: Any = None) -> None:
        self.calls["allgather"] += 1
        for o in out:
            o.copy_(t)


def model_with_every_kind() -> Any:
    return make_model(
        [
            Variable(name="emb", shape=(4000, 32), sparse=True, density=0.05),
            Variable(name="w1", shape=(256, 128)),
            Variable(name="w2", shape=(64, 64)),
            Variable(name="b", shape=(8, 4)),
            Variable(name="w3", shape=(128, 512)),
        ]
    )


def handmade(model: Any) -> list[Strategy]:
    """Units mixing plain, PowerSGD and sparse parts in one merge group, both algorithms."""

    def sync(alg: str, kind: str = "none", rank: int | None = None) -> CollectiveSync:
        return CollectiveSync(group=0, algorithm=alg, compressor=Compressor(kind=kind, rank=rank))

    out = []
    for alg in ("ring", "hierarchical"):
        ps4 = sync(alg, "powersgd", 4)
        vs = (
            VariableStrategy(variable="emb", partition=Partition(axis=0, shards=1), shards=(sync(alg),)),
            VariableStrategy(variable="w1", partition=Partition(axis=0, shards=1), shards=(ps4,)),
            # w2 at rank 4 is compressed too; b (8 x 4) would not shrink: the same unit sends it plain
            VariableStrategy(variable="w2", partition=Partition(axis=0, shards=1), shards=(ps4,)),
            VariableStrategy(variable="b", partition=Partition(axis=0, shards=1), shards=(ps4,)),
            VariableStrategy(
                variable="w3", partition=Partition(axis=1, shards=2), shards=(sync(alg), sync(alg))
            ),
        )
        out.append(Strategy(variables=vs))
    return out


def executor_calls(
    model: Any, cluster: Any, s: Strategy, monkeypatch: pytest.MonkeyPatch
) -> list[Counter[str]]:
    """The backend calls the executor issues for each collective unit of ``s``, in unit order."""
    plan = build_plan(model, cluster, s)
    layout = RankLayout(cluster)
    g = CommGroups(layout=layout, rank=layout.leader(1), device=torch.device("cpu"))
    g.workers = g.intra = g.leaders = object()  # type: ignore[assignment]
    tensors = ReplayShards(plan, scale=1.0, seed=0, rank=0, device=torch.device("cpu"))
    psgd = PowerSGD(plan, 0, torch.device("cpu"))
    rec = Recorder()
    monkeypatch.setattr(collective, "dist", rec)
    out = []
    for unit in plan.units:
        if isinstance(unit, CollectiveUnit):
            rec.calls = Counter()
            collective.run_collective(unit, plan, tensors, g, psgd, lr=0.1)
            out.append(rec.calls)
    return out


def expected_calls(plan_unit: CollectiveUnit, plan: Any) -> Counter[str]:
    shards = [plan.shards[s] for s in plan_unit.shards]
    lowrank = [powersgd_rank(sh) is not None for sh in shards]
    return Counter(
        comm.primitive_calls(
            plan_unit.algorithm,
            plain=any(not sh.sparse and not lr for sh, lr in zip(shards, lowrank, strict=True)),
            lowrank=any(lowrank),
            sparse=any(sh.sparse for sh in shards),
        )
    )


def cost_model_calls(model: Any, cluster: Any, s: Strategy) -> Counter[str]:
    """All backend calls the cost model charges for ``s``: per call, runs × calls per run."""
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, [s])
    total: Counter[str] = Counter()
    for g in range(len(b.call_strategy)):
        op = OP_NAMES[int(b.call_op[g])]
        if op == "allgather":
            total["allgather"] += comm.SPARSE_ALLGATHERS * int(b.call_repeats[g])
        else:
            alg = "hierarchical" if op == "allreduce-hierarchical" else "ring"
            total["allreduce"] += comm.calls_per_allreduce(alg) * int(b.call_repeats[g])
    return total


def test_executor_calls_match_the_shared_description_and_the_cost_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = model_with_every_kind()
    cluster = make_cluster([2, 2])
    runnable = [s for s in random_strategies(model, cluster, 80, seed=3) if unsupported_reason(s) is None]
    strategies = handmade(model) + runnable
    kinds_seen: set[tuple[str, bool, bool, bool]] = set()
    for s in strategies:
        s.check(model, cluster)
        plan = build_plan(model, cluster, s)
        issued = executor_calls(model, cluster, s, monkeypatch)
        units = [u for u in plan.units if isinstance(u, CollectiveUnit)]
        for unit, got in zip(units, issued, strict=True):
            assert got == expected_calls(unit, plan), (s.model_dump(), unit)
            e = expected_calls(unit, plan)
            kinds_seen.add((unit.algorithm, "allgather" in e, unit.compressor.kind == "powersgd", bool(e)))
        assert sum(issued, Counter()) == cost_model_calls(model, cluster, s)
    # the strategies exercised both algorithms with sparse and PowerSGD parts
    assert {k[0] for k in kinds_seen} == {"ring", "hierarchical"}
    assert any(k[1] for k in kinds_seen) and any(k[2] for k in kinds_seen)


@pytest.mark.parametrize("rows,cols", [(1000, 250), (64, 64), (300, 3), (5, 5), (1, 64), (4096, 1)])
@pytest.mark.parametrize("rank", [1, 2, 4, 16, 200])
def test_powersgd_rule_is_torchs_should_compress(rows: int, cols: int, rank: int) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    eff = min(rows, cols, rank)
    want = eff if _should_compress(rows, cols, eff, 1.0)[0] else None
    assert comm.powersgd_rank(rows, cols, rank) == want
    arr = comm.powersgd_rank(np.array([rows]), np.array([cols]), np.array([rank]))
    assert int(arr[0]) == (want or 0)
