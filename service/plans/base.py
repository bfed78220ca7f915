"""The extension point for what a search plans (``searches.plan_kind``, migration 0007).

A search plans AutoSync synchronization strategies ('sync', the loop's own code in
``service.loop`` and ``service.loop.rounds``) or another kind of plan: Ada-Grouper pipelines,
Whale hybrid plans, HeterPS heterogeneous schedules. Each other kind is one ``PlanKind``
implementation in its own module of this package, registered in ``service.plans.KINDS``; the API
validates a search's ``plan_options`` with it, and the loop asks it for the search's baselines and
each round's candidates instead of running the AutoSync round.

What every kind shares with 'sync': rounds, candidates and trials as stored. A candidate's (and
its trial's) ``strategy`` JSON is the kind's plan document, a dict whose ``"kind"`` names the
document type so the worker can tell how to run it; a trial's measurement is a
``simulator.spec.measurement.Measurement`` (its ``iteration_times`` are what the run measured).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel

from service.domain import CandidateDraft, Search, Trial
from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.profile import Profile

Loc = tuple[str | int, ...]


class OptionsInvalid(ValueError):
    """A search's plan options do not fit its kind, model or cluster: each issue is (field path, reason).

    The API answers 422 with ``loc = ["body", <path>...]`` (a path starts with "plan_options", or
    names another field of the request such as "cluster" or "objective").
    """

    def __init__(self, issues: Sequence[tuple[Loc, str]]) -> None:
        self.issues = list(issues)
        super().__init__("; ".join(f"{'.'.join(map(str, p))}: {m}" for p, m in self.issues))


@dataclass(frozen=True)
class RoundAsk:
    """What the loop asks of a kind's round: K new plans for round ``index``."""

    index: int  # the round being planned (1-based)
    k: int  # candidates wanted (the budget may leave fewer than candidates_per_round)
    seed: int  # seed of this round (search seed and round index)
    tried: tuple[dict[str, Any], ...]  # plan documents of every trial of the search so far
    # measured profiles of the search's model the round ranks with (the service's stored ones in
    # use, ``repository.profiles_in_use``); None: the on-disk profile store's (issue 15)
    profiles: tuple[Profile, ...] | None = None


@dataclass(frozen=True)
class RoundPlan:
    """A kind's round: the drafts (empty: the kind has nothing new to try, the search completes)
    and the name stored as the round's ``simulator_kind`` (what scored the plans)."""

    drafts: tuple[CandidateDraft, ...]
    scorer: str


class PlanKind(ABC):
    """One kind of plan a search can look for.

    Contract:
    - stateless and picklable: the loop hands bound methods of an instance to its job processes
      (``service.loop.jobs``), where ``baselines`` and ``plan_round`` run under a time and memory
      budget; ``validate`` runs in the API process at create time and must stay cheap (well under
      a second);
    - ``validate`` returns the normalised options that are stored (defaults filled in), or raises
      ``OptionsInvalid`` naming every bad field;
    - the options handed to ``baselines`` and ``plan_round`` are the stored ones;
    - ``plan_round`` never proposes a plan already in ``ask.tried``.
    """

    #: The ``searches.plan_kind`` value.
    name: ClassVar[str]
    #: Whether a finished round asks for the domain's learned simulator to be retrained.
    retrains: ClassVar[bool] = False

    def predicted_only(self, options: dict[str, Any] | None) -> bool:
        """Whether a search with these (stored) options plans documents no worker can run: its one
        round records the predicted ranking (no trial is queued) and the search completes with it
        (``service.loop``; issue 42's 3D space). False for every kind whose plans are measured."""
        return False

    @abstractmethod
    def validate(
        self, options: dict[str, Any] | None, *, objective: str, model: ModelSpec, cluster: ClusterSpec
    ) -> dict[str, Any]:
        """The stored form of ``options`` for this model and cluster; OptionsInvalid otherwise."""

    #: The baseline plans every search of this kind measures, queued at its start (the default
    #: ``due_baselines``; a kind whose baselines depend on the search's options overrides that).
    BASELINES: ClassVar[tuple[str, ...]] = ()

    def due_baselines(self, search: Search, trials: Sequence[Trial]) -> tuple[str, ...]:
        """Names of the baseline plans the search must have queued by now: ``BASELINES``."""
        return self.BASELINES

    @abstractmethod
    def baselines(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        options: dict[str, Any],
        names: tuple[str, ...],
        profiles: tuple[Profile, ...] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """The named baselines' plan documents (a name with no plan here is left out); ``profiles``
        as ``RoundAsk.profiles``."""

    @abstractmethod
    def plan_round(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any], ask: RoundAsk
    ) -> RoundPlan:
        """The round's candidate drafts, rank 1 = best predicted."""


def known_options(options: dict[str, Any] | None, defaults: dict[str, Any], kind: str) -> dict[str, Any]:
    """``options`` over ``defaults``; OptionsInvalid naming the first option the kind does not have."""
    raw = dict(options or {})
    unknown = sorted(set(raw) - set(defaults))
    if unknown:
        reason = f"unknown option ({kind} options: {', '.join(defaults)})"
        raise OptionsInvalid([(("plan_options", unknown[0]), reason)])
    return {**defaults, **raw}


def document_key(document: dict[str, Any]) -> str:
    """A plan document's identity: its JSON with sorted keys (what ``ask.tried`` is matched on),
    without the ``profiles`` it was ranked with (a plan is the same plan under another profile)."""
    return json.dumps({k: v for k, v in document.items() if k != "profiles"}, sort_keys=True)


def ranked_round(
    scored: Iterable[tuple[float, BaseModel]],
    ask: RoundAsk,
    features: Callable[[Any], tuple[Any, ...]],
    scorer: str,
) -> RoundPlan:
    """The round of a kind whose plans come ranked by a cost model: the ``ask.k`` best not tried.

    ``scored``: (predicted seconds, plan document) best first. A draft's similarity is the mean,
    over the round's other picks, of the share of ``features`` they have equal (the kind's
    coarse description of a plan, e.g. stage count, group size and micro-batch size).
    """
    tried = {document_key(t) for t in ask.tried}
    picks = [(t, doc) for t, doc in scored if document_key(doc.model_dump(mode="json")) not in tried][: ask.k]
    feats = [features(doc) for _, doc in picks]
    drafts = []
    for rank, ((seconds, doc), f) in enumerate(zip(picks, feats, strict=True), start=1):
        others = [g for i, g in enumerate(feats) if i != rank - 1]
        same = [sum(a == b for a, b in zip(f, g, strict=True)) / len(f) for g in others]
        drafts.append(
            CandidateDraft(
                rank=rank,
                strategy=doc.model_dump(mode="json"),
                predicted_time=seconds,
                similarity=sum(same) / max(1, len(others)),
                scorer=scorer,
            )
        )
    return RoundPlan(tuple(drafts), scorer)
