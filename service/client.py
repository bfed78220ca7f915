"""A typed Python client of the strategist API, for training pipelines (and the CLI itself).

    from service.client import StrategistClient

    with StrategistClient("http://strategist:8000", token) as api:
        search = api.create_search(model="ResNet50", cluster="B1", trial_budget=8)
        final = api.wait(search.id, on_progress=lambda st: print(st.candidate_trials_done))
        best = api.best_plan(search.id)              # the kind's plan document (a Strategy for sync)
        api.upload_runtime(model="ResNet50", cluster="B1", strategy=best, iteration_times=[0.41, 0.40])

Decisions:

- Requests and responses are the API's own schemas (``service.api.schemas``), so the client cannot
  drift from the server: a field the server adds or renames is a validation error here at once.
- Every HTTP 4xx/5xx raises :class:`ApiError` carrying the status and the API's ``detail`` (a string,
  or FastAPI's list of field errors, rendered as ``field.path: message`` in the exception's text).
  Transport failures (connection refused, timeouts) stay ``httpx.TransportError``.
- Synchronous (a pipeline step is synchronous); one ``httpx.Client`` per instance, closed by
  :meth:`close` or ``with``. ``transport`` replaces the network, e.g. to drive an app in process.
- :meth:`wait` polls ``GET /searches/{id}`` (``interval_s``) and calls ``on_progress`` with each status,
  including the final one; it returns on ``completed``, ``cancelled`` or ``failed`` and raises
  ``TimeoutError`` after ``timeout_s`` (none by default). A search runs for minutes to hours, so one
  dropped poll must not lose it: a transport error or a 502/503/504 (a restarting server or its
  proxy) is retried on the next poll, up to ``max_poll_failures`` in a row, then raised. Any
  other error (401 revoked token, 404) is raised at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, cast

import httpx
from pydantic import BaseModel

from service.api.schemas.costs import CostsPublic
from service.api.schemas.exports import TrialsExportPublic
from service.api.schemas.runtimes import RuntimeCreate, RuntimePublic, RuntimesPublic
from service.api.schemas.searches import (
    RoundPublic,
    RoundsPublic,
    SearchCreate,
    SearchesPublic,
    SearchPublic,
    SearchStatusPublic,
)
from service.api.schemas.specs import (
    ClusterPublic,
    ClustersPublic,
    ClusterSummary,
    ModelPublic,
    ModelsPublic,
    ModelSummary,
)
from service.api.schemas.trials import CandidatePublic, CandidatesPublic, TrialPublic, TrialsPublic
from simulator.spec import ClusterSpec, ModelSpec, Strategy

if TYPE_CHECKING:
    from runtime.worker.plan_heterogeneous import HeterogeneousPlan
    from runtime.worker.plan_pipeline import PipelineTrial
    from simulator.spec import HybridPlan
    from simulator.spec.planfile import PlanFile


def plan_of(document: dict[str, Any]) -> Strategy | PipelineTrial | HybridPlan | HeterogeneousPlan:
    """A trial's plan document validated as its kind's model (``SpecError``/``ValidationError`` if bad)."""
    kind = document.get("kind", "strategy")
    if kind == "pipeline":
        from runtime.worker.plan_pipeline import PipelineTrial

        return PipelineTrial.model_validate(document)
    if kind == "hybrid":
        from simulator.spec.hybrid import plan_document

        return plan_document(document)[0]
    if kind == "heterogeneous_plan":
        from runtime.worker.plan_heterogeneous import HeterogeneousPlan

        return HeterogeneousPlan.model_validate(document)
    return Strategy.model_validate(document)


#: Search states after which nothing changes.
FINAL_STATES = frozenset({"completed", "cancelled", "failed"})

#: Answers of a restarting server or its proxy: :meth:`StrategistClient.wait` polls again.
RETRYABLE_STATUS = frozenset({502, 503, 504})

ProgressCallback = Callable[[SearchStatusPublic], None]
M = TypeVar("M", bound=BaseModel)


class _Page(Protocol):
    """What every paged list answer has (``service.api.paging``)."""

    @property
    def data(self) -> Sequence[Any]: ...

    @property
    def next_cursor(self) -> int | None: ...


class ApiError(Exception):
    """The API answered 4xx/5xx. ``status``: the HTTP status; ``detail``: the API's error detail."""

    def __init__(self, status: int, detail: Any, method: str = "", url: str = "") -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.url = url
        super().__init__(f"HTTP {status}: {detail_text(detail)}")


def detail_text(detail: Any) -> str:
    """The API's ``detail`` in one line; FastAPI's validation errors name every field."""
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" if isinstance(e, dict) else str(e)
            for e in detail
        )
    return str(detail)


def _error(r: httpx.Response) -> ApiError:
    try:
        body = r.json()
        detail = body.get("detail", r.text) if isinstance(body, dict) else body
    except ValueError:
        detail = r.text or r.reason_phrase
    return ApiError(r.status_code, detail, r.request.method, str(r.request.url))


class StrategistClient:
    """The user endpoints of ``/api/v1`` as typed methods (a user token; an admin sees everyone's)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    # -- plumbing -------------------------------------------------------------------------------

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, schema: type[M], method: str, path: str, **kwargs: Any) -> M:
        r = self.http.request(method, path, **kwargs)
        if r.status_code >= 400:
            raise _error(r)
        return schema.model_validate(r.json())

    def _all(
        self, schema: type[M], path: str, params: dict[str, Any] | None = None, *, page_size: int = 1000
    ) -> list[Any]:
        """Every item of a paged list: ``limit``/``cursor`` pages followed until ``next_cursor`` is null."""
        items: list[Any] = []
        query: dict[str, Any] = {**(params or {}), "limit": page_size}
        while True:
            got = cast(_Page, self._call(schema, "GET", path, params=query))
            items += got.data
            if got.next_cursor is None:
                return items
            query["cursor"] = got.next_cursor

    # -- searches -------------------------------------------------------------------------------

    def create_search(self, body: SearchCreate | None = None, **fields: Any) -> SearchPublic:
        """Start a search: a ``SearchCreate`` or its fields (``model``, ``cluster``, ``trial_budget``...).

        The body is validated here first (a ``pydantic.ValidationError`` naming the field), then by
        the server (``ApiError`` 422 for an unknown model, 429 over a quota).
        """
        if body is None:
            body = SearchCreate(**fields)
        elif fields:
            raise TypeError("pass a SearchCreate or its fields, not both")
        return self._call(SearchPublic, "POST", "/searches", json=body.model_dump(mode="json"))

    def searches(self) -> list[SearchPublic]:
        """Your searches, newest first (every page)."""
        return self._all(SearchesPublic, "/searches")

    def search(self, search_id: int) -> SearchStatusPublic:
        """A search's state and progress: trials by state, best so far, baselines, speed-ups."""
        return self._call(SearchStatusPublic, "GET", f"/searches/{search_id}")

    def costs(self, search_id: int) -> CostsPublic:
        """A cost-objective (heterogeneous) search's plans: money, throughput, per-stage units, best."""
        return self._call(CostsPublic, "GET", f"/searches/{search_id}/costs")

    def rounds(self, search_id: int) -> list[RoundPublic]:
        """The search's rounds, first first (every page)."""
        return self._all(RoundsPublic, f"/searches/{search_id}/rounds")

    def candidates(self, search_id: int) -> list[CandidatePublic]:
        """The search's candidates, by round then rank (every page). For a predicted-only search (a
        hybrid search with ``plan_options={"space": "3d", ...}``) these are its answer: the
        predicted ranking, with no trial behind them (``docs/service.md``, 3D plans)."""
        return self._all(CandidatesPublic, f"/searches/{search_id}/candidates")

    def trials(self, search_id: int, *, page_size: int = 1000) -> list[TrialPublic]:
        """The search's trials (baselines and candidates), oldest first (every page)."""
        return self._all(TrialsPublic, f"/searches/{search_id}/trials", page_size=page_size)

    def trial(self, trial_id: int) -> TrialPublic:
        return self._call(TrialPublic, "GET", f"/trials/{trial_id}")

    def cancel(self, search_id: int) -> SearchPublic:
        """Cancel a search (``ApiError`` 409 if it already ended)."""
        return self._call(SearchPublic, "POST", f"/searches/{search_id}/cancel")

    def wait(
        self,
        search_id: int,
        *,
        on_progress: ProgressCallback | None = None,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        max_poll_failures: int = 5,
    ) -> SearchStatusPublic:
        """Poll until the search ends; ``on_progress(status)`` after every poll. Returns the final status."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failures = 0
        while True:
            try:
                status = self.search(search_id)
                failures = 0
            except (httpx.TransportError, ApiError) as e:
                transient = isinstance(e, httpx.TransportError) or e.status in RETRYABLE_STATUS
                failures += 1
                if not transient or failures >= max_poll_failures:
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"search {search_id}: no answer within {timeout_s:g} s ({e})") from e
                time.sleep(interval_s)
                continue
            if on_progress is not None:
                on_progress(status)
            if status.search.state in FINAL_STATES:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"search {search_id} still {status.search.state} after {timeout_s:g} s "
                    f"({status.candidate_trials_done}/{status.search.trial_budget} candidate trials done)"
                )
            time.sleep(interval_s)

    def best_trial(self, search_id: int) -> TrialPublic | None:
        """The candidate trial with the best measured median so far (None before one is measured)."""
        best = self.search(search_id).best_trial_id
        return None if best is None else self.trial(best)

    def best_strategy(self, search_id: int) -> Strategy | None:
        """A sync search's best measured strategy, as the spec's ``Strategy`` (None before one).

        Other plan kinds have no Strategy: ``ValueError`` naming the kind and pointing to
        :meth:`best_plan`, which answers for every kind.
        """
        status = self.search(search_id)
        if status.search.plan_kind != "sync":
            raise ValueError(
                f"search {search_id} is a {status.search.plan_kind} search: its best is a "
                f"{status.search.plan_kind} plan, not a Strategy; use best_plan({search_id})"
            )
        return (
            None
            if status.best_trial_id is None
            else Strategy.model_validate(self.trial(status.best_trial_id).strategy)
        )

    def best_plan(
        self, search_id: int, *, recommended: bool = False
    ) -> Strategy | PipelineTrial | HybridPlan | HeterogeneousPlan | None:
        """The best measured candidate's plan document, validated as its kind's model (None before one).

        Sync: ``simulator.spec.Strategy``; pipeline: ``runtime.worker.plan_pipeline.PipelineTrial``
        (the (k, b) memory curve the tuner runs over); hybrid: ``simulator.spec.HybridPlan``;
        heterogeneous: ``runtime.worker.plan_heterogeneous.HeterogeneousPlan`` (the cheapest plan
        meeting the limit). ``recommended=True``: the recommended plan instead of the best, the
        simplest within the measurement noise of the best (``SearchStatusPublic.result.rule``).
        """
        result = self.search(search_id).result
        pick = None if result is None else (result.recommended if recommended else result.best)
        if pick is None:
            return None
        return plan_of(self.trial(pick.trial_id).strategy)

    def export_trials(self, search_id: int) -> TrialsExportPublic:
        """Every trial of the search as a row, the same columns for every plan kind (JSON export).

        Speed-ups are against the search's result baseline (``speedup_vs``), with their 95 %
        bootstrap interval (``service.plans.trial_export``).
        """
        return self._call(
            TrialsExportPublic, "GET", f"/searches/{search_id}/trials/export", params={"format": "json"}
        )

    def export_trials_csv(self, search_id: int) -> str:
        """The same export as CSV text (a header line, then one line per trial)."""
        r = self.http.get(f"/searches/{search_id}/trials/export", params={"format": "csv"})
        if r.status_code >= 400:
            raise _error(r)
        return r.text

    def plan_file(
        self, search_id: int, trial_id: int | None = None, *, recommended: bool = False
    ) -> PlanFile:
        """A trial's plan as a ``simulator.spec.planfile.PlanFile`` for ``runtime.apply`` (what
        ``strategist export`` writes): ``trial_id``, else the recommended plan (``recommended=True``:
        the simplest within the noise of the best), else the best measured one.

        ``ValueError`` when the search has nothing to export or the trial is another search's.
        """
        from service.cli.export_commands import plan_file

        if trial_id is not None and recommended:
            raise ValueError("give trial_id or recommended=True, not both")
        if recommended:
            result = self.search(search_id).result
            if result is None or result.recommended is None:
                raise ValueError(f"search {search_id} has no recommended plan yet")
            trial_id = result.recommended.trial_id
        return plan_file(self, search_id, trial_id)

    # -- your model and cluster specs ----------------------------------------------------------

    def upload_model(self, spec: ModelSpec | dict[str, Any]) -> ModelPublic:
        """Store a ModelSpec under your user (``ApiError`` 422 naming every bad field; nothing stored).

        Searches then name it by its ``name`` (yours first, else the zoo's) or by the returned id.
        """
        body = spec.model_dump(mode="json") if isinstance(spec, ModelSpec) else dict(spec)
        return self._call(ModelPublic, "POST", "/models", json=body)

    def upload_cluster(self, spec: ClusterSpec | dict[str, Any]) -> ClusterPublic:
        """Store a ClusterSpec under your user (``ApiError`` 422 naming every bad field; nothing stored)."""
        body = spec.model_dump(mode="json") if isinstance(spec, ClusterSpec) else dict(spec)
        return self._call(ClusterPublic, "POST", "/clusters", json=body)

    def models(self) -> list[ModelSummary]:
        """The model specs you uploaded (an admin: everyone's), every page."""
        return self._all(ModelsPublic, "/models")

    def clusters(self) -> list[ClusterSummary]:
        """The cluster specs you uploaded (an admin: everyone's), every page."""
        return self._all(ClustersPublic, "/clusters")

    def model(self, model_id: int) -> ModelPublic:
        """One stored model spec by id, with its full JSON."""
        return self._call(ModelPublic, "GET", f"/models/{model_id}")

    def cluster(self, cluster_id: int) -> ClusterPublic:
        """One stored cluster spec by id, with its full JSON."""
        return self._call(ClusterPublic, "GET", f"/clusters/{cluster_id}")

    # -- runtimes -------------------------------------------------------------------------------

    def upload_runtime(
        self,
        *,
        model: str | int,
        cluster: str | int,
        strategy: Strategy | dict[str, Any],
        iteration_times: Sequence[float],
    ) -> RuntimePublic:
        """Store iteration times measured by your own run of ``strategy`` (they feed retraining)."""
        strategy_json = strategy.model_dump(mode="json") if isinstance(strategy, Strategy) else dict(strategy)
        body = RuntimeCreate(
            model=model, cluster=cluster, strategy=strategy_json, iteration_times=list(iteration_times)
        )
        return self._call(RuntimePublic, "POST", "/runtimes", json=body.model_dump(mode="json"))

    def runtimes(
        self, domain: str | None = None, *, since_id: int = 0, limit: int | None = None, page_size: int = 1000
    ) -> list[RuntimePublic]:
        """Runtime records you contributed (your trials and uploads), optionally of one domain.

        Records with an id above ``since_id``, oldest first: every page, or the first ``limit``.
        """
        params: dict[str, Any] = {"since_id": since_id}
        if domain is not None:
            params["domain"] = domain
        records: list[RuntimePublic] = []
        while limit is None or len(records) < limit:
            size = page_size if limit is None else min(page_size, limit - len(records))
            got = self._call(RuntimesPublic, "GET", "/runtimes", params={**params, "limit": size})
            records += got.data
            if got.next_cursor is None:
                break
            params["since_id"] = got.next_cursor
        return records
