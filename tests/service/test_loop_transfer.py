"""The transfer path of the loop's scorer choice: pretrained ("*") and fine-tuned versions, the
fallback rule recorded with each, and the hybrid round scorer the loop then uses.

Runtimes are synthetic (plumbing): the analytical prediction times a per-strategy factor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from search import make_sampler
from search.round import AnalyticalScorer, SampleBatch
from service.db import repository as repo
from service.loop.simulators import (
    ALL_DOMAINS,
    BLEND,
    TRANSFER,
    RetrainConfig,
    Retrainer,
    load_scorer,
    usable_version,
)
from simulator.analytical import AnalyticalSimulator
from simulator.learned.scoring import HybridScorer


def _ingest(sessions: sessionmaker[Session], search: Any, n: int, spread: float) -> list[Any]:
    with sessions() as s:
        model = repo.get_spec(s, spec_id=search.model_spec_id, viewer_id=None).model_spec()
        cluster = repo.get_spec(s, spec_id=search.cluster_spec_id, viewer_id=None).cluster_spec()
    strategies = make_sampler("constrained", model, cluster, 0).sample(n)
    predicted = AnalyticalSimulator().predict(model, cluster, strategies)
    rng = np.random.default_rng(1)
    with sessions() as s:
        # an admin's runtimes train the shared simulators; a user's uploads do not (issue 44)
        admin = repo.create_token(s, name="ops", role="admin").info.user_id
        for strategy, t in zip(strategies, predicted, strict=True):
            times = [float(t) * float(rng.uniform(1.0, spread)) * 1e3] * 3
            repo.ingest_runtime(
                s, model_name=model.name, cluster_name=cluster.name, strategy=strategy,
                iteration_times=times, user_id=admin,
            )  # fmt: skip
    return [model, cluster, strategies]


def test_transfer_retrain_registers_pretrained_and_fine_tuned_versions(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    model, cluster, strategies = _ingest(sessions, search, 30, spread=1.05)
    registry = tmp_path / "simulators"
    retrainer = Retrainer(sessions, registry, RetrainConfig(transfer_members=3))
    assert retrainer.config.kind == TRANSFER  # the default

    version = retrainer.retrain(search.domain)

    # 25 distinct strategies (< ResidualConfig.min_line): the domain's version is the blend.
    assert version is not None and version.kind == BLEND and version.domain == search.domain
    with sessions() as s:
        pretrained = repo.latest_simulator_version(s, domain=ALL_DOMAINS, kind=TRANSFER)
        records = repo.list_runtimes(s, domain=search.domain)
    assert pretrained is not None and (registry / pretrained.path / "meta.json").is_file()
    # One domain only: no leave-one-domain-out evidence, so the pretrained version says analytical.
    assert pretrained.metrics["decision"]["choice"] == "analytical"
    assert pretrained.metrics["decision"]["evidence"] == "lodo"
    decision = version.metrics["decision"]
    distinct = len({s.model_dump_json() for s in strategies})
    assert decision["evidence"] == "few" and decision["strategies"] == version.n_records == distinct
    # Provenance: the registry's metadata names the database records that trained the version.
    from simulator.learned import Registry

    info = Registry(registry).info(version.path)
    (entry,) = info.domains
    assert entry["name"] == f"service/{search.domain}"
    assert entry["runtime_record_ids"] == sorted(r.id for r in records)
    assert len(entry["strategy_keys_sha256"]) == distinct
    # The loop's choice follows the recorded rule, and a learned choice is the hybrid scorer.
    with sessions() as s:
        used = usable_version(s, search.domain, registry)
    if decision["choice"] == "learned":
        assert used == version
        scorer, loaded = load_scorer(used, registry)
        assert isinstance(scorer, HybridScorer) and loaded == version
        scores = scorer.score(SampleBatch.from_strategies(model, cluster, strategies[:10]))
        assert scores.labels is not None and scores.uncertainty is not None
    else:
        assert used is None
    scorer, loaded = load_scorer(None, registry)
    assert isinstance(scorer, AnalyticalScorer) and loaded is None


def test_a_new_domain_uses_the_pretrained_version_when_its_rule_says_learned(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    with sessions() as s:
        assert usable_version(s, search.domain, tmp_path) is None  # nothing trained: analytical
        v = repo.add_simulator_version(
            s, domain=ALL_DOMAINS, kind=TRANSFER, metrics={"decision": {"choice": "learned"}},
            path="transfer-linear-x", n_records=10,
        )  # fmt: skip
        assert usable_version(s, search.domain, tmp_path) == v
        assert usable_version(s, search.domain, None) is None  # no registry: analytical
        repo.add_simulator_version(
            s, domain=search.domain, kind=TRANSFER, metrics={"decision": {"choice": "analytical"}},
            path="transfer-linear-y", n_records=12,
        )  # fmt: skip
        # The domain's own version wins over the pretrained one, and its rule says analytical.
        assert usable_version(s, search.domain, tmp_path) is None
    # A version whose files are missing is not loadable: the analytical scorer.
    scorer, loaded = load_scorer(v, tmp_path)
    assert isinstance(scorer, AnalyticalScorer) and loaded is None


def test_a_round_planned_with_a_transfer_version_records_scorer_and_uncertainty(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    from service.loop.jobs import plan_round_job
    from simulator.learned import Registry
    from simulator.learned.pretrained import TrainingSet, pretrain_version
    from simulator.learned.transfer import TransferConfig

    search = search_of()
    model, cluster, strategies = _ingest(sessions, search, 20, spread=1.05)
    from simulator.learned import Domain

    data = Domain.from_measurements(
        model,
        cluster,
        list(zip(strategies, AnalyticalSimulator().predict(model, cluster, strategies), strict=True)),
    )
    info, _ = pretrain_version([TrainingSet("t", data)], Registry(tmp_path), TransferConfig(members=3))
    with sessions() as s:  # a version whose rule said learned (forced here: plumbing only)
        version = repo.add_simulator_version(
            s, domain=search.domain, kind=TRANSFER, metrics={"decision": {"choice": "learned"}},
            path=info.version, n_records=len(data),
        )  # fmt: skip
        assert usable_version(s, search.domain, tmp_path) == version
    kwargs = {"samples": 40, "k": 3, "seed": 1, "exclude": set(), "compression": "none"}
    drafts, name, used = plan_round_job(model, cluster, version, tmp_path, kwargs)
    assert name == "hybrid" and used == version.id and len(drafts) == 3
    assert all(d.scorer in ("learned", "hybrid", "analytical") for d in drafts)
    assert all(d.uncertainty is not None and 0.0 <= d.uncertainty <= 0.5 for d in drafts)
    with sessions() as s:
        repo.transition_search(s, search_id=search.id, from_states=["pending"], to_state="running")
        _, cands = repo.add_round(s, search_id=search.id, candidates=drafts, samples=40, simulator_kind=name)
    assert [(c.scorer, c.uncertainty) for c in cands] == [(d.scorer, d.uncertainty) for d in drafts]
