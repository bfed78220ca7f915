"""`strategist zoo list|show` and `strategist validate`: the vocabulary and the zoo on the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.table import Table

from simulator import zoo
from simulator.spec import ClusterSpec, ModelSpec, ResourcePlan, SpecError, Strategy, dump_json, load_spec

_S = TypeVar("_S", ModelSpec, ClusterSpec)

zoo_app = typer.Typer(help="The built-in model and cluster zoo.", no_args_is_help=True)


def fail(message: str) -> typer.Exit:
    """Print a one-line error on stderr and return the exit (code 2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def resolve_model(ref: str) -> ModelSpec:
    """A zoo model name or a path to a model JSON file."""
    return _resolve(ref, ModelSpec, zoo.model)


def resolve_cluster(ref: str) -> ClusterSpec:
    """A zoo cluster name or a path to a cluster JSON file."""
    return _resolve(ref, ClusterSpec, zoo.cluster)


def _resolve(ref: str, cls: type[_S], by_name: Callable[[str], _S]) -> _S:
    path = Path(ref)
    try:
        spec = load_spec(path) if path.suffix == ".json" or path.is_file() else by_name(ref)
    except SpecError as e:
        raise fail(f"{ref}: {e}") from None
    except (KeyError, OSError) as e:
        raise fail(str(e).strip("'\"")) from None
    if not isinstance(spec, cls):
        raise fail(f"{ref}: is a {spec.kind} spec, expected a {cls.__name__}")
    return spec


@zoo_app.command("list")
def zoo_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the zoo's models and clusters."""
    models = [zoo.model(n) for n in zoo.model_names()]
    clusters = [zoo.cluster(n) for n in zoo.cluster_names()]
    if as_json:
        out = {
            "models": [
                {"name": m.name, "params": m.params, "variables": len(m.variables), "layers": len(m.layers)}
                for m in models
            ],
            "clusters": [{"name": c.name, "nodes": len(c.nodes), "gpus": c.num_gpus} for c in clusters],
        }
        typer.echo(json.dumps(out, indent=2))
        return
    console = Console()
    mt = Table("model", "family", "params", "variables", "layers", "batch/GPU", title="Models")
    for m in models:
        mt.add_row(
            m.name,
            m.family,
            f"{m.params / 1e6:.1f}M",
            str(len(m.variables)),
            str(len(m.layers)),
            str(m.batch_size),
        )
    ct = Table("cluster", "nodes", "GPUs", "NIC Gbps", title="Clusters")
    for c in clusters:
        nics = sorted({n.nic_gbps for n in c.nodes})
        ct.add_row(c.name, str(len(c.nodes)), str(c.num_gpus), "/".join(f"{b:g}" for b in nics))
    console.print(mt)
    console.print(ct)


@zoo_app.command("show")
def zoo_show(name: str = typer.Argument(..., help="A zoo model or cluster name (any case).")) -> None:
    """Print a zoo spec as JSON."""
    for lookup in (zoo.model, zoo.cluster):
        try:
            typer.echo(dump_json(lookup(name)))
            return
        except KeyError:
            continue
    raise fail(f"unknown zoo name {name!r}; see `strategist zoo list`")


def validate(
    file: Path = typer.Argument(..., help="A model, cluster or strategy JSON file."),
    model: str | None = typer.Option(None, help="Model (zoo name or file) to check a strategy against."),
    cluster: str | None = typer.Option(None, help="Cluster (zoo name or file) to check a strategy against."),
) -> None:
    """Exit 0 if FILE is a valid spec; else print the field path and reason and exit 2.

    A strategy is also checked against its model and cluster, taken from --model/--cluster or
    from the strategy's own `model`/`cluster` zoo names.
    """
    try:
        spec = load_spec(file)
    except OSError as e:
        raise fail(f"{file}: {e.strerror}") from None
    except SpecError as e:
        raise fail(f"{file}: {e}") from None
    if isinstance(spec, Strategy):
        model_ref = model or spec.model
        cluster_ref = cluster or spec.cluster
        if model_ref is None or cluster_ref is None:
            raise fail(
                f"{file}: a strategy needs a model and a cluster (--model/--cluster or its own fields)"
            )
        try:
            spec.check(resolve_model(model_ref), resolve_cluster(cluster_ref))
        except SpecError as e:
            raise fail(f"{file}: {e}") from None
    elif isinstance(spec, ResourcePlan) and (model or spec.model) and (cluster or spec.cluster):
        try:  # a HeterPS plan: its layers, resource types and units against the model and pool
            spec.check(resolve_model(model or spec.model), resolve_cluster(cluster or spec.cluster))
        except SpecError as e:
            raise fail(f"{file}: {e}") from None
    typer.echo(f"{file}: valid {spec.kind}")


def register(app: typer.Typer) -> None:
    app.add_typer(zoo_app, name="zoo")
    app.command("validate")(validate)
