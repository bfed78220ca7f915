"""Helpers shared by the service tests: ``StrategistClient`` and the CLI against the real app in
process, and trials and searches measured by hand."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service import domain as d
from service.client import StrategistClient
from service.db import repository as repo
from service.domain import CandidateDraft
from service.plans.base import RoundAsk
from service.plans.hybrid import HybridPlans
from service.plans.pipeline import PipelinePlans
from simulator import zoo
from simulator.spec.measurement import Measurement

#: A measured trial's iteration times: its median +-2 % (iteration-to-iteration noise).
SPREAD = (-0.02, -0.01, 0.0, 0.01, 0.02)


class InProcess(httpx.BaseTransport):
    """An httpx transport that hands each request to the app through FastAPI's TestClient (which
    runs the app's lifespan), so the client's own httpx code is what is tested."""

    def __init__(self, app_client: TestClient) -> None:
        self.app_client = app_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self.app_client.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.read()
        )
        return httpx.Response(r.status_code, headers=list(r.headers.multi_items()), content=r.content)


def api_client(client: TestClient, token: str) -> StrategistClient:
    """A ``StrategistClient`` with ``token`` over the app in process."""
    return StrategistClient("http://testserver", token, transport=InProcess(client))


def route_cli(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, client: TestClient, *, api: str | None = None
) -> None:
    """Make the CLI command ``module`` build its ``StrategistClient`` over the app in process (with
    the token it was given); ``api``: the URL it must ask for, when the test checks that."""
    transport = InProcess(client)

    def in_process(url: str, token: str) -> StrategistClient:
        assert api is None or url == api
        return StrategistClient("http://testserver", token, transport=transport)

    monkeypatch.setattr(module, "StrategistClient", in_process)


def tiny_search(session: Session, owner: str) -> tuple[d.IssuedToken, d.Search]:
    """A new user named ``owner`` and their search of the zoo's tiny-mlp on two-node."""
    user = repo.create_token(session, name=owner, role="user")
    search = repo.create_search(
        session,
        owner_id=user.info.user_id,
        model=repo.zoo_spec(session, kind="model", name="tiny-mlp"),
        cluster=repo.zoo_spec(session, kind="cluster", name="two-node"),
    )
    return user, search


def measured_trial(
    session: Session, specs: Any, owner: str, measurement: Measurement
) -> tuple[d.IssuedToken, int]:
    """``tiny_search`` with one round of one candidate (predicted 0.08 s), its trial claimed by a
    worker and reported with ``measurement``; the user and the trial's id."""
    user, search = tiny_search(session, owner)
    drafts = [CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.08, similarity=0.0)]
    repo.add_round(session, search_id=search.id, candidates=drafts, samples=1)
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None
    repo.report_trial(
        session, trial_id=claim.trial.id, attempt=1, claim_token=claim.claim_token, measurement=measurement
    )
    return user, claim.trial.id


def measured_search(
    session: Session,
    owner_id: int,
    model: str,
    cluster: str,
    kind: d.PlanKindName,
    options: dict[str, Any] | None,
    baselines: dict[str, dict[str, Any]],
    drafts: Sequence[CandidateDraft],
    medians: Sequence[float],
) -> int:
    """A search whose baselines, then candidates, are claimed and measured at ``medians`` (each
    +-``SPREAD``) in order (the rest stay queued)."""
    search = repo.create_search(
        session,
        owner_id=owner_id,
        model=repo.zoo_spec(session, kind="model", name=model),
        cluster=repo.zoo_spec(session, kind="cluster", name=cluster),
        plan_kind=kind,
        plan_options=options,
    )
    for name, doc in baselines.items():
        repo.enqueue_trial(session, search_id=search.id, strategy=doc, baseline=name)
    repo.add_round(session, search_id=search.id, candidates=drafts, samples=len(drafts))
    for med in medians:
        claim = repo.claim_trial(session, worker="w", clusters=[cluster])
        assert claim is not None
        m = Measurement(iteration_times=tuple(med * (1 + r) for r in SPREAD))
        repo.report_trial(
            session, trial_id=claim.trial.id, attempt=1, claim_token=claim.claim_token, measurement=m
        )
    return search.id


def pipeline_search(
    session: Session, owner_id: int, medians: Sequence[float]
) -> tuple[int, tuple[CandidateDraft, ...]]:
    """A pipeline search of pp-chain on pp-2: the 1F1B baseline and 2 candidates, measured at
    ``medians`` in that order; its id and the candidates' drafts."""
    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0039}, objective="time", model=model, cluster=cluster)
    base = kind.baselines(model, cluster, options, ("1f1b",))["1f1b"]
    drafts = kind.plan_round(model, cluster, options, RoundAsk(1, 2, 0, ())).drafts
    sid = measured_search(
        session, owner_id, "pp-chain", "pp-2", "pipeline", options, {"1f1b": base}, drafts, medians
    )
    return sid, drafts


def hybrid_search(
    session: Session, owner_id: int, medians: Sequence[float]
) -> tuple[int, tuple[CandidateDraft, ...]]:
    """A hybrid search of mixed-net on mixed-2: the even baseline and 1 candidate, measured at
    ``medians`` in that order; its id and the candidate's draft."""
    model, cluster = zoo.model("mixed-net"), zoo.cluster("mixed-2")
    kind = HybridPlans()
    options = kind.validate({"annotations": {"features": {"primitive": "replicate"}}, "global_batch": 32},
                            objective="time", model=model, cluster=cluster)  # fmt: skip
    base = kind.baselines(model, cluster, options, ("even",))["even"]
    drafts = kind.plan_round(model, cluster, options, RoundAsk(1, 1, 0, ())).drafts[:1]
    sid = measured_search(
        session, owner_id, "mixed-net", "mixed-2", "hybrid", options, {"even": base}, drafts, medians
    )
    return sid, drafts
