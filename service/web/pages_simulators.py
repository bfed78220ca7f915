"""Dashboard page of simulators: versions per domain, accuracy over time, predicted vs measured."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service import domain as d
from service.api.deps import SessionDep, SettingsDep
from service.db import repository as repo
from service.loop.store import domain_specs
from service.web.auth import WebUser
from service.web.render import page
from simulator.analytical import AnalyticalSimulator
from simulator.base import Simulator
from simulator.spec import SpecError

router = APIRouter()
log = logging.getLogger("strategist.web")

#: Metric splits shown, best evidence first (test data was never used to pick a version).
SPLITS = ("test", "val")
#: Runtime records plotted at most per domain (the newest ones).
SCATTER_POINTS = 400


def accuracy_series(versions: list[d.SimulatorVersion]) -> dict[str, dict[str, list[Any]]]:
    """Per domain: version creation times and their pairwise accuracy on the first split available."""
    out: dict[str, dict[str, list[Any]]] = {}
    for v in versions:
        for split in SPLITS:
            acc = (v.metrics.get(split) or {}).get("pairwise_accuracy")
            if acc is not None:
                series = out.setdefault(v.domain, {"x": [], "y": [], "split": [], "version": []})
                series["x"].append(v.created_at.isoformat())
                series["y"].append(acc)
                series["split"].append(split)
                series["version"].append(v.version)
                break
    return out


def _load(settings_dir: Any, version: d.SimulatorVersion) -> Simulator | None:
    if version.path is None:
        return None
    from simulator.learned import Registry

    try:
        return Registry(settings_dir).load(version.path)
    except (KeyError, ValueError, OSError) as e:
        log.warning("simulator version %s not loadable: %s", version.id, e)
        return None


@router.get("/simulators", response_class=HTMLResponse)
def simulators(request: Request, session: SessionDep, settings: SettingsDep, user: WebUser) -> HTMLResponse:
    versions = repo.list_simulator_versions(session)
    latest = versions[-1] if versions else None
    scatter: dict[str, Any] | None = None
    note = None
    if latest is not None:
        records = repo.list_runtimes(session, domain=latest.domain, shared_only=True)[-SCATTER_POINTS:]
        try:
            model, cluster = domain_specs(session, domain=latest.domain, shared=True)
            strategies = [r.strategy_spec() for r in records]
        except (d.NotFound, SpecError) as e:
            note = f"cannot replay the domain's runtimes: {e}"
            strategies = []
        if strategies:
            measured = [r.median_time for r in records]
            scatter = {
                "measured": measured,
                "analytical": AnalyticalSimulator().predict(model, cluster, strategies).tolist(),
            }
            learned = _load(settings.simulators_path, latest)
            if learned is not None:
                scatter["learned"] = learned.predict(model, cluster, strategies).tolist()
                scatter["learned_is_ranker"] = learned.is_ranker
            else:
                note = f"version {latest.version} ({latest.kind}) has no loadable checkpoint; analytical only"
    return page(
        request,
        "simulators.html",
        versions=list(reversed(versions)),
        latest=latest,
        series=accuracy_series(versions),
        scatter=scatter,
        note=note,
    )
