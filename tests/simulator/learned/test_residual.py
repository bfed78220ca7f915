"""The fine-tuned residual ranker (log Eq. 1-3 + learned residual) and its cross-validated choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.learned.blend import BlendEnsemble
from simulator.learned.features import NUM_GLOBAL_FEATURES
from simulator.learned.residual import (
    ESTIMATE_COLUMN,
    ResidualConfig,
    analytical_log_seconds,
    fit_residual,
)
from simulator.learned.scoring import HybridScorer
from simulator.learned.transfer import DomainZ, EnsembleTrainer, TransferConfig, domain_z
from simulator.learned.tuning import fine_tune
from simulator.metrics import pairwise_accuracy
from simulator.spec import ClusterSpec, ModelSpec

from .conftest import synthetic_domain


def synthetic_z(n: int, seed: int, residual: float, noise: float = 0.02) -> DomainZ:
    """z with a consistent Eq. 1-3 column; times = Eq. 1-3 x exp(residual x z0 + noise)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, NUM_GLOBAL_FEATURES))
    analytical = np.exp(rng.uniform(np.log(0.01), np.log(0.1), n))  # 10-100 ms
    z[:, ESTIMATE_COLUMN] = np.log1p(analytical * 1e3)
    times = analytical * np.exp(residual * z[:, 0] + noise * rng.standard_normal(n))
    return DomainZ(f"synthetic-{seed}", z, times, analytical)


def test_the_analytical_column_of_z_is_eq_1_3(model: ModelSpec, cluster: ClusterSpec) -> None:
    dz = domain_z(synthetic_domain(model, cluster, 30, seed=4))
    np.testing.assert_allclose(analytical_log_seconds(dz.z), np.log(dz.analytical), atol=1e-5)


def test_residual_learns_what_eq_1_3_misses_and_keeps_what_it_gets() -> None:
    train, held = synthetic_z(150, 0, residual=0.5), synthetic_z(80, 1, residual=0.5)
    ranker = fit_residual(train)
    learned = pairwise_accuracy(ranker.scores(held.z, held.sync_terms), held.times)
    analytical = pairwise_accuracy(held.analytical, held.times)
    assert learned > analytical + 0.1, (learned, analytical)
    # No residual to learn: it stays on the analytical ranking (not below it).
    train, held = synthetic_z(150, 2, residual=0.0), synthetic_z(80, 3, residual=0.0)
    ranker = fit_residual(train)
    learned = pairwise_accuracy(ranker.scores(held.z, held.sync_terms), held.times)
    assert learned >= pairwise_accuracy(held.analytical, held.times) - 0.02


def test_members_scores_and_the_hybrid_blend() -> None:
    train, held = synthetic_z(60, 5, residual=0.5), synthetic_z(20, 6, residual=0.5)
    ranker = fit_residual(train, ResidualConfig(members=3))
    members = ranker.member_scores(held.z, held.sync_terms)
    assert members.shape == (3, 20)
    assert not np.allclose(members[0], members[1])  # bootstrap members differ
    np.testing.assert_allclose(ranker.scores(held.z, held.sync_terms), members.mean(axis=0))
    with pytest.raises(ValueError, match="terms"):
        ranker.member_scores(held.z)
    seconds, u, labels = HybridScorer(ranker).blend(members, held.analytical)
    assert seconds.shape == u.shape == labels.shape == (20,)
    # The hybrid's seconds are quantiles of Eq. 1-3's seconds of the batch.
    assert held.analytical.min() <= seconds.min() and seconds.max() <= held.analytical.max()
    with pytest.raises(ValueError, match="at least 2"):
        fit_residual(train.subset([0]))


def test_fine_tune_chooses_by_cross_validation_on_the_target_only() -> None:
    config = TransferConfig(members=2, max_pairs=200)
    sources = [synthetic_z(60, 10 + k, residual=-0.5) for k in range(2)]  # the opposite residual
    trainer = EnsembleTrainer(sources, config)
    target = synthetic_z(100, 20, residual=0.5)
    ranker, decision = fine_tune(trainer, target, {})
    assert decision.evidence == "cross-validated" and decision.strategies == 100
    assert decision.choice == "residual", decision
    assert decision.accuracy["residual"] > decision.accuracy["analytical"]
    assert ranker is not None and ranker.members == ResidualConfig().members
    # Nothing to learn beyond Eq. 1-3 and no noise: a tie goes to the analytical model.
    exact = synthetic_z(60, 21, residual=0.0, noise=0.0)
    ranker, decision = fine_tune(trainer, exact, {})
    assert decision.accuracy["analytical"] == 1.0
    assert decision.choice == "analytical" and ranker is None
    # No measurement yet: the LODO rule decides (no LODO evidence here -> analytical).
    ranker, decision = fine_tune(trainer, None, {})
    assert (decision.evidence, decision.choice, ranker) == ("lodo", "analytical", None)
    lodo = {"x": {"lodo": {"pairwise_accuracy": 0.8}, "analytical": {"pairwise_accuracy": 0.7}}}
    ranker, decision = fine_tune(trainer, target.subset([0]), lodo)
    assert (decision.evidence, decision.choice) == ("lodo", "transfer") and ranker is not None
    assert decision.as_dict()["accuracy"] == {"transfer": 0.8, "analytical": 0.7}
    # 2 .. min_line - 1 measured strategies: the blend, whatever the LODO rule says; its
    # out-of-fold accuracy and the candidates' are recorded from min_held_out on.
    ranker, decision = fine_tune(trainer, target.subset(range(5)), {})
    assert (decision.evidence, decision.choice) == ("few", "blend") and isinstance(ranker, BlendEnsemble)
    assert "blend" not in decision.accuracy
    ranker, decision = fine_tune(trainer, target.subset(range(30)), {})
    assert (decision.evidence, decision.choice) == ("few", "blend") and isinstance(ranker, BlendEnsemble)
    assert set(decision.accuracy) == {"physical", "residual", "transfer", "analytical", "blend"}
    assert decision.accuracy["blend"] > decision.accuracy["analytical"], decision
    assert ResidualConfig().min_line > 30 and ResidualConfig().min_held_out <= 30


def test_trees_as_arrays_predict_like_scikit_learn() -> None:
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor

    from simulator.learned.trees import ArrayTrees

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6))
    y = x[:, 0] ** 2 + np.sin(x[:, 1]) + 0.1 * rng.standard_normal(300)
    test = rng.standard_normal((200, 6))
    for forest in (
        ExtraTreesRegressor(30, min_samples_leaf=2, max_features=0.5, random_state=0),
        RandomForestRegressor(20, min_samples_leaf=3, random_state=1),
    ):
        forest.fit(x, y)
        arrays = ArrayTrees.of_forest(forest)
        assert arrays.feature.shape[0] == forest.n_estimators and arrays.depth > 3
        np.testing.assert_allclose(arrays.predict(test), forest.predict(test), atol=1e-12)
        # On the training points too, where float32 rounding meets the thresholds.
        np.testing.assert_allclose(arrays.predict(x), forest.predict(x), atol=1e-12)


def test_registry_roundtrip_and_the_fine_tuned_version_is_the_residual_model(tmp_path: Path) -> None:
    from simulator.learned.registry import Registry
    from simulator.learned.residual import KIND, ResidualEnsemble

    train, held = synthetic_z(80, 30, residual=0.5), synthetic_z(30, 31, residual=0.5)
    ranker = fit_residual(train, ResidualConfig(members=3))
    few = fit_residual(train.subset([0, 1]), ResidualConfig(members=2))  # trees of one leaf each
    registry = Registry(tmp_path)
    for model in (ranker, few, ResidualEnsemble.from_state(ranker.state())):
        info = registry.save(model, config={}, domains=[], metrics={})
        assert info.kind == KIND
        loaded = registry.load(info.version)
        assert isinstance(loaded, ResidualEnsemble)
        scores = loaded.member_scores(held.z, held.sync_terms)
        np.testing.assert_allclose(scores, model.member_scores(held.z, held.sync_terms), atol=1e-12)
    with pytest.raises(ValueError, match="missing"):
        ResidualEnsemble.from_state({"mean": np.zeros((1, NUM_GLOBAL_FEATURES))})
    # A state of the earlier ridge + boosted-trees model (same tree arrays, other meaning).
    old = {k: v for k, v in ranker.state().items() if k != "forest"}
    old |= {"coef": np.zeros((3, 1)), "intercept": np.zeros(3)}
    with pytest.raises(ValueError, match="forest"):
        ResidualEnsemble.from_state(old)


def test_pretrained_version_with_a_target_holds_the_chosen_model(
    model: ModelSpec, cluster: ClusterSpec, tmp_path: Path
) -> None:
    from simulator.learned.blend import KIND as BLEND_KIND
    from simulator.learned.pretrained import TrainingSet, pretrain_version
    from simulator.learned.registry import Registry
    from simulator.learned.residual import KIND, ResidualEnsemble

    sets = [TrainingSet(f"s{k}", synthetic_domain(model, cluster, 50, seed=k)) for k in range(3)]
    registry = Registry(tmp_path)
    info, decision = pretrain_version(sets, registry, TransferConfig(members=2), target="s0")
    tuned = info.notes["fine_tune"]
    assert tuned["evidence"] == "cross-validated" and tuned["strategies"] == len(sets[0].domain)
    assert decision.evidence == "held-out"
    assert decision.choice == ("analytical" if tuned["choice"] == "analytical" else "learned")
    assert decision.analytical_accuracy == tuned["accuracy"]["analytical"]
    loaded = registry.load(info.version)
    assert (info.kind == KIND) == (tuned["choice"] == "residual") == isinstance(loaded, ResidualEnsemble)
    # A target with fewer than min_line measured strategies: the blend, saved and loaded as such,
    # with its out-of-fold accuracy as the version's held-out evidence.
    sets[0] = TrainingSet("s0", synthetic_domain(model, cluster, 20, seed=0))
    info, decision = pretrain_version(sets, registry, TransferConfig(members=2), target="s0")
    assert info.kind == BLEND_KIND and info.notes["fine_tune"]["choice"] == "blend"
    assert (decision.choice, decision.evidence, decision.strategies) == ("learned", "few", 20)
    assert info.metrics["s0"]["held_out"]["pairwise_accuracy"] == decision.learned_accuracy
    assert decision.learned_accuracy == info.notes["fine_tune"]["accuracy"]["blend"]
    assert isinstance(registry.load(info.version), BlendEnsemble)


def linear_terms_z(n: int, seed: int) -> DomainZ:
    """Times linear in the sync terms (a price list), Eq. 1-3's column uninformative."""
    from simulator.learned.terms import NUM_TERMS

    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, NUM_GLOBAL_FEATURES))
    analytical = np.exp(rng.uniform(np.log(0.01), np.log(0.1), n))
    z[:, ESTIMATE_COLUMN] = np.log1p(analytical * 1e3)
    terms = rng.integers(0, 20, (n, NUM_TERMS)).astype(np.float64)
    price = np.random.default_rng(99).uniform(0, 1e-3, NUM_TERMS)
    times = (0.005 + terms @ price) * np.exp(0.01 * rng.standard_normal(n))
    return DomainZ(f"linear-{seed}", z, times, analytical, terms=terms)


def test_the_physical_base_prices_the_terms_and_is_chosen_where_they_explain_the_times(
    tmp_path: Path,
) -> None:
    from simulator.learned.registry import Registry

    train, held = linear_terms_z(120, 40), linear_terms_z(60, 41)
    ranker = fit_residual(train, ResidualConfig(members=3), base="physical")
    assert ranker.base == "physical" and fit_residual(train, members=1).base == "analytical"
    learned = pairwise_accuracy(ranker.scores(held.z, held.sync_terms), held.times)
    assert learned > 0.95 > 0.6 > pairwise_accuracy(held.analytical, held.times), learned
    from simulator.learned.residual import ResidualEnsemble

    loaded = Registry(tmp_path).load(
        Registry(tmp_path).save(ranker, config={}, domains=[], metrics={}).version
    )
    assert isinstance(loaded, ResidualEnsemble) and loaded.base == "physical"
    np.testing.assert_allclose(
        loaded.scores(held.z, held.sync_terms), ranker.scores(held.z, held.sync_terms), atol=1e-12
    )
    tuned, decision = fine_tune(EnsembleTrainer([], TransferConfig(members=2)), train, {})
    assert decision.choice == "physical" and decision.accuracy["physical"] > decision.accuracy["residual"]
    assert isinstance(tuned, ResidualEnsemble) and tuned.base == "physical"
    # Fewer measurements than the line's prices: not a candidate.
    _, few = fine_tune(EnsembleTrainer([], TransferConfig(members=2)), train.subset(range(30)), {})
    assert np.isnan(few.accuracy["physical"]) and few.choice != "physical"


def test_held_out_judges_the_fine_tuned_choice_on_strategies_it_never_saw(
    model: ModelSpec, cluster: ClusterSpec
) -> None:
    from simulator.learned.tuning import held_out

    domain = synthetic_domain(model, cluster, 60, seed=7)
    train, held = domain.held_out_positions(3)
    assert len(np.intersect1d(train, held)) == 0 and len(train) + len(held) == len(domain)
    fit, _, _ = domain.split(3)
    assert [domain.keys[i] for i in train] == list(fit.keys)  # the train split of Domain.split
    dz = domain_z(domain)
    trainer = EnsembleTrainer([], TransferConfig(members=2))
    result = held_out(trainer, dz, train, held, gap=0.05)
    _, decision = fine_tune(trainer, dz.subset(train), {})
    assert result.held == len(held) and result.choice == decision.choice
    assert result.analytical == pairwise_accuracy(dz.analytical[held], dz.times[held])
    assert 0.0 <= result.resolved_share <= 1.0 and 0.5 < result.tuned <= 1.0
    # Too few to train on: the analytical model, judged as such.
    few = held_out(trainer, dz, train[:3], held, gap=0.05)
    assert few.choice == "analytical" and few.tuned == few.analytical
