"""`strategist spec upload | show` and the client's spec methods (issue 43): upload, then search by
the uploaded name; two users with one name each get their own; `show` fills defaults and notes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.cli import app, search_cli_commands
from service.db import repository as repo
from simulator.spec import ClusterSpec

from .helpers import api_client, route_cli


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    route_cli(monkeypatch, search_cli_commands, client)
    return lambda *args: CliRunner().invoke(app, list(args))


def write(tmp_path: Path, name: str, body: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return path


def test_two_users_upload_one_name_and_each_searches_their_own(
    zoo_dir: Path, tmp_path: Path, session: Session, client: TestClient, cli: Callable[..., Any], specs: Any
) -> None:
    alice = repo.create_token(session, name="alice2", role="user").secret
    bob = repo.create_token(session, name="bob2", role="user").secret
    model = write(tmp_path, "m.json", specs.model("gpt-mine"))
    a_cluster = write(tmp_path, "a.json", specs.cluster("lab"))
    b_body = specs.cluster("lab")
    b_body["nodes"] = [{**n, "nic_gbps": 25} for n in b_body["nodes"]]  # bob's lab differs
    b_cluster = write(tmp_path, "b.json", b_body)
    ids: dict[str, dict[str, int]] = {}
    for who, secret, cfile in (("alice", alice, a_cluster), ("bob", bob, b_cluster)):
        ids[who] = {}
        for kind, f in (("model", model), ("cluster", cfile)):
            r = cli("spec", "upload", str(f), "--token", secret, "--json")
            assert r.exit_code == 0, r.output
            ids[who][kind] = json.loads(r.stdout)["id"]
        r = cli(
            "search", "create", "--model", "gpt-mine", "--cluster", "lab", "--budget", "1", "--token", secret
        )
        assert r.exit_code == 0, r.output
        ids[who]["search"] = int(r.stdout.strip())
    assert ids["alice"]["cluster"] != ids["bob"]["cluster"]
    for who, secret in (("alice", alice), ("bob", bob)):
        api = api_client(client, secret)
        s = api.search(ids[who]["search"]).search
        assert (s.model_spec_id, s.cluster_spec_id) == (ids[who]["model"], ids[who]["cluster"])
        mine = api.clusters()
        assert [c.id for c in mine] == [ids[who]["cluster"]]  # the other's is not listed
        nic = ClusterSpec.model_validate(api.cluster(ids[who]["cluster"]).spec).nodes[0].nic_gbps
        assert nic == (10 if who == "alice" else 25)
    # the readable answer names the command to search with it
    r = cli("spec", "upload", str(model), "--token", alice)
    assert r.exit_code == 0 and "strategist search create --model gpt-mine" in r.stdout


def test_upload_refuses_a_bad_spec_in_one_line_before_any_request(
    tmp_path: Path, cli: Callable[..., Any], specs: Any
) -> None:
    body = specs.cluster("lab")
    body["nodes"][0]["nic_gbps"] = -1
    r = cli("spec", "upload", str(write(tmp_path, "bad.json", body)), "--token", "x")
    assert r.exit_code == 2 and "nodes.0.nic_gbps" in r.output and len(r.output.strip().splitlines()) == 1


def test_show_prints_every_default_and_notes_those_that_change_the_answer(
    tmp_path: Path, cli: Callable[..., Any], specs: Any
) -> None:
    body = specs.cluster("lab")
    body["nodes"][0]["latency_us"] = 20
    r = cli("spec", "show", str(write(tmp_path, "c.json", body)))
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["nodes"][1]["latency_us"] == 0.0 and shown["nodes"][1]["cpu_cores"] == 8
    assert shown["device_types"][0]["bf16_tflops"] is None
    notes = r.stderr
    assert (
        "device_types[0].bf16_tflops = null (default; changes the answer): not given: T4 runs bf16 at "
        "its FP32 rate (8.1 TFLOPS)" in notes
    )
    assert (
        "nodes[1].latency_us = 0 (default; changes the answer)" in notes
        and "nodes[0].latency_us" not in notes
    )
    assert "nodes[1].cpu_cores = 8 (default; does not change the answer)" in notes
    assert "nic_gbps is per node" in notes
    assert cli("spec", "show", "nope-nope").exit_code == 2


def test_the_upload_answer_carries_the_defaults_and_spec_show_id_prints_them(
    zoo_dir: Path, tmp_path: Path, session: Session, client: TestClient, cli: Callable[..., Any], specs: Any
) -> None:
    secret = repo.create_token(session, name="dana", role="user").secret
    body = specs.cluster("a100-lab")
    body["nodes"][0]["latency_us"] = 20
    del body["nodes"][1]["price_per_hour"]  # n0 keeps its $1/hour
    r = client.post("/api/v1/clusters", json=body, headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 201, r.text
    got = {d["field"]: d for d in r.json()["defaults"]}
    assert got["device_types[0].bf16_tflops"]["value"] is None
    assert got["device_types[0].bf16_tflops"]["changes_answer"] is True
    assert got["nodes[1].latency_us"] == {
        "field": "nodes[1].latency_us",
        "value": 0.0,
        "changes_answer": True,
        "note": "no per-message network latency (Eq. 2/3's latency term is dropped) (n1)",
    }
    assert got["nodes[1].cpu_cores"]["changes_answer"] is False and got["nodes[1].cpu_cores"]["value"] == 8
    assert "nodes[0].latency_us" not in got and "nodes[0].price_per_hour" not in got
    assert got["nodes[1].price_per_hour"]["changes_answer"] is True
    assert (
        got["nodes[*].nic_gbps"]["changes_answer"] is False and "per node" in got["nodes[*].nic_gbps"]["note"]
    )
    cid = r.json()["id"]  # a stored spec answers the same notes
    again = client.get(f"/api/v1/clusters/{cid}", headers={"Authorization": f"Bearer {secret}"}).json()
    assert again["defaults"] == r.json()["defaults"]
    shown = cli("spec", "show", "--id", str(cid), "--kind", "cluster", "--token", secret)
    assert shown.exit_code == 0, shown.output
    assert "note: nodes[1].latency_us = 0 (default; changes the answer)" in shown.stderr
    assert "nodes[0].latency_us" not in shown.stderr
    body["name"] = "a100-lab-2"
    up = cli("spec", "upload", str(write(tmp_path, "c.json", body)), "--token", secret)
    assert up.exit_code == 0, up.output
    assert "note: device_types[0].bf16_tflops = null (default; changes the answer)" in up.stderr


def test_the_dashboard_form_takes_an_upload_and_offers_it_first(
    zoo_dir: Path, session: Session, client: TestClient, specs: Any
) -> None:
    secret = repo.create_token(session, name="carla", role="user").secret
    client.cookies.set("strategist_token", secret)
    body = json.dumps(specs.cluster("my-lab")).encode()
    r = client.post("/ui/specs", files={"spec": ("lab.json", body, "application/json")})
    assert r.status_code == 200, r.text
    assert 'data-testid="create-notice">uploaded cluster &#39;my-lab&#39;' in r.text
    assert 'name="cluster" list="zoo-clusters" value="my-lab"' in r.text
    assert "left at a default that changes the answer: device_types[0].bf16_tflops" in r.text
    form = client.get("/ui/searches/new").text
    options = form.split('id="zoo-clusters">')[1].split("</datalist>")[0]
    assert options.startswith('<option value="my-lab">')  # the user's own before the zoo's
    bad = specs.cluster("bad-lab")
    bad["nodes"][0]["gpus"] = -1
    r = client.post("/ui/specs", files={"spec": ("bad.json", json.dumps(bad).encode(), "application/json")})
    assert r.status_code == 422 and "spec file: nodes.0.gpus" in r.text
