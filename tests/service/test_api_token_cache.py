"""Verified tokens are remembered for ``token_cache_s`` (service.api.deps.PrincipalCache): one
database lookup per token per window, revocation through the API seen at once, a revocation the
process does not see (the CLI, another API process) within the window, failures never remembered."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api.app import create_app
from service.db import repository as repo
from service.settings import Settings

API = "/api/v1"


class Clock:
    """A monotonic clock the test moves by hand (the cache's expiry, without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = repo.verify_token

    def counting(session: Any, *, secret: str) -> Any:
        calls.append(secret)
        return real(session, secret=secret)

    monkeypatch.setattr(repo, "verify_token", counting)
    return calls


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr("service.api.deps.time.monotonic", c)
    return c


def test_a_token_is_looked_up_once_per_window_and_revoking_it_through_the_api_is_immediate(
    client: TestClient, tokens: dict[str, Any], lookups: list[str], clock: Clock
) -> None:
    alice = tokens["alice"]
    for _ in range(5):
        assert client.get(f"{API}/me", headers=alice).status_code == 200
        assert client.get(f"{API}/models/zoo", headers=alice).status_code == 200
    assert len(lookups) == 1
    clock.now += 2.01  # past the default 2 s window: looked up again
    assert client.get(f"{API}/me", headers=alice).status_code == 200
    assert len(lookups) == 2
    token_id = client.get(f"{API}/me", headers=alice).json()["token_id"]
    r = client.post(f"{API}/tokens/{token_id}/revoke", headers=tokens["admin"])
    assert r.status_code == 200 and r.json()["revoked"] is True
    r = client.get(f"{API}/me", headers=alice)
    assert r.status_code == 401 and r.json() == {"detail": "invalid or revoked token"}
    assert client.get(f"{API}/me", headers=tokens["bob"]).status_code == 200  # others unaffected


def test_a_revocation_elsewhere_is_seen_within_the_window(
    client: TestClient, session: Session, tokens: dict[str, Any], clock: Clock
) -> None:
    alice = tokens["alice"]
    token_id = client.get(f"{API}/me", headers=alice).json()["token_id"]
    repo.revoke_token(session, token_id=token_id)  # as `strategist token revoke` does
    clock.now += 1.99
    assert client.get(f"{API}/me", headers=alice).status_code == 200  # the documented bound
    clock.now += 0.02
    assert client.get(f"{API}/me", headers=alice).status_code == 401


def test_failures_are_not_remembered_and_zero_turns_the_cache_off(
    settings: Settings, session: Session, zoo_dir: Any, lookups: list[str], clock: Clock
) -> None:
    secret = "stg_" + "x" * 40
    with TestClient(create_app(settings.model_copy(update={"token_cache_s": 0.0}))) as c:
        h = {"Authorization": f"Bearer {secret}"}
        assert c.get(f"{API}/me", headers=h).status_code == 401
        repo.ensure_token(session, name="late", role="user", secret=secret)
        assert c.get(f"{API}/me", headers=h).status_code == 200  # the 401 was not remembered
        assert c.get(f"{API}/me", headers=h).status_code == 200
        assert lookups == [secret] * 3


def test_the_window_is_a_setting_with_bounds() -> None:
    assert Settings().token_cache_s == 2.0
    for bad in (-1, 61):
        with pytest.raises(ValueError, match="token_cache_s"):
            Settings(token_cache_s=bad)
