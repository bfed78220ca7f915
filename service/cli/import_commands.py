"""`strategist import-model`: trace a PyTorch model (MODULE:FACTORY) on the meta device into a ModelSpec."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer

from simulator.spec import SpecError, dump_json


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise _fail(f"--input-shape: {text!r} is not a comma-separated list of integers") from None
    if not shape or any(d < 1 for d in shape):
        raise _fail(f"--input-shape: every dimension must be >= 1, got {text!r}")
    return shape


def import_model_command(
    target: str = typer.Argument(..., metavar="MODULE:FACTORY", help="A callable returning an nn.Module."),
    input_shape: str | None = typer.Option(
        None, "--input-shape", help="Example input shape, batch first, e.g. 1,3,224,224."
    ),
    dtype: str = typer.Option(
        "float32", "--dtype", help="Input dtype: float32, float16, int64 (tokens), ..."
    ),
    input_factory: str | None = typer.Option(
        None, "--input-factory", help="MODULE:FUNC returning the example inputs (instead of --input-shape)."
    ),
    batch_size: int | None = typer.Option(
        None, "--batch-size", help="Default per-GPU batch of the spec (default: the input's batch)."
    ),
    name: str | None = typer.Option(None, "--name", help="Model name (default: the factory's name)."),
    family: str = typer.Option("", "--family", help="Task family: IC, MT, CF, LM, ..."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the ModelSpec JSON."),
) -> None:
    """Trace MODULE:FACTORY on the meta device and write its ModelSpec (layers, FLOPs, DAG)."""
    from simulator.extract import import_model, load_factory
    from simulator.extract.extractor import TORCH_DTYPES

    if (input_shape is None) == (input_factory is None):
        raise _fail("--input-shape: give exactly one of --input-shape and --input-factory")
    if batch_size is not None and batch_size < 1:
        raise _fail(f"--batch-size: must be >= 1, got {batch_size}")
    shape = _shape(input_shape) if input_shape is not None else None
    if dtype not in TORCH_DTYPES:
        raise _fail(f"--dtype: unknown dtype {dtype!r}; expected one of {', '.join(sorted(TORCH_DTYPES))}")
    for field, ref in (("MODULE:FACTORY", target), ("--input-factory", input_factory)):
        try:
            if ref is not None:
                load_factory(ref)
        except ValueError as e:
            raise _fail(f"{field}: {e}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = import_model(
                target,
                shape,
                input_dtype=dtype,
                input_factory=input_factory,
                name=name,
                batch_size=batch_size,
                family=family,
            )
    except SpecError as e:
        raise _fail(f"the extracted spec is invalid: {e}") from None
    except ValueError as e:
        raise _fail(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    except Exception as e:  # the user's model may fail to build or run in any way
        first = str(e).splitlines()[0] if str(e) else ""
        raise _fail(f"tracing {target} failed: {type(e).__name__}: {first}") from None
    try:
        output.write_text(dump_json(spec) + "\n")
    except OSError as e:
        raise _fail(f"--output: cannot write {output}: {e.strerror}") from None
    typer.echo(
        f"{spec.name}: {spec.params} parameters, {len(spec.variables)} variables, "
        f"{len(spec.layers)} layers, {spec.fwd_flops:.4g} forward FLOPs/sample -> {output}"
    )


def register(app: typer.Typer) -> None:
    """Add `import-model` to the root app."""
    app.command("import-model")(import_model_command)
