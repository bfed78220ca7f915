"""`strategist import-model`: trace a PyTorch model on the meta device into a ModelSpec.

    strategist import-model mymodels.nets:make_resnet --input-shape 1,3,224,224 -o resnet.json
    strategist import-model mypkg.models:make_model --batch-size 8 -o spec.json   # (module, batch) factory
    strategist import-model --hf-config gpt2/config.json --compute-dtype bfloat16 -o gpt2.json

MODULE:FACTORY is imported with the current directory on the path (as ``python -m`` does), so a
module beside you imports without PYTHONPATH. ``--hf-config`` builds a Hugging Face model from its
local config.json (``simulator.extract.hf``; nothing is downloaded). ``--compute-dtype`` records the
arithmetic the model trains in (mixed precision), which the cost model reads.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import get_args

import typer

from simulator.spec import ModelSpec, SpecError, dump_json
from simulator.spec.model import ComputeDType


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
    target: str | None = typer.Argument(
        None, metavar="[MODULE:FACTORY]", help="A callable returning an nn.Module (or --hf-config)."
    ),
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
    compute_dtype: str | None = typer.Option(
        None,
        "--compute-dtype",
        help="Arithmetic the model trains in: float32, tf32, float16 or bfloat16 (default: its parameters').",
    ),
    hf_config: Path | None = typer.Option(
        None, "--hf-config", help="A Hugging Face config.json (or its folder): build that model, no download."
    ),
    seq_len: int | None = typer.Option(
        None, "--seq-len", help="--hf-config: tokens per sample (default: the config's context, <= 2048)."
    ),
    model_class: str | None = typer.Option(
        None,
        "--model-class",
        help="--hf-config: transformers class (default: the config's architectures[0]).",
    ),
) -> None:
    """Trace MODULE:FACTORY (or a Hugging Face config) on the meta device and write its ModelSpec."""
    from simulator.extract import import_model, load_factory
    from simulator.extract.extractor import TORCH_DTYPES

    dtypes = get_args(ComputeDType)
    if compute_dtype is not None and compute_dtype not in dtypes:
        raise _fail(f"--compute-dtype: must be one of {', '.join(dtypes)}, got {compute_dtype!r}")
    if hf_config is not None:
        if target is not None or input_shape is not None or input_factory is not None:
            raise _fail("--hf-config: give it instead of MODULE:FACTORY and --input-shape/--input-factory")
        spec = _import_hf(hf_config, seq_len, batch_size, name, family or "LM", model_class)
        _write(_with_dtype(spec, compute_dtype), output)
        return
    if target is None:
        raise _fail("MODULE:FACTORY: give a factory, or --hf-config")
    if seq_len is not None or model_class is not None:
        raise _fail(f"{'--seq-len' if seq_len is not None else '--model-class'}: needs --hf-config")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m`: modules beside you import
        sys.path.insert(0, os.getcwd())
    if input_shape is not None and input_factory is not None:
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
        if input_shape is None and input_factory is None and "input shape" in str(e):
            raise _fail(
                "--input-shape: give exactly one of --input-shape and --input-factory "
                "(or a factory that returns (module, batch), as a search's model_factory)"
            ) from None
        raise _fail(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    except Exception as e:  # the user's model may fail to build or run in any way
        first = str(e).splitlines()[0] if str(e) else ""
        raise _fail(f"tracing {target} failed: {type(e).__name__}: {first}") from None
    _write(_with_dtype(spec, compute_dtype), output)


def _with_dtype(spec: ModelSpec, compute_dtype: str | None) -> ModelSpec:
    if compute_dtype is None:
        return spec
    return ModelSpec.model_validate({**spec.model_dump(mode="json"), "compute_dtype": compute_dtype})


def _import_hf(
    path: Path, seq_len: int | None, batch_size: int | None, name: str | None, family: str, cls: str | None
) -> ModelSpec:
    from simulator.extract.hf import import_hf

    if seq_len is not None and seq_len < 1:
        raise _fail(f"--seq-len: must be >= 1, got {seq_len}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return import_hf(
                path, seq_len=seq_len, batch_size=batch_size, name=name, family=family, model_class=cls
            )
    except SpecError as e:
        raise _fail(f"the extracted spec is invalid: {e}") from None
    except ValueError as e:
        raise _fail(f"--hf-config: {str(e).splitlines()[0]}") from None
    except Exception as e:  # building or tracing a third-party model may fail in any way
        first = str(e).splitlines()[0] if str(e) else ""
        raise _fail(f"--hf-config: building {path} failed: {type(e).__name__}: {first}") from None


def _write(spec: ModelSpec, output: Path) -> None:
    try:
        output.write_text(dump_json(spec) + "\n")
    except OSError as e:
        raise _fail(f"--output: cannot write {output}: {e.strerror}") from None
    dtype = f", computes in {spec.compute_dtype}" if spec.compute_dtype else ""
    typer.echo(
        f"{spec.name}: {spec.params} parameters, {len(spec.variables)} variables, "
        f"{len(spec.layers)} layers, {spec.fwd_flops:.4g} forward FLOPs/sample{dtype} -> {output}"
    )


def register(app: typer.Typer) -> None:
    """Add `import-model` to the root app."""
    app.command("import-model")(import_model_command)
