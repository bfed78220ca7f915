"""Retraining between rounds: a domain with enough runtimes gets a new learned-simulator version,
registered with its metrics beside the analytical model's on the same validation split; the loop
scores with it only when it ranks that split better than the analytical model.

The runtimes here are synthetic (plumbing test): the analytical prediction times a fixed
per-strategy factor, so nothing in this file is a claim about simulator accuracy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from search import make_sampler
from service.db import repository as repo
from service.loop.simulators import RetrainConfig, Retrainer, current_simulator
from simulator.analytical import AnalyticalSimulator


def test_retrain_registers_a_version_and_the_gate_decides(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    with sessions() as s:
        model = repo.get_spec(s, spec_id=search.model_spec_id, viewer_id=None).model_spec()
        cluster = repo.get_spec(s, spec_id=search.cluster_spec_id, viewer_id=None).cluster_spec()
    strategies = make_sampler("constrained", model, cluster, 0).sample(40)
    predicted = AnalyticalSimulator().predict(model, cluster, strategies)
    rng = np.random.default_rng(0)
    with sessions() as s:
        # an admin's runtimes train the shared simulators; a user's uploads do not (issue 44)
        admin = repo.create_token(s, name="ops", role="admin").info.user_id
        for strategy, t in zip(strategies, predicted, strict=True):
            times = [float(t) * float(rng.uniform(0.5, 2.0)) * 1e3] * 3
            repo.ingest_runtime(
                s, model_name=model.name, cluster_name=cluster.name, strategy=strategy,
                iteration_times=times, user_id=admin,
            )  # fmt: skip
    registry = tmp_path / "simulators"
    retrainer = Retrainer(sessions, registry, RetrainConfig(kind="rnn", epochs=4, min_records=12))

    version = retrainer.retrain(search.domain)

    assert version is not None and version.kind == "rnn" and version.path
    assert (registry / version.path / "meta.json").is_file()
    distinct = len({s.model_dump_json() for s in strategies})
    assert version.n_records == distinct
    learned = version.metrics["val"]["pairwise_accuracy"]
    analytical = version.metrics["analytical_val"]["pairwise_accuracy"]
    assert 0.0 <= learned <= 1.0 and 0.0 <= analytical <= 1.0
    with sessions() as s:
        assert repo.latest_simulator_version(s, domain=search.domain) == version
        simulator, used = current_simulator(s, search.domain, registry)
    if learned > analytical:
        assert used == version and simulator.name == "rnn"
    else:
        assert used is None and simulator.name == "analytical"


def test_too_few_runtimes_keep_the_current_simulator(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    search = search_of()
    retrainer = Retrainer(sessions, tmp_path, RetrainConfig(min_records=12))
    assert retrainer.retrain(search.domain) is None
    with sessions() as s:
        simulator, used = current_simulator(s, search.domain, tmp_path)
    assert used is None and simulator.name == "analytical"
