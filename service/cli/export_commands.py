"""`strategist export --search N [--trial T] -o plan.json`: a search's plan as a file for runtime.apply.

Fetches over HTTP with the existing endpoints (``GET /searches/N``, ``/trials/T``, ``/models/M``,
``/clusters/C``) through ``service.client.StrategistClient``: the trial (default: the search's best
measured candidate), the model and cluster specs the search ran on, and writes a
``simulator.spec.planfile.PlanFile`` with the measured median as provenance. A sync plan is
checked against its model and cluster on the way (``Strategy.check``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError

from service.api.schemas.specs import ClusterPublic, ModelPublic
from service.cli.search_cli_commands import ApiOpt, TokenOpt
from service.client import ApiError, StrategistClient
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.planfile import PlanFile, PlanVariable, Provenance, sync_plan_file, write_plan_file


class ExportError(ValueError):
    """The search has nothing to export (the message names the option)."""


def _get(client: StrategistClient, schema: type[Any], path: str) -> Any:
    r = client.http.get(path)
    if r.status_code >= 400:
        detail = (
            r.json().get("detail", r.text)
            if r.headers.get("content-type", "").startswith("application/json")
            else r.text
        )
        raise ApiError(r.status_code, detail, "GET", str(r.url))
    return schema.model_validate(r.json())


def plan_file(client: StrategistClient, search_id: int, trial_id: int | None = None) -> PlanFile:
    """The plan file of trial ``trial_id`` of search ``search_id`` (default: its best measured trial)."""
    status = client.search(search_id)
    search = status.search
    tid = trial_id if trial_id is not None else status.best_trial_id
    if tid is None:
        raise ExportError(
            f"--search: search {search_id} has no measured candidate yet (state {search.state})"
        )
    trial = client.trial(tid)
    if trial.search_id != search_id:
        raise ExportError(f"--trial: trial {tid} belongs to search {trial.search_id}, not {search_id}")
    if trial.state != "succeeded" and trial_id is not None:
        raise ExportError(f"--trial: trial {tid} is {trial.state}, not succeeded")
    model = ModelSpec.model_validate(_get(client, ModelPublic, f"/models/{search.model_spec_id}").spec)
    cluster = ClusterSpec.model_validate(
        _get(client, ClusterPublic, f"/clusters/{search.cluster_spec_id}").spec
    )
    prov = Provenance(
        search_id=search_id, trial_id=tid, iteration_time_s=trial.median_time, source=client.base_url
    )
    if search.plan_kind == "sync":
        return sync_plan_file(Strategy.model_validate(trial.strategy), model, cluster, prov)
    return PlanFile(
        kind=search.plan_kind,
        plan=trial.strategy,
        model=model.name,
        variables=tuple(PlanVariable(name=v.name, shape=v.shape) for v in model.variables),
        world_size=cluster.num_gpus,
        model_spec=model,
        cluster=cluster,
        provenance=prov,
    )


def export_command(
    search: Annotated[int, typer.Option("--search", help="Search id.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Plan file to write.")],
    trial: Annotated[
        int | None, typer.Option("--trial", help="Trial id (default: the best measured).")
    ] = None,
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Write a search's plan (its best measured trial, or --trial) as a plan file for apply_plan."""
    if not token:
        typer.echo("error: --token: a user token is required (or set $STRATEGIST_TOKEN)", err=True)
        raise typer.Exit(2)
    try:
        with StrategistClient(api, token) as client:
            pf = plan_file(client, search, trial)
        write_plan_file(pf, output)
    except (ApiError, httpx.HTTPError, ExportError, ValidationError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        typer.echo(f"error: {first}", err=True)
        raise typer.Exit(2) from None
    took = (
        f", measured {pf.provenance.iteration_time_s:.4g} s/iteration"
        if pf.provenance.iteration_time_s
        else ""
    )
    typer.echo(f"wrote {output}: {pf.kind} plan of trial {pf.provenance.trial_id} for {pf.model} "
               f"on {pf.world_size} processes{took}")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add `export` to the root app."""
    app.command("export")(export_command)
