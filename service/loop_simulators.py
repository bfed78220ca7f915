"""The newest simulator of a domain, and retraining it on the domain's measured runtimes.

Scoring (AutoSync's loop): at cold start the analytical model; once a learned simulator has been
trained on the domain's measurements, that one, but only if it ranks the domain's validation
strategies better than the analytical model does (pairwise accuracy on the same validation split,
both recorded in the version's metrics). A network trained on a dozen points is often worse than
Eq. 1-3, and the loop should not trade a good ranker for a bad one just because it is newer.

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

from service import domain as d
from service.db import repository as repo
from service.loop_round import strategy_key
from service.loop_store import domain_specs, retrain_busy
from simulator.analytical import AnalyticalSimulator
from simulator.base import Simulator
from simulator.metrics import pairwise_accuracy
from simulator.spec.io import parse_as
from simulator.spec.strategy import Strategy

log = logging.getLogger("strategist.retrain")


@dataclass(frozen=True)
class RetrainConfig:
    """How the loop retrains a domain's simulator between rounds."""

    # Learned simulator kind: 'rnn' (Eqs. 4-7), 'gat' (Eqs. 8-10) or 'linear'.
    kind: str = "rnn"
    # Training epochs; fewer than AutoSync's 200 because retraining sits between rounds on 2 cores
    # (learning-rate milestones scale with it).
    epochs: int = 60
    # Distinct measured strategies a domain needs before a learned simulator is trained at all.
    min_records: int = 12
    # Seed of the train/validation/test split and of training.
    seed: int = 0


def current_simulator(
    session: Session, domain: str, registry_dir: Path | None
) -> tuple[Simulator, d.SimulatorVersion | None]:
    """The simulator to score a domain's next round with, and its version (None: analytical)."""
    return load_simulator(usable_version(session, domain, registry_dir), registry_dir)


def usable_version(session: Session, domain: str, registry_dir: Path | None) -> d.SimulatorVersion | None:
    """The domain's newest learned version if it beats the analytical model (None: analytical)."""
    version = repo.latest_simulator_version(session, domain=domain)
    if version is None or version.path is None or registry_dir is None or not _beats_analytical(version):
        return None
    return version


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
        with self.sessions() as s:
            records = repo.list_runtimes(s, domain=domain)
        distinct = len({strategy_key(r.strategy) for r in records})
        if distinct < self.config.min_records or self.registry_dir is None:
            log.info("retrain %s: %s distinct strategies < %s; keeping the current simulator",
                     domain, distinct, self.config.min_records)  # fmt: skip
            return None
        # Imported here: torch-geometric takes seconds to import, and most steps never train.
        from simulator.learned import Domain, Registry, TrainConfig, train_version

        with self.sessions() as s:
            model, cluster = domain_specs(s, domain=domain)
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
        metrics: dict[str, Any] = dict(info.metrics.get(data.name, {}))
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


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
