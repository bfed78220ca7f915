"""Profiles on disk: one JSON file per (model, device, dtype, batch) under ``datasets/profiles/``.

File name: ``{model}__{device}__{dtype}__b{batch}.json`` (characters outside [A-Za-z0-9._-]
become '_'); the content is a ``Profile`` (format in datasets/README.md, "Profiles"). The folder
is $STRATEGIST_PROFILES if set, else ``datasets/profiles``. A bad file is an error naming the file
and the line, never skipped silently.

``model_profiles`` / ``store_cost_params`` are the one lookup of a model's stored profiles: what a
replay computes with when it is given none (``runtime.executor.ExecutorSession``,
``runtime.pipeline.PipelineConfig.cost_params``) and what a search ranking plans for that replay
predicts with (``service.plans.pipeline``, ``service.plans.hybrid``), so the two agree on compute
by construction (issue 15). The service passes the profiles it stores (uploaded through
``POST /profiles``: ``repository.profiles_in_use``) as ``profiles``, and a pipeline trial's document
carries them to the worker's replay; the same function builds the CostParams either way.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from simulator.analytical.params import CostParams
from simulator.spec import dump_json
from simulator.spec.profile import Profile, load_profile
from simulator.zoo import datasets_dir


def profiles_dir() -> Path:
    """Where profiles live: $STRATEGIST_PROFILES, else datasets/profiles."""
    env = os.environ.get("STRATEGIST_PROFILES")
    return Path(env) if env else datasets_dir() / "profiles"


def file_name(profile: Profile) -> str:
    key = "__".join([profile.model, profile.device, profile.dtype, f"b{profile.batch}"])
    return re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".json"


class ProfileStore:
    """The profiles of one folder. Not thread-safe for writers; readers see whole files only."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or profiles_dir()

    def save(self, profile: Profile) -> Path:
        """Write ``profile`` (replacing the one with the same key) atomically; returns its path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / file_name(profile)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(dump_json(profile) + "\n")
        os.replace(tmp, path)
        return path

    def load_all(self) -> tuple[Profile, ...]:
        """Every profile in the folder, sorted by file name; SpecError names a bad file's line."""
        if not self.folder.is_dir():
            return ()
        return tuple(load_profile(p) for p in sorted(self.folder.glob("*.json")))

    def get(self, model: str, device: str, dtype: str, batch: int) -> Profile | None:
        key = (model, device, dtype, batch)
        return next((p for p in self.load_all() if p.key == key), None)


def model_profiles(model: str, folder: Path | None = None) -> tuple[Profile, ...]:
    """Every stored profile of ``model`` (any device, dtype, batch), in ``load_all``'s order."""
    return tuple(p for p in ProfileStore(folder).load_all() if p.model == model)


def store_cost_params(
    model: str, efficiency: float = 1.0, profiles: tuple[Profile, ...] | None = None
) -> CostParams:
    """The replay's CostParams for ``model``: ``CostParams(efficiency=efficiency)`` with
    ``profiles`` (None: ``model_profiles(model)``, the store's); op efficiencies and per-type
    corrections are CostParams' defaults, as in ``runtime.executor.worker.layer_seconds``."""
    if profiles is None:
        profiles = model_profiles(model)
    return CostParams(efficiency=efficiency).with_profiles(profiles)
