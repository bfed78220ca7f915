"""/healthz, /readyz, /me, /tokens and the OpenAPI document through the test client."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import ANY

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.db.engine import make_engine
from service.settings import Settings

API = "/api/v1"


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "alive"}
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok (0012)", "broker": "ok"},
    }


def test_readiness_fails_on_unreachable_broker(settings: Settings, engine: Any) -> None:
    bad = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(bad)) as c:
        r = c.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not ready"
    assert (body["checks"]["database"], body["checks"]["migrations"]) == ("ok", "ok (0012)")
    assert body["checks"]["broker"].startswith("unreachable: ")


def test_readiness_fails_before_migrations_and_start_up_migrates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    s = Settings(data_dir=tmp_path, database_url=url, broker_url="memory://", migrate_on_start=False)
    with TestClient(create_app(s)) as c:
        r = c.get("/readyz")
    assert r.status_code == 503 and r.json()["checks"]["migrations"] == "at None, head is 0012"
    with TestClient(create_app(s.model_copy(update={"migrate_on_start": True}))) as c:
        assert c.get("/readyz").status_code == 200
    make_engine(url).dispose()


def test_admin_bootstrap_token_and_token_routes(settings: Settings, engine: Any) -> None:
    secret = "bootstrap-admin-secret-0123456789"
    with TestClient(create_app(settings.model_copy(update={"admin_token": secret}))) as c:
        admin = {"Authorization": f"Bearer {secret}"}
        assert c.get(f"{API}/me", headers=admin).json() == {
            "user_id": 1,
            "name": "admin",
            "role": "admin",
            "token_id": 1,
        }
        r = c.post(f"{API}/tokens", json={"name": "carol", "role": "user"}, headers=admin)
        assert r.status_code == 201
        issued = r.json()
        info = {
            "id": 2,
            "prefix": issued["token"][:12],
            "user_id": 2,
            "name": "carol",
            "role": "user",
            "created_at": ANY,
            "revoked": False,
        }
        assert issued == {"token": ANY, "info": info}
        assert issued["token"].startswith("stg_") and len(issued["token"]) == 47
        carol = {"Authorization": f"Bearer {issued['token']}"}
        assert c.get(f"{API}/me", headers=carol).json() == {
            "user_id": 2,
            "name": "carol",
            "role": "user",
            "token_id": 2,
        }
        assert c.get(f"{API}/tokens", headers=carol).status_code == 403
        assert c.get(f"{API}/tokens", headers=admin).json()["data"][1] == info
        r = c.post(f"{API}/tokens", json={"name": "carol", "role": "worker"}, headers=admin)
        assert r.status_code == 409 and r.json() == {
            "detail": "user 'carol' exists with role 'user', not 'worker'"
        }
        r = c.post(f"{API}/tokens", json={"name": "dave", "role": "root"}, headers=admin)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "role"]
        assert c.post(f"{API}/tokens/2/revoke", headers=admin).json() == info | {"revoked": True}
        r = c.get(f"{API}/me", headers=carol)
        assert r.status_code == 401 and r.json() == {"detail": "invalid or revoked token"}
        assert r.headers["www-authenticate"] == "Bearer"
        assert c.post(f"{API}/tokens/9/revoke", headers=admin).status_code == 404
    # Starting again with the same bootstrap secret reuses the token.
    with TestClient(create_app(settings.model_copy(update={"admin_token": secret}))) as c:
        assert c.get(f"{API}/me", headers=admin).json()["token_id"] == 1


def test_openapi_documents_every_route_with_examples(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    expected = {
        "/api/v1/models": {"get", "post"},
        "/api/v1/models/zoo": {"get"},
        "/api/v1/models/zoo/{name}": {"get"},
        "/api/v1/models/{model_id}": {"get"},
        "/api/v1/clusters": {"get", "post"},
        "/api/v1/clusters/zoo": {"get"},
        "/api/v1/clusters/zoo/{name}": {"get"},
        "/api/v1/clusters/{cluster_id}": {"get"},
        "/api/v1/searches": {"get", "post"},
        "/api/v1/searches/{search_id}": {"get"},
        "/api/v1/searches/{search_id}/rounds": {"get"},
        "/api/v1/searches/{search_id}/cancel": {"post"},
        "/api/v1/searches/{search_id}/candidates": {"get"},
        "/api/v1/candidates/{candidate_id}": {"get"},
        "/api/v1/candidates/{candidate_id}/approve": {"post"},
        "/api/v1/candidates/{candidate_id}/reject": {"post"},
        "/api/v1/searches/{search_id}/trials": {"get"},
        "/api/v1/trials/{trial_id}": {"get"},
        "/api/v1/trials/{trial_id}/heartbeat": {"post"},
        "/api/v1/trials/{trial_id}/report": {"post"},
        "/api/v1/workers/claim": {"post"},
        "/api/v1/workers": {"get"},
        "/api/v1/runtimes": {"get", "post"},
        "/api/v1/simulators": {"get"},
        "/api/v1/simulators/{version_id}": {"get"},
        "/api/v1/simulators/retrain": {"get", "post"},
        "/api/v1/me": {"get"},
        "/api/v1/tokens": {"get", "post"},
        "/api/v1/tokens/{token_id}/revoke": {"post"},
        "/healthz": {"get"},
        "/readyz": {"get"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) >= methods, path
    schemas = doc["components"]["schemas"]
    for name in (
        "SearchCreate",
        "ClaimCreate",
        "ReportCreate",
        "RuntimeCreate",
        "RetrainCreate",
        "TokenCreate",
    ):
        assert schemas[name]["examples"], name
    assert paths["/api/v1/models"]["post"]["requestBody"]["content"]["application/json"]["examples"]["tiny"]
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    answers = paths["/api/v1/searches/{search_id}"]["get"]["responses"]
    assert set(answers) == {"200", "400", "401", "403", "404", "409", "413", "422"}
    assert answers["404"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Message"}
