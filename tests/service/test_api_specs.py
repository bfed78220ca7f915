"""/models and /clusters through the test client: upload, 422 with field paths, zoo, isolation."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.models import SpecRow

API = "/api/v1"


def _specs(session: Session) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(SpecRow)) or 0)


def test_upload_model_returns_every_field(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    r = client.post(f"{API}/models", json=specs.model("mine"), headers=tokens["alice"])
    assert r.status_code == 201
    body = r.json()
    assert body == {
        "id": 1,
        "name": "mine",
        "origin": "upload",
        "owner_id": 1,
        "created_at": ANY,
        "family": "IC",
        "batch_size": 8,
        "layers": 2,
        "variables": 3,
        "params": 64 * 32 + 32 + 32 * 10,
        "spec": ANY,
    }
    assert body["spec"]["layers"][0]["variables"][0] == {
        "name": "fc1.weight",
        "shape": [64, 32],
        "dtype": "float32",
        "sparse": False,
        "density": 1.0,
        "bytes": 8192,
    }
    assert client.get(f"{API}/models/1", headers=tokens["alice"]).json() == body
    listed = client.get(f"{API}/models", headers=tokens["alice"]).json()
    # a list's items are summaries: the same numbers, read from the stored JSON, without the spec
    summary = {k: v for k, v in body.items() if k != "spec"}
    assert listed == {"data": [summary], "count": 1, "next_cursor": None}
    # The identical spec again is the same record; a different one under the same name is a conflict.
    assert client.post(f"{API}/models", json=specs.model("mine"), headers=tokens["alice"]).json()["id"] == 1
    changed = specs.model("mine") | {"batch_size": 16}
    r = client.post(f"{API}/models", json=changed, headers=tokens["alice"])
    assert r.status_code == 409 and "mine" in r.json()["detail"]


def test_bad_model_is_422_with_field_paths_and_stores_nothing(
    client: TestClient, tokens: dict[str, Any], specs: Any, session: Session
) -> None:
    bad = specs.model("bad")
    bad["layers"][1]["inputs"] = ["nowhere"]
    bad["layers"][0]["variables"][0]["shape"] = [64, 0]
    before = _specs(session)
    r = client.post(f"{API}/models", json=bad, headers=tokens["alice"])
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert {tuple(d["loc"]) for d in detail} >= {("body", "layers", 0, "variables", 0, "shape", 1)}
    assert all(d["type"] == "spec_invalid" and d["msg"] for d in detail)
    bad["layers"][0]["variables"][0]["shape"] = [64, 32]
    r = client.post(f"{API}/models", json=bad, headers=tokens["alice"])
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"loc": ["body", "layers", 1, "inputs", 0], "msg": "unknown layer 'nowhere'", "type": "spec_invalid"}
    ]
    r = client.post(f"{API}/models", json=specs.cluster(), headers=tokens["alice"])  # a cluster, not a model
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "kind"]
    r = client.post(f"{API}/models", json=[1, 2], headers=tokens["alice"])  # not an object
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
    assert _specs(session) == before


def test_upload_cluster_and_bad_cluster(
    client: TestClient, tokens: dict[str, Any], specs: Any, session: Session
) -> None:
    r = client.post(f"{API}/clusters", json=specs.cluster("lab"), headers=tokens["bob"])
    assert r.status_code == 201
    assert r.json() == {
        "id": 1,
        "name": "lab",
        "origin": "upload",
        "owner_id": 2,
        "created_at": ANY,
        "nodes": 2,
        "gpus": 2,
        "spec": ANY,
        "defaults": ANY,  # simulator.spec.defaults: tests/service/test_spec_cli.py
    }
    assert r.json()["spec"]["nodes"][1]["name"] == "n1"
    bad = specs.cluster("broken")
    bad["nodes"][1]["device"] = "V100"
    r = client.post(f"{API}/clusters", json=bad, headers=tokens["bob"])
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"loc": ["body", "nodes", 1, "device"], "msg": "unknown device type 'V100'", "type": "spec_invalid"}
    ]
    assert _specs(session) == 1
    assert client.get(f"{API}/clusters", headers=tokens["bob"]).json()["count"] == 1


def test_specs_are_private_to_their_owner(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    mid = client.post(f"{API}/models", json=specs.model("secret"), headers=tokens["alice"]).json()["id"]
    cid = client.post(f"{API}/clusters", json=specs.cluster("secret"), headers=tokens["alice"]).json()["id"]
    assert client.get(f"{API}/models/{mid}", headers=tokens["bob"]).status_code == 404
    assert client.get(f"{API}/clusters/{cid}", headers=tokens["bob"]).status_code == 404
    assert client.get(f"{API}/models", headers=tokens["bob"]).json() == {
        "data": [],
        "count": 0,
        "next_cursor": None,
    }
    assert client.get(f"{API}/models/{mid}", headers=tokens["admin"]).status_code == 200
    assert client.get(f"{API}/models", headers=tokens["admin"]).json()["count"] == 1
    # A cluster id is not a model.
    assert client.get(f"{API}/models/{cid}", headers=tokens["alice"]).status_code == 404


def test_zoo_by_name(client: TestClient, tokens: dict[str, Any]) -> None:
    assert client.get(f"{API}/models/zoo", headers=tokens["alice"]).json() == {
        "data": ["tiny-mlp"],
        "count": 1,
    }
    assert client.get(f"{API}/clusters/zoo", headers=tokens["alice"]).json() == {
        "data": ["two-node"],
        "count": 1,
    }
    r = client.get(f"{API}/models/zoo/tiny-mlp", headers=tokens["alice"])
    assert r.status_code == 200
    assert r.json() | {"created_at": None} == {
        "id": 1,
        "name": "tiny-mlp",
        "origin": "zoo",
        "owner_id": None,
        "created_at": None,
        "family": "IC",
        "batch_size": 8,
        "layers": 2,
        "variables": 3,
        "params": 2400,
        "spec": ANY,
    }
    again = client.get(f"{API}/models/zoo/tiny-mlp", headers=tokens["bob"]).json()
    assert again["id"] == 1  # stored once, visible to everyone
    assert client.get(f"{API}/models/1", headers=tokens["bob"]).status_code == 200
    c = client.get(f"{API}/clusters/zoo/two-node", headers=tokens["alice"]).json()
    assert (c["name"], c["origin"], c["nodes"], c["gpus"]) == ("two-node", "zoo", 2, 2)
    r = client.get(f"{API}/models/zoo/nope", headers=tokens["alice"])
    assert r.status_code == 404 and "nope" in r.json()["detail"]


def test_spec_routes_need_a_user_token(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    assert client.get(f"{API}/models").status_code == 401
    assert client.get(f"{API}/models", headers={"Authorization": "Bearer stg_wrong"}).status_code == 401
    r = client.post(f"{API}/models", json=specs.model(), headers=tokens["worker"])
    assert r.status_code == 403 and r.json() == {
        "detail": "this endpoint is for user or admin tokens, not worker"
    }
    assert client.get(f"{API}/clusters/zoo", headers=tokens["worker"]).status_code == 403
