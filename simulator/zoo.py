"""The built-in zoo: model and cluster specs committed as JSON under ``datasets/``.

The data folder is found next to the source tree (an editable install) or at the path in the
``STRATEGIST_DATASETS`` environment variable. Names are looked up case-insensitively
(``resnet50`` is ``ResNet50``) and only among the folder's files, so a name can never reach a path
outside it.
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


def _canonical(sub: str, what: str, name: str) -> str:
    names = _names(sub)
    if name in names:
        return name
    folded = name.casefold()
    for known in names:
        if known.casefold() == folded:
            return known
    raise KeyError(f"unknown zoo {what} {name!r}; known: {', '.join(names)}")


def model_name(name: str) -> str:
    """The zoo's spelling of model ``name`` (any case); KeyError names the known ones."""
    return _canonical("models", "model", name)


def cluster_name(name: str) -> str:
    """The zoo's spelling of cluster ``name`` (any case); KeyError names the known ones."""
    return _canonical("clusters", "cluster", name)


@cache
def model(name: str) -> ModelSpec:
    """A zoo model by name (any case); KeyError names the known ones."""
    path = datasets_dir() / "models" / f"{model_name(name)}.json"
    return parse_as(ModelSpec, json.loads(path.read_text()))


@cache
def cluster(name: str) -> ClusterSpec:
    """A zoo cluster by name (any case); KeyError names the known ones."""
    path = datasets_dir() / "clusters" / f"{cluster_name(name)}.json"
    return parse_as(ClusterSpec, json.loads(path.read_text()))
