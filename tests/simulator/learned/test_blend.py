"""The few-measurement blend of the fine-tuned transfer ensemble and the residual model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.learned.blend import KIND, BlendEnsemble, fit_blend, oof_blend
from simulator.learned.residual import ResidualConfig
from simulator.learned.transfer import EnsembleTrainer, TransferConfig, percentiles

from .test_residual import synthetic_z


def test_each_part_counts_by_its_percentile_rank_in_the_batch() -> None:
    sources = [synthetic_z(60, 40 + k, residual=0.3) for k in range(2)]
    trainer = EnsembleTrainer(sources, TransferConfig(members=3, max_pairs=200))
    target, other = synthetic_z(20, 50, residual=0.3), synthetic_z(30, 51, residual=0.3)
    blend = fit_blend(trainer, target, ResidualConfig(members=2))
    t = blend.transfer.member_scores(other.z)
    r = blend.residual.member_scores(other.z, other.sync_terms)
    assert (t.shape, r.shape, blend.members) == ((3, 30), (2, 30), 3)
    # Member e pairs the parts' members e (cycled where one part has fewer), each as percentiles.
    pt = np.argsort(np.argsort(t, axis=1), axis=1) / 29  # no ties in these scores
    pr = np.argsort(np.argsort(r, axis=1), axis=1) / 29
    by_hand = 0.5 * (pt + pr[[0, 1, 0]])
    np.testing.assert_allclose(blend.member_scores(other.z, other.sync_terms), by_hand)
    # Multiplying one part's scores by 10 changes nothing: only their order counts.
    loud = BlendEnsemble(
        type(blend.transfer)(10 * blend.transfer.coef, blend.transfer.mean, blend.transfer.std),
        blend.residual,
    )
    np.testing.assert_allclose(
        loud.scores(other.z, other.sync_terms), blend.scores(other.z, other.sync_terms)
    )
    assert percentiles(np.array([3.0])).tolist() == [0.0]  # a batch of one
    np.testing.assert_allclose(percentiles(np.array([2.0, 1.0, 2.0])), [0.75, 0.0, 0.75])
    # The out-of-fold form: the mean of the two vectors' percentiles.
    a, b = np.array([1.0, 2.0, 3.0]), np.array([30.0, 10.0, 20.0])
    np.testing.assert_allclose(oof_blend(a, b), [0.5, 0.25, 0.75])


def test_registry_roundtrip(tmp_path: Path) -> None:
    from simulator.learned.registry import Registry

    trainer = EnsembleTrainer([synthetic_z(60, 60, residual=0.3)], TransferConfig(members=2, max_pairs=200))
    target, other = synthetic_z(12, 61, residual=0.3), synthetic_z(25, 62, residual=0.3)
    blend = fit_blend(trainer, target, ResidualConfig(members=2))
    registry = Registry(tmp_path)
    info = registry.save(blend, config={}, domains=[], metrics={})
    loaded = registry.load(info.version)
    assert info.kind == KIND and isinstance(loaded, BlendEnsemble)
    np.testing.assert_allclose(
        loaded.member_scores(other.z, other.sync_terms),
        blend.member_scores(other.z, other.sync_terms),
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="missing"):
        BlendEnsemble.from_state({"residual.mean": np.zeros(2)})
