"""Round scorers backed by the transfer ensemble: learned alone, and hybrid with the analytical model.

Both implement ``search.round.RoundScorer`` (``score(batch) -> RoundScores``) on the batch's arrays:
the global z comes from ``FeatureExtractor.global_z`` on ``batch.arrays`` and the analytical times
from ``AnalyticalSimulator.score_batch``, so no Strategy object is built. (``simulator`` may not
import ``search``; the scorers only read the batch's ``model``, ``cluster`` and ``arrays``, and build
``search.round.RoundScores`` through the ``make_scores`` they are given; the service and the
benchmarks pass it.)

Hybrid scoring (issue 16 item 3). Where the learned model is unsure, the analytical model decides.
*Unsure* is measured by **ensemble disagreement**, not by distance from the training data: the
members are fitted on bootstrap resamples, so they disagree exactly where the training pairs do
not pin the order down — far from the data, and also inside it where the measured domains
contradict each other — and it needs no density model of z. Its unit is a fraction of the batch:
``u`` = std over members of the sample's percentile rank in the batch (``transfer.disagreement``).

Blend. With the learned percentile p_L (rank of the ensemble mean score) and the analytical one p_A,
each sample gets p = w·p_L + (1 - w)·p_A with w = 1 for u <= ``sure``, w = 0 for u >= ``unsure``,
linear in between. Its label says which scorer ranked it: 'learned' (w = 1), 'analytical'
(w = 0) or 'hybrid' (0 < w < 1). The returned ``seconds`` map p back onto the analytical model's
predicted seconds of the same batch (p-quantile of them), so the hybrid's scores are in the
analytical model's seconds — monotone in p, and Eq. 11 sees a familiar scale — while the order is
the blend's. ``sure`` = 0.05 and ``unsure`` = 0.15: measured on the pretrained (LODO) ensembles
of the three format-2 domains, the median disagreement of a domain's strategies was 0.035-0.064
and the 90th percentile 0.07-0.15: about half of a domain's samples or more are ranked by the
learned order alone, most others by a blend, and the tail the members disagree on (at 0.15 one std
of a sample's rank across members is 15 percentiles) by the analytical one. Limitation, seen on
runtimes-v2/ResNet50__B1: disagreement does not see an error all members share (their LODO
accuracy there was 0.45, the analytical model's 0.73, at a median disagreement of 0.035); the
fallback rule's held-out check, not the blend, catches that once the domain has measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from simulator.analytical import AnalyticalSimulator, StrategyBatch
from simulator.learned.residual import Ranker
from simulator.learned.transfer import disagreement, percentiles
from simulator.spec import ClusterSpec, ModelSpec


class _Batch(Protocol):
    """What the scorers read of ``search.round.SampleBatch``."""

    model: ModelSpec
    cluster: ClusterSpec
    arrays: StrategyBatch


@dataclass(frozen=True, eq=False)
class ScoreSet:
    """What a scorer says about a batch; the same fields as ``search.round.RoundScores``.

    The default ``make_scores`` of the scorers: ``simulator`` does not import ``search``, so a
    caller that runs rounds (the service, the benchmarks) passes ``make_scores=RoundScores``.
    """

    seconds: np.ndarray
    scorer: str
    uncertainty: np.ndarray | None = None
    labels: np.ndarray | None = None
    calibrated: bool = True


@dataclass
class LearnedScorer:
    """The transfer ensemble alone: ranking scores (not seconds) and the members' disagreement."""

    ensemble: Ranker
    name: str = "learned"
    make_scores: Callable[..., Any] = ScoreSet  # search.round.RoundScores in a round

    def parts(self, batch: _Batch) -> tuple[np.ndarray, np.ndarray]:
        """(member scores (E, M), disagreement (M,)) of a batch."""
        z, terms = self.ensemble.batch_inputs(batch.model, batch.cluster, batch.arrays)
        members = self.ensemble.member_scores(z, terms)
        return members, disagreement(members)

    def score(self, batch: _Batch) -> Any:
        members, u = self.parts(batch)
        return self.make_scores(
            seconds=np.exp(np.clip(members.mean(axis=0), -60.0, 60.0)),
            scorer=self.name,
            uncertainty=u,
            calibrated=False,
        )


@dataclass
class HybridScorer:
    """Learned where the ensemble agrees, analytical where it does not (module docstring)."""

    ensemble: Ranker
    analytical: AnalyticalSimulator = field(default_factory=AnalyticalSimulator)
    sure: float = 0.05  # disagreement at or below which the learned order alone counts
    unsure: float = 0.15  # disagreement at or above which the analytical order alone counts
    name: str = "hybrid"
    make_scores: Callable[..., Any] = ScoreSet  # search.round.RoundScores in a round

    def __post_init__(self) -> None:
        if not 0 <= self.sure < self.unsure:
            raise ValueError(f"sure/unsure: need 0 <= sure < unsure, got {self.sure}, {self.unsure}")

    def weights(self, u: np.ndarray) -> np.ndarray:
        """w of the learned order per sample, from its disagreement u."""
        return np.clip((self.unsure - u) / (self.unsure - self.sure), 0.0, 1.0)

    def blend(
        self, members: np.ndarray, analytical_s: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds, disagreement, labels) from member scores (E, M) and analytical seconds (M,)."""
        u = disagreement(members)
        w = self.weights(u)
        p = w * percentiles(members.mean(axis=0)) + (1.0 - w) * percentiles(analytical_s)
        seconds = np.quantile(analytical_s, np.clip(p, 0.0, 1.0))
        labels = np.where(w >= 1.0, "learned", np.where(w <= 0.0, "analytical", "hybrid")).astype(object)
        return seconds, u, labels

    def score(self, batch: _Batch) -> Any:
        members, _ = LearnedScorer(self.ensemble).parts(batch)
        t = self.analytical.score_batch(batch.model, batch.cluster, batch.arrays).t_iter
        seconds, u, labels = self.blend(members, np.asarray(t, dtype=np.float64))
        return self.make_scores(seconds=seconds, scorer=self.name, uncertainty=u, labels=labels)
