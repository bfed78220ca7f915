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


def _measure(session: Any, search_id: int, seconds: list[float]) -> None:
    from service.db import repository as repo
    from simulator.spec.measurement import Measurement

    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None and claim.trial.search_id == search_id
    repo.report_trial(session, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token,
                      measurement=Measurement(iteration_times=tuple(seconds)))  # fmt: skip


def test_search_page_reports_like_against_like(
    client: TestClient, tokens: dict[str, Any], session: Any, specs: Any
) -> None:
    from service.db import repository as repo
    from service.domain import CandidateDraft

    _login(client, tokens["alice"])
    body = {"model": "tiny-mlp", "cluster": "two-node", "candidates_per_round": 2, "compression": "fp16"}
    sid = int(client.post("/api/v1/searches", json=body, headers=tokens["alice"]).json()["id"])
    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    fp16 = specs.strategy("lossy")
    for v in fp16["variables"]:
        v["shards"] = [{"kind": "collective", "group": 0, "compressor": {"kind": "fp16"}}]
    for name, strategy, times in (
        ("horovod@64MiB", specs.strategy("h64"), [0.8, 0.8, 0.8]),
        ("horovod@4MiB", specs.strategy("h4", group=1), [0.6, 0.6, 0.6]),
        ("horovod-fp16@64MiB", fp16, [0.5, 0.5, 0.5]),
    ):
        repo.enqueue_trial(session, search_id=sid, strategy=strategy, baseline=name)
        _measure(session, sid, times)
    drafts = [CandidateDraft(rank=1, strategy=specs.strategy("a", ps=True), predicted_time=0.2, similarity=0.0),
              CandidateDraft(rank=2, strategy=fp16 | {"name": "b"}, predicted_time=0.2, similarity=0.0)]  # fmt: skip
    repo.add_round(session, search_id=sid, candidates=drafts, samples=10)
    _measure(session, sid, [0.3, 0.3, 0.3])  # lossless candidate
    _measure(session, sid, [0.25, 0.25, 0.25])  # lossy candidate
    page = client.get(f"/ui/searches/{sid}").text
    lossless = page.split('data-testid="report-lossless"')[1].split('data-testid="report-lossy"')[0]
    lossy = page.split('data-testid="report-lossy"')[1].split("<h2>")[0]
    assert "horovod@4MiB" in lossless and "2.00×" in lossless and "2.00–2.00" in lossless  # 0.6 / 0.3
    assert "horovod-fp16" not in lossless
    assert (
        "horovod-fp16@64MiB" in lossy and "2.00×" in lossy and "lossy, accuracy not verified" in lossy
    )  # 0.5 / 0.25
    assert "horovod@4MiB" not in lossy
    assert 'data-testid="speedup-horovod"' in page and "fastest of 2 measured" in page
