"""The API's answers about itself (issue 44, item 7): the published schema refuses the spec bodies
the server refuses, OPTIONS and 405 name every method a path takes, and a wrong method on a
literal path is 405, not a 422 from a neighbouring ``{id}`` route."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"


@pytest.mark.parametrize(
    ("path", "schema"),
    [
        ("/models", "ModelSpec-Input"),
        ("/clusters", "ClusterSpec-Input"),
        ("/profiles", "Profile-Input"),
        ("/profiles/jobs/{job_id}/result", "ProfileJobResult-Input"),
    ],
)
def test_spec_bodies_are_published_as_the_spec(
    client: TestClient, tokens: dict[str, Any], path: str, schema: str
) -> None:
    doc = client.get("/openapi.json").json()
    body = doc["paths"][API + path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"] == f"#/components/schemas/{schema}"
    published = doc["components"]["schemas"][schema]
    assert published["required"], "an empty object must not satisfy the published schema"
    for ref in _refs(published):  # every sub-schema it names is published too
        assert ref.removeprefix("#/components/schemas/") in doc["components"]["schemas"], ref
    r = client.post(API + path.replace("{job_id}", "1"), json={}, headers=tokens["alice"])
    assert r.status_code in (403, 422)  # the server refuses {} too (the job result: workers only)


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["$ref"]] if isinstance(schema.get("$ref"), str) else []
        return own + [r for v in schema.values() for r in _refs(v)]
    if isinstance(schema, list):
        return [r for v in schema for r in _refs(v)]
    return []


def test_options_names_every_method_of_the_path(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.options(f"{API}/models", headers=tokens["alice"])
    assert r.status_code == 204 and r.headers["allow"] == "GET, OPTIONS, POST"
    r = client.options(f"{API}/searches/1/cancel", headers=tokens["alice"])
    assert r.status_code == 204 and r.headers["allow"] == "OPTIONS, POST"
    assert client.options("/healthz").headers["allow"] == "GET, OPTIONS"
    assert client.options(f"{API}/no-such-thing", headers=tokens["alice"]).status_code == 404
    assert client.options(f"{API}/models").status_code == 401  # the API still needs a token


def test_a_wrong_method_is_405_naming_every_allowed_one(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.delete(f"{API}/models", headers=tokens["alice"])
    assert r.status_code == 405 and r.headers["allow"] == "GET, OPTIONS, POST"
    r = client.get(f"{API}/profiles/jobs", headers=tokens["alice"])
    assert r.status_code == 405 and r.headers["allow"] == "OPTIONS, POST"
    assert client.get(f"{API}/profiles/12345", headers=tokens["alice"]).status_code == 404
