"""Regenerate the whole zoo: ``python -m simulator.extract.zoo_build [--only clusters|models]``.

Clusters come from the instance table in ``zoo_clusters`` and need nothing beyond the main
environment. Models are extracted from their reference implementations (torchvision, transformers,
``reference_models``), which needs the zoo virtual environment described in datasets/README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.spec import dump_json
from simulator.zoo import datasets_dir


def write_clusters(out: Path) -> list[str]:
    """Write every zoo cluster to ``out/clusters/NAME.json``; returns the names."""
    from simulator.extract.zoo_clusters import zoo_clusters

    folder = out / "clusters"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for spec in zoo_clusters():
        (folder / f"{spec.name}.json").write_text(dump_json(spec) + "\n")
        names.append(spec.name)
    return names


def write_models(out: Path, only: list[str] | None = None) -> list[str]:
    """Extract every zoo model (or those named in ``only``) to ``out/models/NAME.json``."""
    from simulator.extract.zoo_models import ZOO_MODELS, build

    folder = out / "models"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for recipe in ZOO_MODELS:
        if only and recipe.name not in only:
            continue
        spec = build(recipe)
        (folder / f"{spec.name}.json").write_text(dump_json(spec) + "\n")
        print(f"{spec.name:14s} {spec.params / 1e6:9.2f}M params  {len(spec.layers):5d} layers", flush=True)
        names.append(spec.name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", choices=["all", "clusters", "models"], default="all")
    parser.add_argument("--model", action="append", help="regenerate only this model (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="datasets folder (default: the repo's)")
    args = parser.parse_args(argv)
    out = args.out or datasets_dir()
    if args.only in ("all", "clusters"):
        print("clusters:", ", ".join(write_clusters(out)))
    if args.only in ("all", "models"):
        try:
            write_models(out, args.model)
        except ImportError as e:
            print(
                f"error: {e}; building the model zoo needs torchvision and transformers "
                "(the zoo environment in datasets/README.md, 'Regenerating the zoo')",
                file=sys.stderr,
            )
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
