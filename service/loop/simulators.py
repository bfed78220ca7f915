"""Which scorer a domain's next round uses, and retraining it on measured runtimes.

Scoring (issue 16 items 2-3). The default simulator kind is the transfer ensemble
(``simulator.learned.transfer``): a pretrained version (database domain ``"*"``) is trained on every
collected domain — the runtime records in the database (trials and users' uploads, all domains)
plus the dataset folders in ``RetrainConfig.pretrain_datasets`` — and each domain gets its own
version fine-tuned on its runtimes after every round. A round on domain X uses, in order:

1. X's newest version. For the transfer kind (and X's fine-tuned ``residual`` version, which the
   transfer retraining registers when the residual model ranks X's measured strategies best out
   of fold, or its ``blend`` version, registered while X has 2 to ``ResidualConfig.min_line`` - 1
   measured strategies; ``simulator.learned.pretrained``, ``simulator.learned.tuning``): the hybrid
   scorer (learned where the ensemble agrees, Eq. 1-3 where it does not;
   ``simulator.learned.scoring``) when the fallback rule recorded with the version says learned —
   judged on X's held-out measured strategies (out of fold) once it has ``min_line`` of them; the
   blend in between (learned; with no other measured domain, only from ``min_held_out`` on); on
   leave-one-domain-out accuracy before X's second measurement — otherwise the analytical model.
   For a network kind (rnn, gat, linear): that network if it ranks X's validation split better
   than the analytical model (the older rule).
2. Else (a new domain, first round) the pretrained version, under the same fallback rule (its
   LODO half): the first round of a new domain is scored by transfer when that ranks better.
3. Else the analytical model.

The rule's verdict and evidence are stored in the version's metrics (``decision``), so the API's
simulator list shows why a scorer was (not) used, and each candidate records which scorer ranked it
and its uncertainty.

Retraining runs on its own thread, one domain at a time, from the database's retrain requests (the
loop asks for one after every round; users can ask through the API). A request left 'running' by a
service that died is failed on start-up, so a search never waits on it forever.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from search.round import RoundScorer, RoundScores, scorer_for
from service import domain as d
from service.db import repository as repo
from service.loop.store import domain_specs, retrain_busy
from simulator.analytical import AnalyticalSimulator
from simulator.base import Simulator
from simulator.metrics import pairwise_accuracy
from simulator.spec.io import parse_as
from simulator.spec.strategy import Strategy, strategy_key

log = logging.getLogger("strategist.retrain")


#: Database domain of the pretrained transfer version (trained on every collected domain).
ALL_DOMAINS = "*"
#: Registry kind of the transfer ensemble (``simulator.learned.transfer.KIND``; not imported here,
#: because importing ``simulator.learned`` loads torch and most steps never need it).
TRANSFER = "transfer-linear"
#: Registry kind of a domain's fine-tuned residual model (``simulator.learned.residual.KIND``),
#: which the transfer retraining registers when it ranks the domain best (same fallback rule).
RESIDUAL = "residual"
#: Registry kind of a domain's blend of the two (``simulator.learned.blend.KIND``), which the
#: transfer retraining registers while the domain has few measured strategies.
BLEND = "blend"
#: Kinds whose versions carry the fallback rule's decision and are scored by the hybrid scorer.
RULED = (TRANSFER, RESIDUAL, BLEND)


@dataclass(frozen=True)
class RetrainConfig:
    """How the loop retrains a domain's simulator between rounds."""

    # Learned simulator kind: 'transfer-linear' (the pretrained ensemble fine-tuned per domain, the
    # default), or a per-domain network: 'rnn' (Eqs. 4-7), 'gat' (Eqs. 8-10) or 'linear'.
    kind: str = TRANSFER
    # Dataset folders (datasets/runtimes layout) whose measured domains join the database's runtimes
    # in the transfer training data; empty = the database only (a fresh service then starts on
    # the analytical model until some domain has runtimes).
    pretrain_datasets: tuple[Path, ...] = ()
    # Repeat-run folders of some of those (dataset folder, repeat folder): a repeated domain trains
    # on both runs merged (simulator.learned.runtimes.load_dataset).
    pretrain_repeats: tuple[tuple[Path, Path], ...] = ()
    # Rankers in the transfer ensemble (its disagreement is the hybrid scorer's uncertainty).
    transfer_members: int = 5
    # Training epochs; fewer than AutoSync's 200 because retraining sits between rounds on 2 cores
    # (learning-rate milestones scale with it).
    epochs: int = 60
    # Distinct measured strategies a domain needs before a network is trained at all (the transfer
    # ensemble fine-tunes from 2: its fallback rule decides whether they suffice).
    min_records: int = 12
    # Seed of the train/validation/test split and of training.
    seed: int = 0


def current_simulator(
    session: Session, domain: str, registry_dir: Path | None
) -> tuple[Simulator, d.SimulatorVersion | None]:
    """The simulator to score a domain's next round with, and its version (None: analytical)."""
    return load_simulator(usable_version(session, domain, registry_dir), registry_dir)


def usable_version(session: Session, domain: str, registry_dir: Path | None) -> d.SimulatorVersion | None:
    """The version to score the domain's next round with (module docstring); None: analytical."""
    if registry_dir is None:
        return None
    version = repo.latest_simulator_version(session, domain=domain)
    if version is None:
        version = repo.latest_simulator_version(session, domain=ALL_DOMAINS, kind=TRANSFER)
    if version is None or version.path is None:
        return None
    if version.kind in RULED:
        return version if (version.metrics.get("decision") or {}).get("choice") == "learned" else None
    return version if _beats_analytical(version) else None


def load_simulator(
    version: d.SimulatorVersion | None, registry_dir: Path | None
) -> tuple[Simulator, d.SimulatorVersion | None]:
    """Load ``version`` from the registry (no database: a round's job process calls this)."""
    if version is None or version.path is None or registry_dir is None:
        return AnalyticalSimulator(), None
    from simulator.learned import Registry

    try:
        return Registry(registry_dir).load(version.path), version
    except (KeyError, ValueError, OSError) as e:  # a missing or outdated checkpoint: fall back
        log.warning(
            "simulator version %s of %s not loadable (%s); using analytical", version.id, version.domain, e
        )
        return AnalyticalSimulator(), None


def load_scorer(
    version: d.SimulatorVersion | None, registry_dir: Path | None
) -> tuple[RoundScorer, d.SimulatorVersion | None]:
    """The round scorer of ``version``: the hybrid scorer for a transfer version, else the
    simulator's (``search.round.scorer_for``); the analytical scorer when it cannot be loaded."""
    simulator, used = load_simulator(version, registry_dir)
    if used is None or used.kind not in RULED:  # no torch import for the analytical model (job budgets)
        return scorer_for(simulator), used
    from simulator.learned.residual import Ranker
    from simulator.learned.scoring import HybridScorer

    if isinstance(simulator, Ranker):
        return HybridScorer(simulator, make_scores=RoundScores), used
    return scorer_for(simulator), used


def _beats_analytical(version: d.SimulatorVersion) -> bool:
    learned = (version.metrics.get("val") or {}).get("pairwise_accuracy")
    analytical = (version.metrics.get("analytical_val") or {}).get("pairwise_accuracy")
    return learned is not None and analytical is not None and learned > analytical


class Retrainer:
    """Runs retrain requests on a background thread; ``poll`` starts the next pending one."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry_dir: Path | None = None,
        config: RetrainConfig = RetrainConfig(),
    ) -> None:
        self.sessions = sessions
        self.registry_dir = registry_dir
        self.config = config
        self._thread: threading.Thread | None = None
        self._recovered = False

    def request(self, domain: str) -> None:
        with self.sessions() as s:
            repo.request_retrain(s, domain=domain, requested_by=None)

    def busy(self, domain: str) -> bool:
        with self.sessions() as s:
            return retrain_busy(s, domain=domain)

    def poll(self) -> None:
        """Start the oldest pending request if no retraining is running in this process."""
        if not self._recovered:
            self._recover()
        if self._thread is not None and self._thread.is_alive():
            return
        with self.sessions() as s:
            pending = repo.list_retrain_requests(s, states=["pending"])
        for req in pending:
            with self.sessions() as s:
                taken = repo.start_retrain(s, request_id=req.id)
            if taken is not None:
                self._thread = threading.Thread(target=self._run, args=(taken,), name="retrain", daemon=True)
                self._thread.start()
                return

    def stop(self) -> None:
        """Wait for a retraining in progress (training cannot be interrupted halfway cleanly)."""
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _recover(self) -> None:
        with self.sessions() as s:
            stuck = repo.list_retrain_requests(s, states=["running"])
        for req in stuck:
            with self.sessions() as s:
                repo.finish_retrain(
                    s, request_id=req.id, simulator_version_id=None, error="interrupted by a service restart"
                )
        self._recovered = True

    def _run(self, req: d.RetrainRequest) -> None:
        try:
            version = self.retrain(req.domain)
            with self.sessions() as s:
                repo.finish_retrain(
                    s, request_id=req.id, simulator_version_id=version.id if version else None
                )
        except Exception as e:  # a failed retraining leaves the previous simulator in use
            log.exception("retraining %s failed", req.domain)
            with self.sessions() as s:
                repo.finish_retrain(s, request_id=req.id, simulator_version_id=None, error=f"{e}"[:2000])

    def retrain(self, domain: str) -> d.SimulatorVersion | None:
        """Train a new version on the domain's runtimes; None when there are too few to learn from."""
        if self.config.kind == TRANSFER:
            if self.registry_dir is None:
                return None
            return retrain_transfer(self.sessions, self.registry_dir, self.config, domain)
        with self.sessions() as s:
            records, site = one_site(repo.list_runtimes(s, domain=domain, shared_only=True))
        distinct = len({strategy_key(r.strategy) for r in records})
        if distinct < self.config.min_records or self.registry_dir is None:
            log.info("retrain %s: %s distinct strategies < %s; keeping the current simulator",
                     domain, distinct, self.config.min_records)  # fmt: skip
            return None
        # Imported here: torch-geometric takes seconds to import, and most steps never train.
        from simulator.learned import Domain, Registry, TrainConfig, train_version

        with self.sessions() as s:
            model, cluster = domain_specs(s, domain=domain, shared=True)
        data = Domain.from_measurements(
            model, cluster, [(parse_as(Strategy, r.strategy), r.median_time) for r in records]
        )
        epochs = self.config.epochs
        train_cfg = TrainConfig(
            kind=self.config.kind,  # type: ignore[arg-type]
            epochs=epochs,
            milestones=(int(epochs * 0.4), int(epochs * 0.8)),
            seed=self.config.seed,
            eval_every=max(1, epochs // 12),
        )
        info = train_version([data], Registry(self.registry_dir), train_cfg, split_seed=self.config.seed)
        metrics: dict[str, Any] = {**info.metrics.get(data.name, {}), "site": site}
        _, val, _ = data.split(self.config.seed)
        if len(val) >= 2:
            predicted = AnalyticalSimulator().predict(model, cluster, list(val.strategies))
            metrics["analytical_val"] = {
                "pairwise_accuracy": _finite(pairwise_accuracy(predicted, val.times))
            }
        with self.sessions() as s:
            return repo.add_simulator_version(
                s, domain=domain, kind=info.kind, metrics=metrics, path=info.version, n_records=len(data)
            )


def one_site(records: list[d.RuntimeRecord]) -> tuple[list[d.RuntimeRecord], dict[str, Any]]:
    """One site per domain (issue 41): the records a domain's simulator trains on, and the note.

    Runtimes measured on a real cluster (an agent pool's nodes, a gpu-pool host) and on the
    emulated testbed are not the same function of the strategy, so one domain's training data
    never mixes them: when both are present only the real cluster's records are used, and the
    note says how many testbed records were left out. A record that does not say where it was
    measured (``measured_on`` NULL: older records, user uploads that did not say) counts as the
    testbed's, and the note says how many did not say. The note is stored in the version's
    metrics (``site``), so GET /simulators shows it.
    """

    def site(r: d.RuntimeRecord) -> str:
        return str((r.measured_on or {}).get("site") or "testbed")

    by_site: dict[str, list[d.RuntimeRecord]] = {}
    for r in records:
        by_site.setdefault(site(r), []).append(r)
    chosen = "cluster" if "cluster" in by_site else "testbed"
    kept = by_site.get(chosen, [])
    left = {k: len(v) for k, v in sorted(by_site.items()) if k != chosen}
    unsaid = sum(1 for r in kept if r.measured_on is None)
    note: dict[str, Any] = {
        "site": chosen,
        "used": len(kept),
        "left_out": left,
        "unrecorded_as_testbed": unsaid,
    }
    parts = [f"trained on {len(kept)} {chosen} runtimes"]
    if left:
        parts.append("left out " + ", ".join(f"{n} {k}" for k, n in left.items()) + " (one site per domain)")
    if unsaid:
        parts.append(f"{unsaid} did not say where they were measured (counted as testbed)")
    note["note"] = "; ".join(parts)
    return kept, note


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


class _TransferRetrain:
    """Builds the transfer training sets: the database's runtimes per domain plus the datasets."""

    @staticmethod
    def sets(
        sessions: sessionmaker[Session],
        datasets: tuple[Path, ...],
        repeats: tuple[tuple[Path, Path], ...] = (),
        sites: dict[str, dict[str, Any]] | None = None,
    ) -> list[Any]:
        from simulator.learned import Domain
        from simulator.learned.pretrained import TrainingSet, dataset_sets

        with sessions() as s:
            records = repo.list_runtimes(s, shared_only=True)  # nothing a user uploaded (issue 44)
        by_domain: dict[str, list[d.RuntimeRecord]] = {}
        for r in records:
            by_domain.setdefault(r.domain, []).append(r)
        out = []
        for name, all_recs in sorted(by_domain.items()):
            recs, note = one_site(all_recs)  # one site per domain (issue 41)
            if sites is not None:
                sites[name] = note
            try:
                with sessions() as s:
                    model, cluster = domain_specs(s, domain=name, shared=True)
            except d.NotFound:  # uploads of a domain no search runs on: its specs are unknown
                log.info(
                    "transfer: %s has %s runtimes but no search gives its specs; left out", name, len(recs)
                )
                continue
            data = Domain.from_measurements(
                model, cluster, [(parse_as(Strategy, r.strategy), r.median_time) for r in recs]
            )
            out.append(TrainingSet(f"service/{name}", data, tuple(r.id for r in recs)))
        return out + dataset_sets(list(datasets), dict(repeats))


def _register_transfer(
    sessions: sessionmaker[Session],
    *,
    domain: str,
    info: Any,
    decision: Any,
    records: int,
    site: dict[str, Any] | None = None,
) -> d.SimulatorVersion:
    metrics: dict[str, Any] = {"decision": decision.as_dict(), "sets": info.metrics}
    if site is not None:  # one_site's note: which site's runtimes (per domain, for the pretrained one)
        metrics["site"] = site
    with sessions() as s:
        return repo.add_simulator_version(
            s, domain=domain, kind=info.kind, metrics=metrics, path=info.version, n_records=records
        )


def retrain_transfer(
    sessions: sessionmaker[Session], registry_dir: Path, config: RetrainConfig, domain: str
) -> d.SimulatorVersion | None:
    """Pretrain the transfer ensemble on every set, then fine-tune it on ``domain``'s runtimes.

    Registers two versions: the pretrained one (domain ``"*"``, what a new domain's first round
    uses) and ``domain``'s fine-tuned one (returned); None when there is no training data at all,
    or only the pretrained one when ``domain`` has fewer than two runtimes here.
    """
    from simulator.learned import Registry
    from simulator.learned.pretrained import pretrain_version
    from simulator.learned.transfer import TransferConfig

    sites: dict[str, dict[str, Any]] = {}
    sets = _TransferRetrain.sets(sessions, config.pretrain_datasets, config.pretrain_repeats, sites)
    sets = [t for t in sets if len(t.domain) >= 2]
    if not sets:
        log.info("transfer: no domain has two measured strategies yet; keeping the analytical model")
        return None
    cfg = TransferConfig(members=config.transfer_members, seed=config.seed)
    registry = Registry(registry_dir)
    info, decision = pretrain_version(sets, registry, cfg)
    total = sum(len(t.domain) for t in sets)
    _register_transfer(sessions, domain=ALL_DOMAINS, info=info, decision=decision, records=total,
                       site={"domains": sites})  # fmt: skip
    target = f"service/{domain}"
    if domain == ALL_DOMAINS or target not in {t.label for t in sets}:
        return None
    info, decision = pretrain_version(sets, registry, cfg, target=target)
    log.info("transfer %s: %s (%s)", domain, decision.choice, decision.as_dict())
    n = next(len(t.domain) for t in sets if t.label == target)
    return _register_transfer(
        sessions, domain=domain, info=info, decision=decision, records=n, site=sites.get(domain)
    )
