"""The pretrained transfer simulator of the service: trained on every collected domain, saved with provenance.

``pretrain_version(sets, registry)`` fits ``transfer.TransferEnsemble`` on every training set (a
measured domain from a dataset folder, or a domain's runtime records in the service's database),
computes its leave-one-domain-out metrics next to the analytical model's, applies the fallback
rule's LODO half, and saves a registry version whose metadata says exactly which runtimes trained
it: per set the files (path, sha256, records) or the database's runtime-record ids, the sha256 of
every distinct strategy key, and the code commit. With ``target`` it is the fine-tuned version of
one set (the domain a search runs on), made by ``tuning.fine_tune``: every other set a source;
with at least ``ResidualConfig.min_line`` measured strategies of the target, the residual model
(on log Eq. 1-3 or on the domain's price list, + learned residual, kind ``residual``), the
transfer ensemble fine-tuned on the target or Eq. 1-3, whichever ranks the target's strategies
best out of fold (the version then holds the chosen learned model, or the fine-tuned transfer
ensemble with the decision "analytical"); with 2 to ``min_line`` - 1, the blend of the fine-tuned
transfer ensemble and the residual model (kind ``blend``, decision learned, evidence "few"); with
fewer (or, without another domain, fewer than ``min_held_out``), the fine-tuned transfer ensemble
under the rule's LODO half.

Metadata (``VersionInfo``): kind ``transfer-linear`` (or ``residual``, or ``blend``);
``domains`` = provenance per set;
``metrics`` = ``{set: {"lodo": {"pairwise_accuracy"}, "analytical": {...}}}`` (plus, with a
target, ``{target: {"held_out": ..., "analytical_held_out": ...}}``); ``notes["decision"]`` =
``ScorerDecision.as_dict()``, ``notes["code"]`` = commit, ``notes["target"]``, and with a target
``notes["fine_tune"]`` = ``FineTuneDecision.as_dict()`` (every candidate's out-of-fold accuracy).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from simulator.learned.data import Domain
from simulator.learned.registry import Registry, VersionInfo
from simulator.learned.residual import Ranker, ResidualConfig
from simulator.learned.runtimes import MergedRuns, load_dataset
from simulator.learned.transfer import (
    DomainZ,
    EnsembleTrainer,
    ScorerDecision,
    TransferConfig,
    choose_from_lodo,
    code_commit,
    domain_z,
    key_digest,
    lodo_metrics,
)
from simulator.learned.tuning import FineTuneDecision, fine_tune


@dataclass(frozen=True)
class TrainingSet:
    """Measured runtimes of one domain from one source, with where they came from.

    label: unique name of the set ("runtimes-v2/BERT-3L__B5", "service/BERT-3L__B5");
    runtime_record_ids: the service database's record ids when the set came from it;
    merged: the runs merged into ``domain`` when the dataset has a repeat run of it.
    """

    label: str
    domain: Domain
    runtime_record_ids: tuple[int, ...] = ()
    merged: MergedRuns | None = None


def dataset_sets(roots: Sequence[Path], repeats: Mapping[Path, Path] | None = None) -> list[TrainingSet]:
    """Every measured domain under each dataset folder, labelled "<folder name>/<domain>"; a root
    with a repeat folder (``repeats``: root -> repeat root) has each repeated domain's runs merged
    (``runtimes.load_dataset``): labels averaging two runs, half the label noise variance."""
    again = {k.resolve(): v for k, v in (repeats or {}).items()}
    out = []
    for root in roots:
        for d in load_dataset(root, again.get(root.resolve())):
            out.append(TrainingSet(f"{root.name}/{d.domain.name}", d.domain, merged=d.merged))
    return out


def provenance(sets: Sequence[TrainingSet]) -> list[dict[str, Any]]:
    """Per training set: label, domain, records, data sha256, source files, strategy-key digests,
    and the database's runtime-record ids when it came from the service."""
    out = []
    for s in sets:
        d = s.domain
        h = hashlib.sha256()
        for key, t in zip(d.keys, d.times, strict=True):
            h.update(f"{key}:{t:.9g};".encode())
        entry: dict[str, Any] = {
            "name": s.label,
            "domain": d.name,
            "records": len(d),
            "data_sha256": h.hexdigest(),
            "files": [{"path": f.path, "records": f.records, "sha256": f.sha256} for f in d.sources],
            "strategy_keys_sha256": [key_digest(k) for k in d.keys],
        }
        if s.runtime_record_ids:
            entry["runtime_record_ids"] = sorted(s.runtime_record_ids)
        if s.merged is not None:  # which files are which run, and the drift each was divided by
            entry["runs"] = [
                {"files": [f.path for f in run.sources], "drift": drift}
                for run, drift in zip(s.merged.inputs, s.merged.drift, strict=True)
            ]
        out.append(entry)
    return out


def _finite(x: float) -> float | None:
    return None if x != x else float(x)


def pretrain_version(
    sets: Sequence[TrainingSet],
    registry: Registry,
    config: TransferConfig = TransferConfig(),
    *,
    target: str | None = None,
    notes: dict[str, Any] | None = None,
    residual: ResidualConfig = ResidualConfig(),
) -> tuple[VersionInfo, ScorerDecision]:
    """Train, evaluate (LODO; held-out on ``target``) and save one transfer version (module docstring)."""
    labels = [s.label for s in sets]
    if len(set(labels)) != len(labels):
        raise ValueError(f"sets: labels must be unique, got {labels}")
    if target is not None and target not in labels:
        raise KeyError(f"target: no training set {target!r}; known: {', '.join(labels)}")
    zs = {s.label: domain_z(s.domain, s.label) for s in sets if len(s.domain)}
    lodo = lodo_metrics(list(zs.values()), config)
    sources = [z for name, z in zs.items() if name != target]
    trainer = EnsembleTrainer(sources, config)
    target_z: DomainZ | None = zs.get(target) if target is not None else None
    tuned: FineTuneDecision | None = None
    if target is None:
        model: Ranker = trainer.fit()
        decision = choose_from_lodo(lodo)
    else:
        ranker, tuned = fine_tune(trainer, target_z, lodo, residual)
        model = ranker if ranker is not None else trainer.fit(target_z)
        decision = _as_scorer_decision(tuned)
    metrics: dict[str, dict[str, dict[str, Any]]] = {
        name: {k: {"pairwise_accuracy": _finite(v["pairwise_accuracy"])} for k, v in m.items()}
        for name, m in lodo.items()
    }
    # Out-of-fold evidence on the target: the chosen model's, or the blend's (from min_held_out on).
    if (
        target is not None
        and decision.evidence != "lodo"
        and decision.learned_accuracy == decision.learned_accuracy
    ):
        metrics.setdefault(target, {})["held_out"] = {"pairwise_accuracy": _finite(decision.learned_accuracy)}
        metrics[target]["analytical_held_out"] = {"pairwise_accuracy": _finite(decision.analytical_accuracy)}
    extra = {"fine_tune": tuned.as_dict()} if tuned is not None else {}
    info = registry.save(
        model,
        config={**config.as_dict(), "target": target, "residual": residual.as_dict()},
        domains=provenance(sets),
        metrics=metrics,
        notes={
            **(notes or {}),
            "decision": decision.as_dict(),
            "code": code_commit(),
            "target": target,
            **extra,
        },
    )
    return info, decision


#: ``FineTuneDecision.evidence`` in ``ScorerDecision``'s words.
_EVIDENCE: dict[str, Literal["held-out", "lodo", "few"]] = {
    "cross-validated": "held-out",
    "lodo": "lodo",
    "few": "few",
}


def _as_scorer_decision(tuned: FineTuneDecision) -> ScorerDecision:
    """``fine_tune``'s verdict in the fallback rule's terms (what the service reads): learned when
    a learned model was chosen; its accuracy is the chosen (else the best learned) candidate's."""
    acc = tuned.accuracy
    learned = [c for c in ("physical", "residual", "transfer", "blend") if c in acc and acc[c] == acc[c]]
    best: str | None = tuned.choice if tuned.choice != "analytical" else None
    if best is None and learned:
        best = max(learned, key=lambda c: acc[c])
    return ScorerDecision(
        "analytical" if tuned.choice == "analytical" else "learned",
        _EVIDENCE[tuned.evidence],
        acc.get(best, float("nan")) if best is not None else float("nan"),
        acc.get("analytical", float("nan")),
        tuned.strategies,
    )
