"""The user's own model on an agent pool (issue 41): a search created through the API names a model
factory outside the zoo (a small transformer with tied embeddings, ``factory_models.tiny_lm``); its
trials (baselines and sampled candidates, PS and all-reduce) run real forward and backward of that
module through torchrun across two agents in testbed namespaces, report peak memory and the probe,
and end with the parameters of single-process SGD on the same batches."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import torch
from sqlalchemy import select

from runtime.executor.reference import two_by_two
from runtime.executor.user_model import factory_spec, reference_sgd
from search.baselines import baseline_strategy
from search.samplers.uniform import UniformSampler
from search.space import Space
from service.db.models import MeasurementRow, RuntimeRecordRow, TrialRow

FACTORY = "tests.runtime.agent.factory_models:tiny_lm"
STEPS, LR, SEED, BATCH = 3, 0.05, 3, 4
EXECUTOR = {"compute": "real", "warmup": 0, "iterations": STEPS, "lr": LR, "seed": SEED, "timeout_s": 60}


def test_a_factory_search_trains_the_users_module_on_the_agents(pool_of: Any) -> None:
    cluster = two_by_two()
    model = factory_spec(FACTORY, BATCH)  # what `strategist import-model FACTORY --batch-size 4` writes
    pool = pool_of(cluster, EXECUTOR)
    for node in range(len(cluster.nodes)):
        pool.start_agent(node)
    # The API checks the factory's form (it never imports user code) and plan kind.
    bad = httpx.post(f"{pool.api}/api/v1/searches", headers={"Authorization": f"Bearer {pool.user_token}"},
                     json={"model": "tiny-mlp", "cluster": "two-node", "model_factory": "os.system"})  # fmt: skip
    assert bad.status_code == 422 and "model_factory" in bad.text, bad.text
    search = pool.api_search(model, model_factory=FACTORY)
    assert search["model_factory"] == FACTORY
    cluster = pool.cluster  # the pool's cluster as stored: the strategies are for it
    sampler = UniformSampler(Space(model, cluster), seed=SEED)
    rng = np.random.default_rng(SEED)
    strategies = {n: baseline_strategy(n, model, cluster) for n in ("horovod@64MiB", "ps-naive")}
    strategies.update({f"candidate-{i}": sampler.draw(rng) for i in range(2)})
    trials = pool.enqueue(search["id"], strategies)

    def finished() -> list[Any] | None:
        with pool.sessions() as s, s.begin():
            rows = s.scalars(select(TrialRow).where(TrialRow.id.in_(list(trials.values())))).all()
            return list(rows) if all(r.state not in ("queued", "running") for r in rows) else None

    rows = pool.wait(finished, 150, "every trial finished")
    want = reference_sgd(FACTORY, model, cluster.num_gpus, STEPS, LR, SEED, BATCH)
    reference_init = reference_sgd(FACTORY, model, cluster.num_gpus, 0, LR, SEED, BATCH)
    moved = max(float((want[n] - reference_init[n]).abs().max()) for n in want)
    assert moved > 1e-3  # the reference trains: equal parameters mean the same training
    peaks = {}
    with pool.sessions() as s, s.begin():
        for row in rows:
            m = s.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == row.id)).one()
            assert row.state == "succeeded", (row.baseline, m.failure)
            for r in range(cluster.num_gpus):  # first: the numbers (an ignored factory fails here)
                got = torch.load(pool.dump_dir / f"trial{row.id}_rank{r}.pt")
                assert set(got) == set(want)
                for name, t in got.items():
                    assert torch.allclose(t, want[name], rtol=1e-4, atol=1e-6), (row.baseline, r, name)
            env = m.body["environment"]
            assert env["launcher"] == "torchrun" and env["torchrun_run_id"] == f"trial{row.id}-{row.attempt}"
            assert env["model_factory"] == FACTORY
            assert env["peak_memory"] == "rss_high_water" and 50e6 < env["peak_memory_bytes"] < 8e9
            assert set(env["per_call_overhead_s"]) and all(v > 0 for v in env["per_call_overhead_s"].values())
            assert len(m.iteration_times) == STEPS and all(t > 0 for t in m.iteration_times)
            peaks[row.baseline] = env["peak_memory_bytes"]
            rec = s.scalars(select(RuntimeRecordRow).where(RuntimeRecordRow.trial_id == row.id)).one()
            assert rec.measured_on == {"site": "testbed", "pool": "lab", "gpu_types": [cluster.nodes[0].device],
                                       "torchrun_run_id": f"trial{row.id}-{row.attempt}"}  # fmt: skip
    print(f"\nuser-model trials: {len(rows)}, peak RSS per trial (MB): "
          + ", ".join(f"{k} {v / 1e6:.0f}" for k, v in sorted(peaks.items())))  # fmt: skip


def test_a_factory_that_is_not_the_searchs_model_fails_its_trial_naming_why(pool_of: Any) -> None:
    """The ranks check the module against the search's spec: another model is refused by variable."""
    cluster = two_by_two()
    model = factory_spec(FACTORY, BATCH)
    pool = pool_of(cluster, EXECUTOR)
    for node in range(len(cluster.nodes)):
        pool.start_agent(node)
    search = pool.api_search(model, model_factory=FACTORY.replace("tiny_lm", "tiny_lm_untied"))
    cluster = pool.cluster
    trials = pool.enqueue(search["id"], {"horovod@64MiB": baseline_strategy("horovod@64MiB", model, cluster)})
    search2 = pool.api_search(model, model_factory="tests.runtime.agent.no_such_module:make", name="missing")
    trials.update(
        pool.enqueue(search2["id"], {"missing": baseline_strategy("horovod@64MiB", model, cluster)})
    )

    def finished() -> list[Any] | None:
        with pool.sessions() as s, s.begin():
            rows = s.scalars(select(TrialRow).where(TrialRow.id.in_(list(trials.values())))).all()
            return list(rows) if all(r.state not in ("queued", "running") for r in rows) else None

    rows = {r.baseline: r for r in pool.wait(finished, 120, "both trials finished")}
    assert rows["horovod@64MiB"].state == "failed"
    assert "head.weight" in str(rows["horovod@64MiB"].failure_reason), rows["horovod@64MiB"].failure_reason
    assert rows["missing"].state == "failed"
    assert "cannot import" in str(rows["missing"].failure_reason), rows["missing"].failure_reason
