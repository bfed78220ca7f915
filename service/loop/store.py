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


def domain_specs(session: Session, *, domain: str, shared: bool = False) -> tuple[ModelSpec, ClusterSpec]:
    """The specs of a domain, taken from its newest search; NotFound when no search has it.

    ``shared`` (training the shared simulators): only a search on zoo specs gives them, so a user
    who uploads a model under a zoo model's name cannot change what the shared training sees.
    """
    for search in repo.list_searches(session):  # newest first
        if search.domain == domain and (not shared or _on_zoo_specs(session, search)):
            return search_specs(session, search=search)
    raise d.NotFound(f"no search runs on domain {domain!r}, so its specs are unknown")


def _on_zoo_specs(session: Session, search: d.Search) -> bool:
    return all(
        repo.get_spec(session, spec_id=i, viewer_id=None).origin == "zoo"
        for i in (search.model_spec_id, search.cluster_spec_id)
    )


def retrain_busy(session: Session, *, domain: str) -> bool:
    """True while a retraining of ``domain`` is pending or running."""
    return bool(repo.list_retrain_requests(session, domain=domain, states=["pending", "running"]))
