"""A per-domain network simulator retrained on one domain's testbed *and* real-cluster runtimes
(issue 41): the version trains on the real cluster's records only and its metrics say so
(``service.loop.simulators.one_site``); testbed-only domains say how many records did not say
where they were measured. Nothing is mixed silently.

The runtimes are synthetic (plumbing test): the analytical prediction times a per-site factor (the
testbed's ten times slower), so nothing here is a claim about simulator accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from search import make_sampler
from service.db import repository as repo
from service.loop.simulators import RetrainConfig, Retrainer
from simulator.analytical import AnalyticalSimulator

CLUSTER_ON: dict[str, Any] = {
    "site": "cluster",
    "pool": "lab",
    "gpu_types": ["A100"],
    "torchrun_run_id": "trial7-1",
}
TESTBED_ON: dict[str, Any] = {"site": "testbed", "pool": "testbed", "gpu_types": [], "torchrun_run_id": None}


def _ingest(
    sessions: sessionmaker[Session], search: Any, how: list[tuple[dict[str, Any] | None, float]]
) -> None:
    """One admin runtime per entry of ``how`` (measured_on, time factor), each of a distinct strategy."""
    with sessions() as s:
        model = repo.get_spec(s, spec_id=search.model_spec_id, viewer_id=None).model_spec()
        cluster = repo.get_spec(s, spec_id=search.cluster_spec_id, viewer_id=None).cluster_spec()
        strategies = make_sampler("constrained", model, cluster, 0).sample(len(how) * 3)
        distinct = list({st.model_dump_json(): st for st in strategies}.values())[: len(how)]
        assert len(distinct) == len(how)
        predicted = AnalyticalSimulator().predict(model, cluster, distinct)
        admin = repo.create_token(s, name="ops", role="admin").info.user_id
        rng = np.random.default_rng(1)
        for strategy, t, (on, factor) in zip(distinct, predicted, how, strict=True):
            times = [float(t) * factor * float(rng.uniform(0.8, 1.2))] * 3
            repo.ingest_runtime(s, model_name=model.name, cluster_name=cluster.name, strategy=strategy,
                                iteration_times=times, user_id=admin, measured_on=on)  # fmt: skip


def test_a_network_simulator_trains_on_the_real_clusters_runtimes_only(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    # 14 real-cluster runtimes, 16 testbed ones (10 say so, 6 are older records that do not say)
    _ingest(sessions, search, [(CLUSTER_ON, 1.0)] * 14 + [(TESTBED_ON, 10.0)] * 10 + [(None, 10.0)] * 6)
    registry = tmp_path / "simulators"
    retrainer = Retrainer(sessions, registry, RetrainConfig(kind="linear", epochs=4, min_records=12))

    version = retrainer.retrain(search.domain)

    assert version is not None and version.kind == "linear"
    assert version.n_records == 14  # the 14 real-cluster records, not the 30 of the domain
    site = version.metrics["site"]
    assert site["site"] == "cluster" and site["used"] == 14
    assert site["left_out"] == {"testbed": 16} and site["unrecorded_as_testbed"] == 0
    assert site["note"] == "trained on 14 cluster runtimes; left out 16 testbed (one site per domain)"
    with sessions() as s:  # GET /simulators shows the stored metrics: the note is what a person reads
        assert repo.latest_simulator_version(s, domain=search.domain).metrics["site"] == site  # type: ignore[union-attr]


def test_too_few_real_runtimes_train_nothing_rather_than_fall_back_to_the_testbed(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    """5 real-cluster runtimes and 20 testbed ones: 5 < min_records, so no version at all (the
    testbed's 20 would pass the threshold if they were mixed in)."""
    search = search_of()
    _ingest(sessions, search, [(CLUSTER_ON, 1.0)] * 5 + [(TESTBED_ON, 10.0)] * 20)
    retrainer = Retrainer(
        sessions, tmp_path / "simulators", RetrainConfig(kind="linear", epochs=4, min_records=12)
    )
    assert retrainer.retrain(search.domain) is None


def test_testbed_only_says_which_records_did_not_say_where(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    _ingest(sessions, search, [(TESTBED_ON, 1.0)] * 9 + [(None, 1.0)] * 4)
    retrainer = Retrainer(
        sessions, tmp_path / "simulators", RetrainConfig(kind="linear", epochs=4, min_records=12)
    )

    version = retrainer.retrain(search.domain)

    assert version is not None and version.n_records == 13
    site = version.metrics["site"]
    assert (site["site"], site["used"], site["left_out"], site["unrecorded_as_testbed"]) == (
        "testbed",
        13,
        {},
        4,
    )
    assert (
        site["note"]
        == "trained on 13 testbed runtimes; 4 did not say where they were measured (counted as testbed)"
    )
