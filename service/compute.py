"""T_comp of a model on a cluster with the measured profiles the service stores (issue 15).

The one compute function (``simulator.analytical.compute.layer_times``) with every stored profile
in ``CostParams.profiles``: a profile for the slowest node's (model, device, dtype, batch) key
replaces the roofline, and the answer says which was used.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from service.db import repository as repo
from simulator.analytical import CostParams
from simulator.analytical import formulas as f


@dataclass(frozen=True)
class ComputeEstimate:
    """T_comp of one step on the slowest worker node and where it came from."""

    model: str
    cluster: str
    device: str
    t_comp: float
    compute_source: str
    profiled_layers: int


def cost_params(session: Session, *, owner_id: int | None, model: str | None = None) -> CostParams:
    """Default cost constants plus the stored profiles ``owner_id`` uses (of ``model`` if given):
    their own and the zoo-wide ones (`service.db.repo_profiles`)."""
    return CostParams().with_profiles(repo.profiles_in_use(session, owner_id=owner_id, model=model))


def estimate_compute(
    session: Session, *, model: str | int, cluster: str | int, owner_id: int
) -> ComputeEstimate:
    """T_comp of ``model`` (name or id) on ``cluster`` with the stored profiles; NotFound if unknown."""
    m = repo.resolve_spec(session, kind="model", ref=model, owner_id=owner_id).model_spec()
    c = repo.resolve_spec(session, kind="cluster", ref=cluster, owner_id=owner_id).cluster_spec()
    params = cost_params(session, owner_id=owner_id, model=m.name)
    times = f.compute_source(m, c, params)
    node_t = f.node_compute_times(m, c, params)
    slowest = max(node_t, key=lambda k: node_t[k])
    return ComputeEstimate(
        model=m.name,
        cluster=c.name,
        device=c.device_type(slowest).name,
        t_comp=times.step,
        compute_source=times.source,
        profiled_layers=times.profiled_layers,
    )
