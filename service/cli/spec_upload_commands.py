"""`strategist spec upload | show`: bring your own model and cluster specs, and see them as the service will.

    strategist spec upload specs/gpt350m.json            # then: search create --model gpt350m ...
    strategist spec show specs/a100.json                 # the spec with every default filled in
    strategist spec show --id 12 --kind cluster          # one you uploaded, from the API

``show`` prints the normalised spec (every field, defaults filled) as JSON on stdout, and on stderr
one note per default that changes the answer (``default_notes``): a device without a BF16/TF32
rate runs those dtypes at its FP32 rate, a node without ``latency_us`` has no per-message latency,
without ``price_per_hour`` costs nothing, and so on. ``nic_gbps`` is per node: the node's GPUs
share that NIC for traffic leaving the node.
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

spec_app = typer.Typer(
    help="Upload your model and cluster specs; show a spec with its defaults.", no_args_is_help=True
)

#: Node fields whose default changes a prediction, and what the default means.
NODE_DEFAULTS = {
    "latency_us": "0 us: no per-message network latency (Eq. 2/3's latency term is dropped)",
    "cpu_cores": "8 host CPU cores",
    "host_memory_gb": "64 GB of host memory for PS shards",
    "price_per_hour": "$0/hour: cost objectives see this node as free",
}


def default_notes(spec: ModelSpec | ClusterSpec) -> list[str]:
    """One line per default the spec leaves to the service that changes what it predicts."""
    if not isinstance(spec, ClusterSpec):
        return []
    notes: list[str] = []
    for i, dev in enumerate(spec.device_types):
        for field in ("bf16_tflops", "tf32_tflops"):
            if getattr(dev, field) is None:
                dtype = field.split("_")[0]
                notes.append(
                    f"device_types[{i}].{field}: not given: {dev.name} runs {dtype} at its FP32 rate "
                    f"({dev.fp32_tflops:g} TFLOPS); give it if the GPU has a {dtype} tensor-core path"
                )
    for i, node in enumerate(spec.nodes):
        for field, meaning in NODE_DEFAULTS.items():
            if field not in node.model_fields_set:
                notes.append(f"nodes[{i}].{field}: not given: default {meaning} ({node.name})")
    if spec.nodes:
        notes.append(
            "nic_gbps is per node: the node's GPUs share that NIC for traffic leaving the node "
            "(intra_node_gbps / intra_gbps inside it)"
        )
    return notes


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


def _notes(spec: ModelSpec | ClusterSpec) -> None:
    for note in default_notes(spec):
        typer.echo(f"note: {note}", err=True)


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
    _notes(spec)
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
    if spec_id is not None:
        client = _client(api, token)
        if kind == "model":
            spec = ModelSpec.model_validate(_run(lambda: client.model(spec_id)).spec)
        else:
            spec = ClusterSpec.model_validate(_run(lambda: client.cluster(spec_id)).spec)
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
    _notes(spec)


def register(app: typer.Typer) -> None:
    """Add the ``strategist spec`` group to the root app."""
    app.add_typer(spec_app, name="spec")
