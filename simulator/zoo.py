"""The built-in zoo: model and cluster specs committed as JSON under ``datasets/``.

The data folder is found next to the source tree (an editable install) or at the path in the
``STRATEGIST_DATASETS`` environment variable.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.io import parse_as


def datasets_dir() -> Path:
    """The ``datasets/`` folder: $STRATEGIST_DATASETS, else the one beside the packages."""
    env = os.environ.get("STRATEGIST_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "datasets"


def _names(sub: str) -> list[str]:
    folder = datasets_dir() / sub
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def model_names() -> list[str]:
    return _names("models")


def cluster_names() -> list[str]:
    return _names("clusters")


@cache
def model(name: str) -> ModelSpec:
    """A zoo model by name; KeyError names the known ones."""
    path = datasets_dir() / "models" / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(model_names())}")
    return parse_as(ModelSpec, json.loads(path.read_text()))


@cache
def cluster(name: str) -> ClusterSpec:
    """A zoo cluster by name; KeyError names the known ones."""
    path = datasets_dir() / "clusters" / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"unknown zoo cluster {name!r}; known: {', '.join(cluster_names())}")
    return parse_as(ClusterSpec, json.loads(path.read_text()))
