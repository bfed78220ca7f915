"""Every request example documented in the OpenAPI schema is accepted when posted as written.

The examples build on each other the way a reader would try them: the POST /models and POST
/clusters examples first, then searches (zoo names), runtimes (of the uploaded example model on the
uploaded example cluster), retraining, tokens, and the worker calls on a claimed trial.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.app import create_app
from service.db import repository as repo
from service.settings import Settings
from simulator import zoo
from simulator.analytical import baseline

API = "/api/v1"
# Upload examples first: later examples name what they upload.
ORDER = ["/api/v1/models", "/api/v1/clusters"]


@pytest.fixture
def zoo_client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    """The API over the real zoo (the examples name ResNet50 and B1)."""
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    with TestClient(create_app(settings)) as c:
        yield c


def _examples(doc: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
    """(path, method, example name, value) for every documented request-body example."""
    schemas = doc["components"]["schemas"]
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, ex in content.get("examples", {}).items():
                out.append((path, method, name, ex["value"]))
            ref = content.get("schema", {}).get("$ref", "")
            for i, value in enumerate(schemas.get(ref.rsplit("/", 1)[-1], {}).get("examples", [])):
                out.append((path, method, f"schema example {i}", value))
    return sorted(out, key=lambda e: (ORDER.index(e[0]) if e[0] in ORDER else len(ORDER), e[0]))


def test_every_documented_example_is_accepted(
    zoo_client: TestClient, session: Session, tokens: dict[str, Any]
) -> None:
    doc = zoo_client.get("/openapi.json").json()
    examples = _examples(doc)
    posted = {(path, method) for path, method, _, _ in examples}
    for must in ("/api/v1/searches", "/api/v1/runtimes", "/api/v1/models", "/api/v1/simulators/retrain"):
        assert (must, "post") in posted, must
    # A queued and claimed trial for the worker examples' {trial_id}.
    sid = zoo_client.post(
        f"{API}/searches", json={"model": "ResNet50", "cluster": "B1"}, headers=tokens["alice"]
    ).json()["id"]
    assert zoo_client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"][
        "model_name"
    ] == ("ResNet50")
    s = baseline("horovod", zoo.model("ResNet50"), zoo.cluster("B1"))
    trial = repo.enqueue_trial(session, search_id=sid, strategy=s.model_dump(mode="json"), baseline="horovod")
    role = {"/api/v1/tokens": "admin", "/api/v1/workers/claim": "worker"}
    answers = []
    for path, method, name, value in examples:
        who = "worker" if path.startswith("/api/v1/trials/") else role.get(path, "alice")
        url = path.replace("{trial_id}", str(trial.id))
        r = zoo_client.request(method, url, json=value, headers=tokens[who])
        answers.append((path, name, r.status_code))
        assert r.status_code < 300, (path, name, r.status_code, r.text)
    assert len(answers) >= 9, answers
