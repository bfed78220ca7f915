"""The few-measurement blend of the fine-tuned transfer ensemble and the residual model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.learned.blend import KIND, BlendEnsemble, fit_blend, oof_blend
from simulator.learned.residual import ResidualConfig
from simulator.learned.transfer import EnsembleTrainer, TransferConfig

from .test_residual import synthetic_z


def test_each_part_counts_in_units_of_its_spread_on_the_target() -> None:
    sources = [synthetic_z(60, 40 + k, residual=0.3) for k in range(2)]
    trainer = EnsembleTrainer(sources, TransferConfig(members=3, max_pairs=200))
    target, other = synthetic_z(20, 50, residual=0.3), synthetic_z(30, 51, residual=0.3)
    blend = fit_blend(trainer, target, ResidualConfig(members=2))
    t = blend.transfer.member_scores(other.z)
    r = blend.residual.member_scores(other.z, other.sync_terms)
    assert (t.shape, r.shape, blend.members) == ((3, 30), (2, 30), 3)
    # Standardised on the target: each part's mean score there is 0 with unit spread.
    for part, loc, scale in zip(
        (blend.transfer.scores(target.z), blend.residual.scores(target.z, target.sync_terms)),
        blend.loc, blend.scale, strict=True,
    ):  # fmt: skip
        assert (part.mean(), part.std()) == pytest.approx((loc, scale))
    # Member e pairs the parts' members e (cycled where one part has fewer).
    by_hand = 0.5 * ((t - blend.loc[0]) / blend.scale[0] + (r[[0, 1, 0]] - blend.loc[1]) / blend.scale[1])
    np.testing.assert_allclose(blend.member_scores(other.z, other.sync_terms), by_hand)
    # Multiplying one part's scores by 10 changes nothing: it is standardised first.
    loud = BlendEnsemble(
        type(blend.transfer)(10 * blend.transfer.coef, blend.transfer.mean, blend.transfer.std),
        blend.residual, (10 * blend.loc[0], blend.loc[1]), (10 * blend.scale[0], blend.scale[1]),
    )  # fmt: skip
    np.testing.assert_allclose(
        loud.scores(other.z, other.sync_terms), blend.scores(other.z, other.sync_terms)
    )
    with pytest.raises(ValueError, match="scale"):
        BlendEnsemble(blend.transfer, blend.residual, (0.0, 0.0), (1.0, 0.0))
    # The out-of-fold form: the same standardised mean of two score vectors.
    a, b = np.array([1.0, 2.0, 3.0]), np.array([30.0, 10.0, 20.0])
    np.testing.assert_allclose(oof_blend(a, b), 0.5 * ((a - 2) / a.std() + (b - 20) / b.std()))


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
        BlendEnsemble.from_state({"loc": np.zeros(2)})
