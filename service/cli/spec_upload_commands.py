"""`strategist spec upload | show`: bring your own model and cluster specs, and see them as the service will.

    strategist spec upload specs/gpt350m.json            # then: search create --model gpt350m ...
    strategist spec show specs/a100.json                 # the spec with every default filled in
    strategist spec show --id 12 --kind cluster          # one you uploaded, from the API

``show`` prints the normalised spec (every field, defaults filled) as JSON on stdout, and on stderr
one note per default the spec is left with, and whether it changes the answer
(``simulator.spec.defaults``; for an upload or ``--id``, the API's ``defaults``): a device without
a BF16/TF32 rate runs those dtypes at its FP32 rate, a node without ``latency_us`` has no
per-message latency, without ``price_per_hour`` costs nothing, and so on. ``nic_gbps`` is per
node: the node's GPUs share that NIC for traffic leaving the node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.search_cli_commands import ApiOpt, TokenOpt, _client, _run
from service.cli.spec_commands import fail
from simulator import zoo
from simulator.spec import ClusterSpec, ModelSpec, SpecError, load_spec
from simulator.spec.defaults import DefaultNote, cluster_defaults

spec_app = typer.Typer(
    help="Upload your model and cluster specs; show a spec with its defaults.", no_args_is_help=True
)


def default_notes(spec: ModelSpec | ClusterSpec) -> list[str]:
    """One line per default the spec is left with, saying whether it changes the answer
    (``simulator.spec.defaults.cluster_defaults``, the same notes as the API's ``defaults``)."""
    if not isinstance(spec, ClusterSpec):
        return []
    return [n.line() for n in cluster_defaults(spec)]


def _load(file: Path) -> ModelSpec | ClusterSpec:
    try:
        spec = load_spec(file)
    except OSError as e:
        raise fail(f"{file}: {e.strerror}") from None
    except SpecError as e:
        raise fail(f"{file}: {e}") from None
    if not isinstance(spec, ModelSpec | ClusterSpec):
        raise fail(f"{file}: is a {spec.kind} spec; upload takes a model or a cluster")
    return spec


def _notes(spec: ModelSpec | ClusterSpec, stored: Any = None) -> None:
    """The default notes on stderr: the API's answer (``defaults``) when there is one, else local."""
    if stored is not None and getattr(stored, "defaults", None) is not None:
        lines = [DefaultNote(**d.model_dump()).line() for d in stored.defaults]
    else:
        lines = default_notes(spec)
    for line in lines:
        typer.echo(f"note: {line}", err=True)


@spec_app.command("upload")
def upload(
    file: Annotated[Path, typer.Argument(help="A model or cluster spec JSON file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the stored spec's record as JSON.")] = False,
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Upload a model or cluster spec as yours; searches then name it (yours before the zoo's)."""
    spec = _load(file)  # checked here first: one line naming the field, before any request
    client = _client(api, token)
    if isinstance(spec, ModelSpec):
        stored: Any = _run(lambda: client.upload_model(spec))
        option = "--model"
    else:
        stored = _run(lambda: client.upload_cluster(spec))
        option = "--cluster"
    _notes(spec, stored if isinstance(spec, ClusterSpec) else None)
    if as_json:
        typer.echo(json.dumps(stored.model_dump(mode="json"), indent=2))
        return
    typer.echo(
        f"uploaded {spec.kind} {stored.name!r} as id {stored.id}: "
        f"strategist search create {option} {stored.name} (or {option} {stored.id})"
    )


@spec_app.command("show")
def show(
    ref: Annotated[str | None, typer.Argument(help="A spec JSON file or a zoo name.")] = None,
    spec_id: Annotated[int | None, typer.Option("--id", help="A stored spec's id (from the API).")] = None,
    kind: Annotated[str, typer.Option(help="With --id: model or cluster.")] = "model",
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Print a spec normalised, every default filled in; notes on stderr where a default matters."""
    if (ref is None) == (spec_id is None):
        raise fail("spec show: give a file or zoo name, or --id (not both)")
    if kind not in ("model", "cluster"):
        raise fail(f"--kind: must be model or cluster, got {kind!r}")
    spec: ModelSpec | ClusterSpec
    stored: Any = None
    if spec_id is not None:
        client = _client(api, token)
        if kind == "model":
            spec = ModelSpec.model_validate(_run(lambda: client.model(spec_id)).spec)
        else:
            stored = _run(lambda: client.cluster(spec_id))
            spec = ClusterSpec.model_validate(stored.spec)
    else:
        assert ref is not None
        path = Path(ref)
        if path.suffix == ".json" or path.is_file():
            spec = _load(path)
        else:
            found: ModelSpec | ClusterSpec | None = None
            for lookup in (zoo.model, zoo.cluster):
                try:
                    found = lookup(ref)
                    break
                except KeyError:
                    continue
            if found is None:
                raise fail(f"{ref!r} is neither a file nor a zoo name; see `strategist zoo list`")
            spec = found
    typer.echo(json.dumps(spec.model_dump(mode="json"), indent=2))
    _notes(spec, stored)


def register(app: typer.Typer) -> None:
    """Add the ``strategist spec`` group to the root app."""
    app.add_typer(spec_app, name="spec")
