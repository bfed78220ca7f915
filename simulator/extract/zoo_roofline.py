"""Fill the roofline fields (``fwd_bytes``, ``fwd_kernels``) of existing zoo model files.

    python -m simulator.extract.zoo_roofline [--model NAME ...]

Re-traces each zoo recipe whose reference implementation imports here and copies the two fields
into the committed file when the re-traced layers match it exactly (same names, kinds and FLOPs
within 1e-6); nothing else in the file changes, so collected runtimes keyed on the spec stay
valid. Recipes that do not import (torchvision's CNNs beside torch 2.13) or do not match are
reported and left to the documented fallback in ``simulator.analytical.compute``.
"""

from __future__ import annotations

import argparse
import math
import warnings

from simulator.spec import ModelSpec, dump_json
from simulator.zoo import datasets_dir, model


def merge(committed: ModelSpec, traced: ModelSpec) -> ModelSpec | None:
    """``committed`` with the traced roofline fields, or None if the layers differ."""
    if len(committed.layers) != len(traced.layers):
        return None
    layers = []
    for a, b in zip(committed.layers, traced.layers, strict=True):
        same_flops = math.isclose(a.fwd_flops, b.fwd_flops, rel_tol=1e-6, abs_tol=1e-6)
        if a.name != b.name or a.kind != b.kind or not same_flops:
            return None
        layers.append(a.model_copy(update={"fwd_bytes": b.fwd_bytes, "fwd_kernels": b.fwd_kernels}))
    return committed.model_copy(update={"layers": tuple(layers)})


def main(argv: list[str] | None = None) -> int:
    from simulator.extract.zoo_models import ZOO_MODELS, build

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--model", action="append", help="only this zoo model (repeatable)")
    args = ap.parse_args(argv)
    for recipe in ZOO_MODELS:
        if args.model and recipe.name not in args.model:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = build(recipe)
        except (ImportError, RuntimeError) as e:
            print(f"{recipe.name:14s} skipped: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
            continue
        merged = merge(model(recipe.name), traced)
        if merged is None:
            print(f"{recipe.name:14s} skipped: the re-traced layers differ from the committed file")
            continue
        path = datasets_dir() / "models" / f"{recipe.name}.json"
        path.write_text(dump_json(merged) + "\n")
        print(f"{recipe.name:14s} filled {len(merged.layers)} layers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
