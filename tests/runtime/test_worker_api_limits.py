"""The worker reads a claim through the trial wire format (simulator.spec.wire) and its specs through
the same spec classes as the API and the CLI, so a spec stored before the limits existed (a node
with 10**12 GPUs) is refused before anything runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.worker.api import ClaimedTrial
from simulator import zoo
from simulator.analytical import baseline
from simulator.spec import SpecError, dump_json
from simulator.spec.wire import TrialClaim


def _claim() -> dict[str, Any]:
    model, cluster = zoo.model("NCF-dense"), zoo.cluster("B1")
    strategy = json.loads(dump_json(baseline("horovod", model, cluster)))
    return {
        "trial": {"id": 7, "strategy": strategy},
        "attempt": 1,
        "claim_token": "t",
        "model": json.loads(dump_json(model)),
        "cluster": json.loads(dump_json(cluster)),
    }


def test_a_valid_claim_parses() -> None:
    assert ClaimedTrial.of(TrialClaim.model_validate(_claim())).cluster.num_gpus == zoo.cluster("B1").num_gpus


@pytest.mark.parametrize(
    ("where", "path", "value"),
    [
        ("cluster", ("nodes", 0, "gpus"), 10**12),
        ("model", ("layers", 0, "fwd_flops"), float("inf")),
        ("model", ("batch_size",), 2**70),
    ],
)
def test_a_poisoned_claim_is_refused_with_the_field(where: str, path: tuple[Any, ...], value: Any) -> None:
    claim = _claim()
    node = claim[where]
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(SpecError) as e:
        ClaimedTrial.of(TrialClaim.model_validate(claim))
    assert e.value.issues[0].path == path


def test_the_api_answers_what_the_worker_reads() -> None:
    """The claim answer's schema is the wire model the worker validates (one definition)."""
    from service.api.schemas.trials import ClaimPublic, HeartbeatPublic, ReportCreate, ReportPublic
    from simulator.spec import wire

    assert issubclass(ClaimPublic, wire.TrialClaim) and issubclass(HeartbeatPublic, wire.HeartbeatAck)
    assert issubclass(ReportCreate, wire.Report) and issubclass(ReportPublic, wire.ReportAck)
    assert set(ClaimPublic.model_fields) == set(wire.TrialClaim.model_fields)
