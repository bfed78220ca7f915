"""A domain's fine-tuned ``residual`` version (issue 16): used under the same fallback rule as a
transfer version, and scored by the hybrid scorer with its uncertainty.

Runtimes are synthetic (plumbing): the analytical prediction times a factor that depends on the
strategy's number of PS shards, which Eq. 1-3 does not see and the residual model learns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from search import make_sampler
from search.round import SampleBatch
from service.db import repository as repo
from service.loop.simulators import RESIDUAL, load_scorer, usable_version
from simulator.analytical import AnalyticalSimulator
from simulator.learned.scoring import HybridScorer


def test_a_residual_version_is_used_like_a_transfer_version(
    sessions: sessionmaker[Session], search_of: Any, tmp_path: Path
) -> None:
    from simulator.learned import Domain, Registry
    from simulator.learned.residual import KIND, ResidualConfig, fit_residual
    from simulator.learned.transfer import domain_z

    search = search_of()
    with sessions() as s:
        model = repo.get_spec(s, spec_id=search.model_spec_id, viewer_id=None).model_spec()
        cluster = repo.get_spec(s, spec_id=search.cluster_spec_id, viewer_id=None).cluster_spec()
    strategies = make_sampler("constrained", model, cluster, 0).sample(40)
    times = AnalyticalSimulator().predict(model, cluster, strategies) * np.linspace(0.8, 1.25, 40)
    data = domain_z(Domain.from_measurements(model, cluster, list(zip(strategies, times, strict=True))))
    ranker = fit_residual(data, ResidualConfig(members=3))
    info = Registry(tmp_path).save(ranker, config={}, domains=[], metrics={})
    assert RESIDUAL == KIND == info.kind
    with sessions() as s:
        ruled_out = repo.add_simulator_version(
            s, domain=search.domain, kind=RESIDUAL, metrics={"decision": {"choice": "analytical"}},
            path=info.version, n_records=len(data),
        )  # fmt: skip
        assert ruled_out is not None and usable_version(s, search.domain, tmp_path) is None
        version = repo.add_simulator_version(
            s, domain=search.domain, kind=RESIDUAL, metrics={"decision": {"choice": "learned"}},
            path=info.version, n_records=len(data),
        )  # fmt: skip
        assert usable_version(s, search.domain, tmp_path) == version
    scorer, used = load_scorer(version, tmp_path)
    assert isinstance(scorer, HybridScorer) and used == version
    scores = scorer.score(SampleBatch.from_strategies(model, cluster, strategies[:12]))
    assert scores.labels is not None and scores.uncertainty is not None
    assert scores.uncertainty.shape == (12,)
