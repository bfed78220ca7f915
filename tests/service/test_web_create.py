"""Dashboard create form: lossless by default, compression an explicit opt-in, the API's validation."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.web.auth import COOKIE

FORM = {"model": "tiny-mlp", "cluster": "two-node", "trial_budget": "4", "candidates_per_round": "2",
        "samples_per_round": "50", "name": "from the form"}  # fmt: skip


def _login(client: TestClient, headers: dict[str, str]) -> None:
    r = client.post("/ui/login", data={"token": headers["Authorization"].removeprefix("Bearer ")},
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and COOKIE in r.cookies


def test_form_defaults_to_lossless(client: TestClient, tokens: dict[str, Any]) -> None:
    _login(client, tokens["alice"])
    html = client.get("/ui/searches/new").text
    assert 'data-testid="compression"' in html and '<option value="none" selected>' in html
    assert 'value="fp16" selected' not in html and "accuracy not verified" in html


def test_create_lossless_then_lossy(client: TestClient, tokens: dict[str, Any], hooks: Any) -> None:
    _login(client, tokens["alice"])
    r = client.post("/ui/searches/new", data=FORM, follow_redirects=False)
    assert r.status_code == 303
    first = int(r.headers["location"].rsplit("/", 1)[1])
    r = client.post("/ui/searches/new", data=FORM | {"compression": "powersgd"}, follow_redirects=False)
    second = int(r.headers["location"].rsplit("/", 1)[1])
    api = {s["id"]: s for s in client.get("/api/v1/searches", headers=tokens["alice"]).json()["data"]}
    assert (api[first]["compression"], api[first]["space"]) == ("none", "lossless")
    assert (api[second]["compression"], api[second]["space"]) == ("powersgd", "lossy")
    assert [c[0] for c in hooks.calls] == ["search_created", "search_created"]
    page = client.get(f"/ui/searches/{second}").text
    assert 'data-testid="space">lossy<' in page and "compression powersgd" in page
    listing = client.get("/ui/searches").text
    assert (
        listing.count('data-testid="space">lossless<') == 1
        and listing.count('data-testid="space">lossy<') == 1
    )


def test_bad_form_names_the_field_and_creates_nothing(client: TestClient, tokens: dict[str, Any]) -> None:
    _login(client, tokens["alice"])
    for change, text in (
        ({"trial_budget": "0"}, "trial_budget: Input should be greater than or equal to 1"),
        ({"compression": "int8"}, "compression: Input should be"),
        ({"model": "no-such-model"}, "model: no model &#39;no-such-model&#39;"),
    ):
        r = client.post("/ui/searches/new", data=FORM | change, follow_redirects=False)
        assert r.status_code == 422 and text in r.text, r.text[:2000]
    assert client.get("/api/v1/searches", headers=tokens["alice"]).json()["count"] == 0
