"""The transfer ensemble, its LODO rule, provenance, and the learned / hybrid round scorers.

Labels here are synthetic (conftest: analytical-style times plus noise) and only test mechanics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from search.round import RoundScores, SampleBatch
from simulator.analytical import cluster_arrays, encode, model_arrays
from simulator.learned.data import Domain
from simulator.learned.features import FeatureExtractor
from simulator.learned.pretrained import TrainingSet, pretrain_version
from simulator.learned.registry import Registry
from simulator.learned.scoring import HybridScorer, LearnedScorer
from simulator.learned.transfer import (
    DomainZ,
    EnsembleTrainer,
    TransferConfig,
    TransferEnsemble,
    accuracy,
    disagreement,
    domain_z,
    key_digest,
    lodo_metrics,
)

from .conftest import synthetic_domain, toy_cluster, toy_model

CFG = TransferConfig(members=3, max_pairs=400)


@pytest.fixture(scope="module")
def domains() -> list[Domain]:
    """Four synthetic domains: two models x two clusters."""
    out = []
    for i, (width, nic) in enumerate([(64, 10.0), (96, 10.0), (64, 40.0), (128, 25.0)]):
        m, c = toy_model(f"toy{width}", width=width), toy_cluster(f"duo{int(nic)}", nic=nic)
        out.append(synthetic_domain(m, c, 40, seed=10 + i))
    return out


@pytest.fixture(scope="module")
def zs(domains: list[Domain]) -> list[DomainZ]:
    return [domain_z(d) for d in domains]


def test_disagreement_by_hand() -> None:
    # Percentile ranks (0, .5, 1) and (1, .5, 0): std per strategy is .5, 0, .5.
    np.testing.assert_allclose(disagreement(np.array([[0.0, 1.0, 2.0], [5.0, 3.0, 1.0]])), [0.5, 0.0, 0.5])
    assert np.all(disagreement(np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])) == 0.0)
    assert disagreement(np.array([[1.0], [2.0]])).tolist() == [0.0]


def test_global_z_of_a_batch_matches_the_graphs(domains: list[Domain]) -> None:
    d = domains[0]
    fx = FeatureExtractor(d.model, d.cluster)
    batch = encode(model_arrays(d.model), cluster_arrays(d.cluster), list(d.strategies[:7]))
    np.testing.assert_array_equal(fx.global_z(batch), np.stack([g.z for g in fx.many(d.strategies[:7])]))


def test_ensemble_transfers_to_an_unseen_domain(zs: list[DomainZ]) -> None:
    ens = EnsembleTrainer(zs[:3], CFG).fit()
    assert ens.members == 3 and ens.member_scores(zs[3].z).shape == (3, len(zs[3]))
    np.testing.assert_allclose(ens.scores(zs[3].z), ens.member_scores(zs[3].z).mean(axis=0))
    # Times are the analytical model's plus 3 % noise: a ranker of z must recover most pairs.
    assert accuracy(ens, zs[3]) > 0.8
    lodo = lodo_metrics(zs, CFG)
    assert set(lodo) == {z.name for z in zs}
    assert all(m["lodo"]["pairwise_accuracy"] > 0.75 for m in lodo.values())


def test_pretrained_version_roundtrip_and_provenance(domains: list[Domain], tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    sets = [TrainingSet(f"ds/{d.name}", d) for d in domains[:3]]
    sets.append(TrainingSet("service/x", domains[3], runtime_record_ids=(7, 3, 5)))
    info, decision = pretrain_version(sets, reg, CFG)
    assert info.kind == "transfer-linear" and decision.evidence == "lodo"
    assert info.notes["decision"]["choice"] == decision.choice
    assert "commit" in info.notes["code"]
    prov = {p["name"]: p for p in info.domains}
    assert prov["service/x"]["runtime_record_ids"] == [3, 5, 7]
    assert prov["ds/" + domains[0].name]["strategy_keys_sha256"] == [key_digest(k) for k in domains[0].keys]
    assert prov["ds/" + domains[0].name]["records"] == len(domains[0])
    loaded = reg.load(info.version)
    assert isinstance(loaded, TransferEnsemble)
    z = domain_z(domains[3]).z
    ens = EnsembleTrainer([domain_z(s.domain, s.label) for s in sets], CFG).fit()
    np.testing.assert_allclose(loaded.scores(z), ens.scores(z))
    # Fine-tuned on one set of 40 strategies (min_held_out <= 40 < min_line): the blend, with its
    # out-of-fold accuracy as held-out evidence.
    info2, decision2 = pretrain_version(sets, reg, CFG, target="service/x")
    assert decision2.evidence == "few" and info2.notes["target"] == "service/x" and info2.kind == "blend"
    assert info2.metrics["service/x"]["held_out"]["pairwise_accuracy"] == decision2.learned_accuracy
    with pytest.raises(KeyError, match="target"):
        pretrain_version(sets, reg, CFG, target="nope")


def test_hybrid_blend_by_hand() -> None:
    h = HybridScorer(TransferEnsemble(np.zeros((1, 25)), np.zeros((1, 25)), np.ones((1, 25))))
    analytical = np.array([1.0, 2.0, 3.0, 4.0])
    # Members agree (u = 0): the learned order (reverse of the analytical one) wins outright.
    agree = np.array([[4.0, 3.0, 2.0, 1.0], [8.0, 6.0, 4.0, 2.0]])
    s, u, labels = h.blend(agree, analytical)
    assert u.tolist() == [0.0] * 4 and labels.tolist() == ["learned"] * 4
    np.testing.assert_allclose(s, [4.0, 3.0, 2.0, 1.0])  # quantiles of the analytical seconds
    # Members give opposite orders (u = 1/2, 1/6, 1/6, 1/2, all >= unsure): the analytical order.
    split = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    s, u, labels = h.blend(split, analytical)
    np.testing.assert_allclose(u, [0.5, 1 / 6, 1 / 6, 0.5])
    assert labels.tolist() == ["analytical"] * 4
    np.testing.assert_allclose(s, analytical)
    # Ten strategies, members swap the first two: u = (1/9)/2 for those, w = (0.15 - 1/18)/0.1.
    swap = np.array([np.arange(10.0), [1.0, 0.0, *range(2, 10)]])
    s, u, labels = h.blend(swap, np.arange(1.0, 11.0))
    assert labels.tolist() == ["hybrid", "hybrid"] + ["learned"] * 8
    np.testing.assert_allclose(h.weights(u[:1]), [(0.15 - 1 / 18) / 0.1])
    assert h.weights(np.array([0.05, 0.10, 0.15])).tolist() == pytest.approx([1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="sure/unsure"):
        HybridScorer(h.ensemble, sure=0.2, unsure=0.1)


def test_scorers_on_a_round_batch(domains: list[Domain], zs: list[DomainZ]) -> None:
    ens = EnsembleTrainer(zs[:3], CFG).fit()
    d = domains[3]
    batch = SampleBatch.from_strategies(d.model, d.cluster, list(d.strategies))
    learned = LearnedScorer(ens, make_scores=RoundScores).score(batch)
    assert isinstance(learned, RoundScores) and not learned.calibrated
    np.testing.assert_allclose(np.log(learned.seconds), ens.scores(zs[3].z))
    assert learned.uncertainty is not None and learned.uncertainty.shape == (len(d),)
    hybrid = HybridScorer(ens, make_scores=RoundScores).score(batch)
    assert hybrid.calibrated and hybrid.labels is not None
    assert set(hybrid.labels.tolist()) <= {"learned", "hybrid", "analytical"}
    # Seconds are analytical quantiles: inside the analytical model's range on this batch.
    assert zs[3].analytical.min() - 1e-12 <= hybrid.seconds.min()
    assert hybrid.seconds.max() <= zs[3].analytical.max() + 1e-12


def test_without_source_domains_the_target_trains_alone(zs: list[DomainZ]) -> None:
    trainer = EnsembleTrainer([], CFG)
    with pytest.raises(ValueError, match="no pair"):
        trainer.fit()
    ens = trainer.fit(zs[0])
    assert ens.members == 3 and accuracy(ens, zs[0]) > 0.8  # in-domain, analytical-like labels
