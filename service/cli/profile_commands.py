"""`strategist profile`: measure a model's per-layer forward/backward times into a stored Profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from service.cli.spec_commands import fail, resolve_model
from simulator.spec import SpecError, dump_json

_DTYPES = ("float32", "float16", "bfloat16")


def register(app: typer.Typer) -> None:
    """Add the ``profile`` command to the root app."""
    app.command("profile")(profile)


def profile(
    model: str = typer.Option(..., "--model", help="Zoo model name or model JSON file."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (cuda:N)."),
    batch: int | None = typer.Option(None, "--batch", help="Samples per pass (default: the model's batch)."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, float16 or bfloat16."),
    factory: str | None = typer.Option(
        None,
        "--factory",
        help="MODULE:FACTORY building the real model (default: the zoo's reference, if it imports).",
    ),
    input_shape: str | None = typer.Option(
        None,
        "--input-shape",
        help="With --factory: input shape, batch first (float input), e.g. 2,3,224,224.",
    ),
    input_factory: str | None = typer.Option(
        None, "--input-factory", help="With --factory: MODULE:FUNC(batch) returning the inputs."
    ),
    device_name: str | None = typer.Option(
        None,
        "--device-name",
        help="DeviceType name to key the profile by (default: cpu / the CUDA device name).",
    ),
    repeats: int = typer.Option(
        3, "--repeats", min=1, help="Timed runs per pass (median), after one warm-up."
    ),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads on the CPU (1: stable timings)."),
    out: Path | None = typer.Option(None, "--out", help="Profiles folder (default: datasets/profiles)."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON."),
) -> None:
    """Run the model's real forward and backward per layer and store the profile."""
    import torch

    from simulator.extract import load_factory
    from simulator.profile import ProfileStore, profile_model, reference_module

    spec = resolve_model(model)
    b = batch if batch is not None else spec.batch_size
    if b < 1:
        raise fail(f"--batch: must be >= 1, got {b}")
    if dtype not in _DTYPES:
        raise fail(f"--dtype: must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise fail(f"--device: {device!r} is not a torch device (cpu, cuda, cuda:N)") from None
    if dev.type not in ("cpu", "cuda"):
        raise fail(f"--device: must be cpu or cuda, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise fail("--device: cuda requested but no CUDA device is available")
    if (input_shape or input_factory) and factory is None:
        raise fail("--input-shape/--input-factory: only with --factory")
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    name = device_name or ("cpu" if dev.type == "cpu" else torch.cuda.get_device_name(dev))
    real: tuple[Any, Any] | None
    note = ""
    try:
        if factory is not None:
            real = (load_factory(factory)().to(dev), _inputs(input_shape, input_factory, b, dev))
            note = f"real module {factory}"
        else:
            real = reference_module(spec.name, b, dev, spec)
            note = (
                "real module: the zoo's reference implementation" if real else "no real module imports here"
            )
    except ValueError as e:
        raise fail(f"--factory: {e}") from None
    try:
        prof = profile_model(
            spec, device_name=name, batch=b, device=dev, dtype=dtype, repeats=repeats, module=real, note=note
        )
    except (RuntimeError, ValueError) as e:
        raise fail(f"profiling {spec.name} failed: {str(e).splitlines()[0]}") from None
    path = ProfileStore(out).save(prof)
    if as_json:
        typer.echo(dump_json(prof))
    else:
        total = sum(lt.fwd_s + lt.bwd_s for lt in prof.layers)
        typer.echo(
            f"{spec.name} on {name} ({dtype}, batch {b}): fwd+bwd {total:.4f} s, {len(prof.layers)} layers"
        )
        typer.echo(f"source: {prof.source}")
        typer.echo(f"stored: {path}")


def _inputs(shape: str | None, factory: str | None, batch: int, dev: Any) -> Any:
    import torch

    from simulator.extract import load_factory

    if (shape is None) == (factory is None):
        raise fail("--input-shape: with --factory give exactly one of --input-shape and --input-factory")
    if factory is not None:
        try:
            made = load_factory(factory)(batch)
        except ValueError as e:
            raise fail(f"--input-factory: {e}") from None
        return made.to(dev) if isinstance(made, torch.Tensor) else tuple(t.to(dev) for t in made)
    assert shape is not None
    try:
        dims = tuple(int(d) for d in shape.split(","))
    except ValueError:
        raise fail(f"--input-shape: {shape!r} is not a comma-separated list of integers") from None
    if not dims or any(d < 1 for d in dims):
        raise fail(f"--input-shape: every dimension must be >= 1, got {shape!r}")
    return torch.randn(dims, device=dev)


def load_profiles(folder: Path | None = None) -> tuple[Any, ...]:
    """Every stored profile; a bad file is a one-line error naming the file and line (exit 2)."""
    from simulator.profile import ProfileStore

    try:
        return ProfileStore(folder).load_all()
    except SpecError as e:
        raise fail("; ".join(i.reason if not i.path else str(i) for i in e.issues)) from None
    except OSError as e:
        raise fail(f"profile: {e}") from None
