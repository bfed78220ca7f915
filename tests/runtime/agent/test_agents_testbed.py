"""Trials on a pool of agents (issue 41): the API on the host, one agent per testbed namespace
(shaped links), every trial launched by torchrun across the agents, trained parameters equal to the
single-process reference (the executor correctness tests' reference and tolerance)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sqlalchemy import select

from runtime.executor.reference import GPU, correctness_cases, reference_sgd, tiny_model, two_by_two
from service.db.models import MeasurementRow, TrialRow
from simulator.spec import ClusterSpec, Node

STEPS, LR, SEED = 3, 0.1, 3
MODEL = tiny_model()
EXECUTOR = {"compute": "real", "warmup": 0, "iterations": STEPS, "lr": LR, "seed": SEED, "timeout_s": 60}


def four_by_one() -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device=GPU.name, gpus=1, nic_gbps=10.0) for i in range(4))
    return ClusterSpec(name="4x1", device_types=(GPU,), nodes=nodes, intra_node_gbps=100.0)


@pytest.mark.parametrize("cluster", [two_by_two(), four_by_one()], ids=["2-agents", "4-agents"])
def test_search_on_an_agent_pool_runs_every_trial_through_torchrun(
    pool_of: Any, cluster: ClusterSpec
) -> None:
    pool = pool_of(cluster, EXECUTOR)
    for node in range(len(cluster.nodes)):
        pool.start_agent(node)
    cases = correctness_cases(MODEL, "n0", "n1")
    names = [n for n, (_, cmp) in cases.items() if cmp == "sgd"][:2]
    trials = pool.search(MODEL, {n: cases[n][0] for n in names})

    def finished() -> list[Any] | None:
        with pool.sessions() as s, s.begin():
            rows = s.scalars(select(TrialRow).where(TrialRow.id.in_(list(trials.values())))).all()
            return list(rows) if all(r.state not in ("queued", "running") for r in rows) else None

    rows = pool.wait(finished, 240, "every trial finished")
    want = reference_sgd(MODEL, cluster.num_gpus, STEPS, LR, SEED, MODEL.batch_size)
    with pool.sessions() as s, s.begin():
        for row in rows:
            m = s.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == row.id)).one()
            assert row.state == "succeeded", m.failure
            env = m.body["environment"]
            # torchrun ran it (the old launcher records its class name and no run id)
            assert env["launcher"] == "torchrun" and env["torchrun_run_id"] == f"trial{row.id}-{row.attempt}"
            assert env["agents"] == sorted(n.name for n in cluster.nodes) or len(env["agents"]) == len(
                cluster.nodes
            )
            assert len(m.iteration_times) == STEPS
            for r in range(cluster.num_gpus):
                got = torch.load(pool.dump_dir / f"trial{row.id}_rank{r}.pt")
                for name, t in got.items():
                    assert torch.allclose(t, want[name], rtol=1e-5, atol=1e-6), (row.baseline, r, name)
