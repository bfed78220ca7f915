"""Which model ranks a domain after fine-tuning: the cross-validated choice (issue 16).

``fine_tune(trainer, target, lodo)`` is AutoSync's retraining step with the fallback rule judged
on held-out measured strategies: with at least ``ResidualConfig.min_held_out`` measured
strategies of the target, each candidate — the residual model on the domain's price list of its
sync terms (``physical``), the residual model on log Eq. 1-3 (``residual``; both
``residual.fit_residual``), the transfer ensemble fine-tuned on the target (``transfer``) and
Eq. 1-3 alone (``analytical``) — is scored out of fold on the target's own measurements, and the
best one, fitted on all of them, ranks the domain. Between 2 and ``ResidualConfig.min_line``
measured strategies (a search's first rounds) no choice is made: the blend of the fine-tuned
transfer ensemble and the residual model ranks the domain (``blend``: on so few points the
cross-validated choice was noise, and the average of the two beat it; the measurements are in
``blend``'s docstring); from 8 on the candidates' out-of-fold accuracies are still computed and
recorded. With no measured strategy, or one, the leave-one-domain-out half of the fallback rule
(``transfer.choose_from_lodo``) decides between the pretrained transfer ensemble and Eq. 1-3. Why
these candidates and how the residual model was chosen: ``residual``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from simulator.learned.blend import fit_blend, oof_blend
from simulator.learned.residual import Ranker, ResidualConfig, fit_residual
from simulator.learned.transfer import DomainZ, EnsembleTrainer, ScorerDecision, choose_from_lodo, out_of_fold
from simulator.metrics import pairwise_accuracy, resolved_pairs

Candidate = Literal["physical", "residual", "transfer", "analytical", "blend"]


@dataclass(frozen=True)
class FineTuneDecision:
    """Which model ranks the target after fine-tuning, and the cross-validated evidence.

    ``accuracy``: out-of-fold pairwise accuracy per candidate on the target's measured
    strategies (NaN where not evaluated); ``choice``: the best, ties going to the simpler one
    (analytical, then transfer, then residual, then physical: the residual model on the
    ``terms.TermsLine`` base), or ``blend`` (evidence ``few``) below ``ResidualConfig.min_line``
    measured strategies.
    """

    choice: Candidate
    evidence: Literal["cross-validated", "lodo", "few"]
    accuracy: dict[str, float]
    strategies: int

    def as_dict(self) -> dict[str, Any]:
        acc = {k: (None if v != v else v) for k, v in self.accuracy.items()}
        return {
            "choice": self.choice,
            "evidence": self.evidence,
            "accuracy": acc,
            "strategies": self.strategies,
        }


def cross_validated(
    trainer: EnsembleTrainer, target: DomainZ, config: ResidualConfig = ResidualConfig()
) -> dict[str, float]:
    """Out-of-fold pairwise accuracy of each candidate on ``target`` (folds by position mod ``folds``).

    Each fold is scored by a one-member model fitted on the other folds (``transfer.out_of_fold``:
    no strategy is scored by a model that saw it; one member, not all, so the cross-fit costs
    ``folds`` fits per candidate between rounds); the analytical model needs no fit.
    """
    res = out_of_fold(target, config.folds, lambda train: fit_residual(train, config, members=1))
    phy = (
        out_of_fold(
            target, config.folds, lambda train: fit_residual(train, config, members=1, base="physical")
        )
        if len(target) >= config.min_line
        else None
    )
    tra = (
        out_of_fold(target, config.folds, lambda train: trainer.fit(train, members=1))
        if trainer.sources
        else None
    )
    return {
        "physical": pairwise_accuracy(phy, target.times) if phy is not None else float("nan"),
        "residual": pairwise_accuracy(res, target.times),
        "transfer": pairwise_accuracy(tra, target.times) if tra is not None else float("nan"),
        "analytical": pairwise_accuracy(target.analytical, target.times),
        "blend": pairwise_accuracy(oof_blend(tra, res), target.times) if tra is not None else float("nan"),
    }


def fine_tune(
    trainer: EnsembleTrainer,
    target: DomainZ | None,
    lodo: dict[str, dict[str, dict[str, float]]],
    config: ResidualConfig = ResidualConfig(),
) -> tuple[Ranker | None, FineTuneDecision]:
    """The model that ranks ``target`` after fine-tuning, chosen on the target's own measurements.

    With no or one measured strategy (or fewer than ``min_held_out`` and no source domain), the
    LODO half of the fallback rule decides between the pretrained transfer ensemble and the
    analytical model. From 2 to ``min_line`` - 1: the blend
    (``blend.fit_blend``), with the candidates' out-of-fold accuracies recorded from
    ``min_held_out`` on (the LODO rule's below). From ``min_line`` on: the candidate with the best
    out-of-fold accuracy (``cross_validated``), fitted on all of them (None = the analytical model).
    """
    lodo_rule: ScorerDecision = choose_from_lodo(lodo)
    lodo_acc = {"transfer": lodo_rule.learned_accuracy, "analytical": lodo_rule.analytical_accuracy}
    # No source domain (a service that has measured one domain): nothing is transferred, and a
    # ranker of the target alone on fewer than min_held_out points is not trusted (as before).
    if target is None or len(target) < 2 or (not trainer.sources and len(target) < config.min_held_out):
        if lodo_rule.choice == "analytical" or not trainer.sources:
            return None, FineTuneDecision("analytical", "lodo", lodo_acc, lodo_rule.strategies)
        return trainer.fit(target), FineTuneDecision("transfer", "lodo", lodo_acc, lodo_rule.strategies)
    if len(target) < config.min_line:
        acc = cross_validated(trainer, target, config) if len(target) >= config.min_held_out else lodo_acc
        return fit_blend(trainer, target, config), FineTuneDecision("blend", "few", acc, len(target))
    acc = cross_validated(trainer, target, config)
    order: tuple[Candidate, ...] = ("analytical", "transfer", "residual", "physical")
    finite = [c for c in order if np.isfinite(acc[c])]
    if not finite:
        return None, FineTuneDecision("analytical", "cross-validated", acc, len(target))
    best = max(finite, key=lambda c: acc[c])  # first maximum: ties go to the simpler model
    decision = FineTuneDecision(best, "cross-validated", acc, len(target))
    if best in ("residual", "physical"):
        return fit_residual(target, config, base="analytical" if best == "residual" else "physical"), decision
    if best == "transfer":
        return trainer.fit(target), decision
    return None, decision


@dataclass(frozen=True)
class HeldOut:
    """``fine_tune``'s model judged on held-out measured strategies, next to Eq. 1-3.

    ``tuned`` / ``analytical``: pairwise accuracy on all held-out pairs; ``*_resolved``: on the
    pairs whose measured times differ by more than ``gap`` (relative; NaN where none do);
    ``resolved_share``: their share of the held-out pairs; ``choice``: the model ``fine_tune``
    picked by cross-validation on the train part alone.
    """

    held: int
    tuned: float
    analytical: float
    choice: Candidate
    tuned_resolved: float
    analytical_resolved: float
    resolved_share: float


def held_out(
    trainer: EnsembleTrainer,
    target: DomainZ,
    train: np.ndarray,
    held: np.ndarray,
    gap: float,
    config: ResidualConfig = ResidualConfig(),
) -> HeldOut:
    """Fine-tune on ``target``'s positions ``train`` (no LODO evidence: below ``min_held_out`` the
    analytical model) and judge the chosen model on the positions ``held``."""
    fit, test = target.subset(train), target.subset(held)
    ranker, decision = fine_tune(trainer, fit, {}, config)
    score = ranker.scores(test.z, test.sync_terms) if ranker is not None else test.analytical
    return HeldOut(
        len(test),
        pairwise_accuracy(score, test.times),
        pairwise_accuracy(test.analytical, test.times),
        decision.choice,
        pairwise_accuracy(score, test.times, min_gap=gap),
        pairwise_accuracy(test.analytical, test.times, min_gap=gap),
        resolved_pairs(test.times, gap),
    )
