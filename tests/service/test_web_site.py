"""The trial page says where a runtime was measured (issue 41, item 7): a real cluster's agent pool
with its GPU types and torchrun run id, or the emulated testbed; nothing when the site is unknown."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from simulator.spec.measurement import Measurement

from .helpers import measured_trial

ON_POOL = {
    "measured_on": {
        "site": "cluster",
        "pool": "lab",
        "gpu_types": ["A100-80GB"],
        "torchrun_run_id": "trial7-1",
    }
}


@pytest.mark.parametrize(
    ("environment", "shown"),
    [
        (ON_POOL, ["real cluster", "pool lab", "A100-80GB", "torchrun trial7-1"]),
        ({"testbed": "netns"}, ["emulated testbed", "pool testbed"]),
        ({}, None),
    ],
)
def test_trial_page_says_where_it_was_measured(
    zoo_dir: Any,
    session: Session,
    client: TestClient,
    specs: Any,
    environment: dict[str, Any],
    shown: list[str] | None,
) -> None:
    m = Measurement(iteration_times=(0.1, 0.1, 0.1), environment=environment)
    user, trial_id = measured_trial(session, specs, "site-viewer", m)
    client.cookies.set("strategist_token", user.secret)
    page = client.get(f"/ui/trials/{trial_id}").text
    if shown is None:
        assert 'data-testid="site"' not in page
    else:
        assert 'data-testid="site"' in page
        for text in shown:
            assert text in page
