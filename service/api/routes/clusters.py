"""/clusters: upload (validated), list and get cluster specs; the zoo's clusters by name."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response, status

from service.api.deps import SessionDep, UserDep, ZooDep, owner_filter
from service.api.errors import parse_request
from service.api.openapi import spec_body
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath
from service.api.schemas.specs import ClusterPublic, ClustersPublic, ClusterSummary, ZooPublic
from service.db import repository as repo
from service.domain import NotFound
from simulator import zoo
from simulator.spec import ClusterSpec

router = APIRouter(prefix="/clusters", tags=["clusters"])

_EXAMPLE = {
    "kind": "cluster",
    "name": "two-node",
    "device_types": [
        {"name": "T4", "fp32_tflops": 8.1, "fp16_tflops": 65, "memory_gb": 16, "memory_bw_gbs": 320}
    ],
    "nodes": [
        {"name": "n0", "device": "T4", "gpus": 1, "nic_gbps": 10},
        {"name": "n1", "device": "T4", "gpus": 1, "nic_gbps": 10},
    ],
    "intra_node_gbps": 100,
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ClusterPublic,
    openapi_extra=spec_body(ClusterSpec),
)
def upload_cluster(
    session: SessionDep,
    user: UserDep,
    body: Annotated[dict[str, Any], Body(openapi_examples={"two-node": {"value": _EXAMPLE}})],
) -> ClusterPublic:
    """Upload a ClusterSpec; 422 with the field path of every problem, and nothing stored."""
    spec = parse_request(ClusterSpec, body)
    return ClusterPublic.of(repo.store_spec(session, spec=spec, owner_id=user.user_id), spec)


@router.get("", response_model=ClustersPublic)
def list_clusters(
    session: SessionDep, user: UserDep, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> ClustersPublic:
    """Your uploaded clusters, newest first (an admin: everyone's), paged: summaries (name, owner,
    sizes), so a page's bytes do not grow with the specs; the full spec is at ``/clusters/{id}``."""
    recs = repo.list_spec_summaries(
        session, kind="cluster", viewer_id=owner_filter(user), after=cursor, limit=fetch(limit)
    )
    shown, next_cursor = page(recs, limit)
    data = [ClusterSummary.of_summary(r) for r in shown]
    return ClustersPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/zoo", response_model=ZooPublic)
def list_zoo_clusters(user: UserDep) -> ZooPublic:
    """Names of the built-in zoo's clusters (usable in a search without uploading)."""
    names = zoo.cluster_names()
    return ZooPublic(data=names, count=len(names))


@router.get(
    "/zoo/{name}",
    response_model=ClusterPublic,
    responses={304: {"description": "Not modified (If-None-Match)."}},
)
async def get_zoo_cluster(name: str, request: Request, zoo_cache: ZooDep, user: UserDep) -> Response:
    """A zoo cluster by name; 404 if the zoo has none.

    Rendered once per process and served from memory with an ETag; ``If-None-Match`` with the
    current one gets 304 (`service.api.zoo_cache`).
    """
    return await zoo_cache.response(request, kind="cluster", name=name)


@router.get("/{cluster_id}", response_model=ClusterPublic)
def get_cluster(cluster_id: IdPath, session: SessionDep, user: UserDep) -> ClusterPublic:
    """A stored cluster: yours or a zoo copy (404 for another user's)."""
    rec = repo.get_spec(session, spec_id=cluster_id, viewer_id=owner_filter(user))
    if rec.kind != "cluster":
        raise NotFound(f"no cluster {cluster_id}")
    return ClusterPublic.of(rec)
