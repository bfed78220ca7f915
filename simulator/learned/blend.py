"""The few-measurement ranker: the fine-tuned transfer ensemble and the residual model, averaged.

Why (issue 16: the learned loop's rounds 1-3, 5-15 measured strategies of the searched domain).
``tuning.fine_tune`` used to pick one model by 4-fold cross-validation on the target's own
measurements from 8 of them on. On 8-15 points that choice is noise: in the replay of
benchmarks/search_quality_measured.py (runtimes-v2, seeds 0-29, the learned loop unchanged), the
best measured time among each candidate's top 5 of the unmeasured pool, over the best unmeasured
one, at 10 / 15 measured strategies was

    domain           transfer     residual    chosen by CV   this blend (rank mean of the two)
    BERT-3L__B5      12.1 / 4.9   1.4 / 1.0   11.9 / 4.7     0.3 / 0.6   %
    BERT-6L__B9       2.4 / 2.6   0.9 / 0.5    0.8 / 1.3     0.6 / 0.6
    NCF-sparse__A2    2.5 / 1.3   1.0 / 0.9    2.8 / 1.2     1.5 / 1.0
    NCF-sparse__B10   9.6 / 8.4  21.6 / 16.8  13.3 / 11.7   12.0 / 7.1
    ResNet50__B1      0.5 / 0.0   0.1 / 0.1    0.1 / 0.1     0.3 / 0.0

and at 5 (below ``min_held_out``, where the LODO rule chose the transfer ensemble or Eq. 1-3):
BERT-3L 11.9 (Eq. 1-3) -> 0.0, BERT-6L 2.2 -> 0.2, NCF-A2 3.2 -> 0.6, NCF-B10 9.9 -> 13.3,
ResNet50 0.6 -> 0.1. The two models fail on different domains (the transfer ensemble where the
other domains mislead it, the residual model where Eq. 1-3, its base, is far off: NCF-sparse__B10),
and averaging them is the classic remedy when the data are too few to tell which one to trust.

The model. Member e's score = ½ (T_e - μ_T) / σ_T + ½ (R_e - μ_R) / σ_R, with T the fine-tuned
transfer ensemble's ranking scores, R the residual model's log seconds (``residual.fit_residual``,
analytical base: the physical one needs ``ResidualConfig.min_line`` points), member e of each
(cycled when their member counts differ), and μ, σ the mean and standard deviation of each
ensemble's mean score over the target's measured strategies when it was fitted: each part in units
of its own spread over the same strategies, so neither dominates by scale and each keeps its
order. The score is a ranking score (not seconds); the members' disagreement feeds the hybrid
scorer as for the other rankers.

Registry kind ``blend``: the two parts' states under ``transfer.`` / ``residual.`` and the four
normalisation constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.learned.residual import ResidualConfig, ResidualEnsemble, fit_residual
from simulator.learned.transfer import DomainZ, EnsembleTrainer, TransferEnsemble, ZEnsemble
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Registry kind of the blend.
KIND = "blend"


class BlendEnsemble(ZEnsemble):
    """The transfer ensemble and the residual model, each standardised on the target (module docstring)."""

    name = KIND
    needs_terms = True

    def __init__(
        self,
        transfer: TransferEnsemble,
        residual: ResidualEnsemble,
        loc: Sequence[float] | np.ndarray,
        scale: Sequence[float] | np.ndarray,
    ) -> None:
        super().__init__()
        self.transfer = transfer
        self.residual = residual
        self.loc = np.asarray(loc, dtype=np.float64).reshape(2)
        self.scale = np.asarray(scale, dtype=np.float64).reshape(2)
        if not np.all(np.isfinite(self.scale)) or np.any(self.scale <= 0):
            raise ValueError(f"scale: need two finite positive spreads, got {self.scale.tolist()}")

    @property
    def members(self) -> int:
        return max(self.transfer.members, self.residual.members)

    def member_scores(self, z: np.ndarray, terms: np.ndarray | None = None) -> np.ndarray:
        """Every member's blended score of every strategy, shape (E, N); lower = faster."""
        t = (self.transfer.member_scores(z) - self.loc[0]) / self.scale[0]
        r = (self.residual.member_scores(z, terms) - self.loc[1]) / self.scale[1]
        e = np.arange(self.members)
        return 0.5 * (t[e % len(t)] + r[e % len(r)])

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        return self.transfer.hidden(model, cluster, strategies)

    def state(self) -> dict[str, np.ndarray]:
        """Plain arrays (the registry's weights): each part's state under its prefix, and loc / scale."""
        return {
            **{f"transfer.{k}": v for k, v in self.transfer.state().items()},
            **{f"residual.{k}": v for k, v in self.residual.state().items()},
            "loc": self.loc,
            "scale": self.scale,
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> BlendEnsemble:
        """The blend ``state`` describes (the inverse of ``state``)."""
        missing = [
            k for k in ("transfer.coef", "transfer.mean", "transfer.std", "loc", "scale") if k not in state
        ]
        if missing:
            raise ValueError(f"blend state: missing {', '.join(missing)}")
        t = {
            k.removeprefix("transfer."): np.asarray(v) for k, v in state.items() if k.startswith("transfer.")
        }
        r = {
            k.removeprefix("residual."): np.asarray(v) for k, v in state.items() if k.startswith("residual.")
        }
        return cls(
            TransferEnsemble(t["coef"], t["mean"], t["std"]),
            ResidualEnsemble.from_state(r),
            np.asarray(state["loc"]),
            np.asarray(state["scale"]),
        )


def _spread(scores: np.ndarray) -> tuple[float, float]:
    """(mean, std) of a part's scores on the target; std 1 where they are (nearly) constant."""
    std = float(scores.std())
    return float(scores.mean()), std if std > 1e-9 else 1.0


def fit_blend(
    trainer: EnsembleTrainer,
    target: DomainZ,
    config: ResidualConfig = ResidualConfig(),
    members: int | None = None,
) -> BlendEnsemble:
    """Fine-tune the transfer ensemble on ``target`` and fit the residual model (analytical base) on
    it; standardise each on ``target``'s measured strategies (module docstring)."""
    transfer = trainer.fit(target, members=members)
    residual = fit_residual(target, config, members=members)
    mt, st = _spread(transfer.scores(target.z))
    mr, sr = _spread(residual.scores(target.z, target.sync_terms))
    return BlendEnsemble(transfer, residual, (mt, mr), (st, sr))


def oof_blend(transfer: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """The blend of two out-of-fold score vectors (``tuning.cross_validated``): each standardised
    over the target, then averaged, as ``fit_blend`` does with fitted models (the folds' models
    share one standardisation here: an approximation, used only to report the blend's accuracy)."""
    parts = []
    for s in (transfer, residual):
        m, sd = _spread(s)
        parts.append((s - m) / sd)
    return 0.5 * (parts[0] + parts[1])
