"""Data access the loop needs beyond `service.db.repository`, built only from its public functions."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service import domain as d
from service.db import repository as repo
from simulator.spec import ClusterSpec, ModelSpec


def search_specs(session: Session, *, search: d.Search) -> tuple[ModelSpec, ClusterSpec]:
    """The model and cluster specs a search runs on."""
    model = repo.get_spec(session, spec_id=search.model_spec_id, viewer_id=None).model_spec()
    cluster = repo.get_spec(session, spec_id=search.cluster_spec_id, viewer_id=None).cluster_spec()
    return model, cluster


def domain_specs(session: Session, *, domain: str) -> tuple[ModelSpec, ClusterSpec]:
    """The specs of a domain, taken from its newest search; NotFound when no search has it."""
    for search in repo.list_searches(session):  # newest first
        if search.domain == domain:
            return search_specs(session, search=search)
    raise d.NotFound(f"no search runs on domain {domain!r}, so its specs are unknown")


def retrain_busy(session: Session, *, domain: str) -> bool:
    """True while a retraining of ``domain`` is pending or running."""
    return bool(repo.list_retrain_requests(session, domain=domain, states=["pending", "running"]))
