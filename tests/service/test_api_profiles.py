"""/profiles through the test client: upload, 422 with field paths, list, and the cost model using one."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from simulator.analytical import CostParams
from simulator.analytical import formulas as f
from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.io import parse_as

API = "/api/v1"


def _profile(specs: Any, fwd: float = 0.002, bwd: float = 0.003) -> dict[str, Any]:
    """A profile of the small model on the small cluster's T4 at its batch (8), every layer."""
    return {
        "kind": "profile",
        "model": "tiny-mlp",
        "device": "T4",
        "dtype": "float32",
        "batch": 8,
        "layers": [{"name": "fc1", "fwd_s": fwd, "bwd_s": bwd}, {"name": "fc2", "fwd_s": fwd, "bwd_s": bwd}],
        "source": "test",
    }


def test_upload_list_get_and_the_compute_it_gives(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    for kind in ("models", "clusters"):
        spec = specs.model() if kind == "models" else specs.cluster()
        assert client.post(f"{API}/{kind}", json=spec, headers=tokens["alice"]).status_code == 201
    q = {"model": "tiny-mlp", "cluster": "two-node"}
    # No profile yet: the roofline, the same number the cost model computes.
    before = client.get(f"{API}/profiles/compute", params=q, headers=tokens["alice"])
    assert before.status_code == 200, before.text
    roofline = f.compute_time(
        parse_as(ModelSpec, specs.model()), parse_as(ClusterSpec, specs.cluster()), CostParams()
    )
    assert before.json() == {
        "model": "tiny-mlp",
        "cluster": "two-node",
        "device": "T4",
        "t_comp": pytest.approx(roofline),
        "compute_source": "roofline",
        "profiled_layers": 0,
    }
    # A worker token cannot upload (its measurements arrive through the jobs users queue); alice's
    # upload is stored, listed to her, and used for her (issue 44: for no one else).
    assert client.post(f"{API}/profiles", json=_profile(specs), headers=tokens["worker"]).status_code == 403
    r = client.post(f"{API}/profiles", json=_profile(specs), headers=tokens["alice"])
    assert r.status_code == 201, r.text
    body = r.json()
    assert {k: body[k] for k in ("id", "model", "device", "dtype", "batch", "layers", "source")} == {
        "id": 1,
        "model": "tiny-mlp",
        "device": "T4",
        "dtype": "float32",
        "batch": 8,
        "layers": 2,
        "source": "test",
    }
    assert body["step_s"] == pytest.approx(0.01)
    assert client.get(f"{API}/profiles/1", headers=tokens["alice"]).json() == body
    summary = {k: v for k, v in body.items() if k != "profile"}  # a list's items are summaries
    listed = {"data": [summary], "count": 1, "next_cursor": None}
    assert client.get(f"{API}/profiles", headers=tokens["alice"]).json() == listed
    after = client.get(f"{API}/profiles/compute", params=q, headers=tokens["alice"]).json()
    assert after["compute_source"] == "profile" and after["profiled_layers"] == 2
    assert after["t_comp"] == pytest.approx(2 * (0.002 + 0.003))
    # A newer upload for the same key replaces it; a profile of another batch does not apply.
    client.post(f"{API}/profiles", json=_profile(specs, fwd=0.01), headers=tokens["alice"])
    other = dict(_profile(specs, fwd=1.0), batch=16)
    client.post(f"{API}/profiles", json=other, headers=tokens["alice"])
    newest = client.get(f"{API}/profiles/compute", params=q, headers=tokens["alice"]).json()
    assert newest["t_comp"] == pytest.approx(2 * (0.01 + 0.003))
    mine = client.get(f"{API}/profiles", params={"model": "tiny-mlp"}, headers=tokens["alice"]).json()
    assert mine["count"] == 3
    theirs = client.get(f"{API}/profiles", params={"model": "tiny-mlp"}, headers=tokens["bob"]).json()
    assert theirs["count"] == 0  # alice's profiles are hers
    assert client.get(f"{API}/profiles/1", headers=tokens["bob"]).status_code == 404


def test_bad_profiles_get_422_naming_the_field(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    bad = _profile(specs)
    bad["layers"][1]["bwd_s"] = -1
    r = client.post(f"{API}/profiles", json=bad, headers=tokens["alice"])
    assert r.status_code == 422
    assert [d["loc"] for d in r.json()["detail"]] == [["body", "layers", 1, "bwd_s"]]
    dup = _profile(specs)
    dup["layers"][1]["name"] = "fc1"
    r = client.post(f"{API}/profiles", json=dup, headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "layers", 1, "name"]
    assert "duplicate" in r.json()["detail"][0]["msg"]
    r = client.post(f"{API}/profiles", json={**_profile(specs), "dtype": "int8"}, headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "dtype"]
    assert client.get(f"{API}/profiles", headers=tokens["alice"]).json()["count"] == 0
    assert client.get(f"{API}/profiles/7", headers=tokens["alice"]).status_code == 404
    assert client.post(f"{API}/profiles", json=_profile(specs)).status_code == 401
