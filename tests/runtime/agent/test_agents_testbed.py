"""Trials on a pool of agents (issue 41): the API on the host, one agent per testbed namespace
(shaped links), a search created through the API and planned by the search loop, every trial
launched by torchrun across the agents (its record carries the torchrun run id), trained parameters
equal to the single-process reference (the executor correctness tests' reference and tolerance)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import torch
from sqlalchemy import select

from runtime.executor.reference import GPU, reference_sgd, tiny_model, two_by_two
from search.baselines import baseline_names
from service.db.models import MeasurementRow, RuntimeRecordRow, TrialRow
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
    """A search created through the API (POST /searches) on the pool's cluster, planned by the
    search loop (every baseline member and a round's candidate), every trial run by torchrun."""
    pool = pool_of(cluster, EXECUTOR, loop=True)
    for node in range(len(cluster.nodes)):
        pool.start_agent(node)
    search = pool.api_search(MODEL, trial_budget=1, candidates_per_round=1, samples_per_round=20, seed=SEED)

    def finished() -> dict[str, Any] | None:
        r = httpx.get(f"{pool.api}/api/v1/searches/{search['id']}", headers=pool.auth, timeout=30)
        body = dict(r.json())
        return body if body["search"]["state"] in ("completed", "failed", "cancelled") else None

    done = pool.wait(finished, 600, "the search completed")
    assert done["search"]["state"] == "completed", done["search"]["failure_reason"]
    want = reference_sgd(MODEL, cluster.num_gpus, STEPS, LR, SEED, MODEL.batch_size)
    with pool.sessions() as s, s.begin():
        rows = s.scalars(select(TrialRow).where(TrialRow.search_id == search["id"])).all()
        assert sorted(r.baseline for r in rows if r.baseline) == sorted(baseline_names())
        assert sum(1 for r in rows if r.candidate_id is not None) == 1
        for row in rows:
            m = s.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == row.id)).one()
            assert row.state == "succeeded", m.failure
            run_id = f"trial{row.id}-{row.attempt}"
            env = m.body["environment"]
            # torchrun ran it (the old launcher records its class name and no run id)
            assert env["launcher"] == "torchrun" and env["torchrun_run_id"] == run_id
            assert sorted(env["agents"]) == sorted(n.name for n in cluster.nodes)
            assert len(m.iteration_times) == STEPS
            rec = s.scalars(select(RuntimeRecordRow).where(RuntimeRecordRow.trial_id == row.id)).one()
            assert rec.measured_on is not None and rec.measured_on["torchrun_run_id"] == run_id
            assert rec.measured_on["site"] == "testbed" and rec.measured_on["pool"] == "lab"
            for r in range(cluster.num_gpus):
                got = torch.load(pool.dump_dir / f"trial{row.id}_rank{r}.pt")
                for name, t in got.items():
                    assert torch.allclose(t, want[name], rtol=1e-5, atol=1e-6), (row.baseline, r, name)
    print(
        f"\n{len(cluster.nodes)} agents: {len(rows)} trials through torchrun, every record's run id checked"
    )
