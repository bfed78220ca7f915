"""Measured compute: per-layer forward/backward times of a model on a real device (issue 15).

Public API:
    profile_model(model, device_name=, batch=, device=, ...) -> Profile   what `strategist profile` runs
    reference_module(name, batch, device)   the zoo model's real implementation where it imports here
    build_replicas(model, batch, device)    every layer rebuilt as real torch ops of its shapes
    time_module / time_replicas / time_passes   the timers
    ProfileStore                             profiles on disk (datasets/profiles/), looked up by key
    model_profiles / store_cost_params       a model's stored profiles; the replay's CostParams

The store's names import without torch (a service process ranking plans needs them, not torch);
the timers and replicas import torch on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simulator.profile.store import ProfileStore, model_profiles, profiles_dir, store_cost_params

if TYPE_CHECKING:
    from simulator.profile.measure import (
        Timing,
        profile_model,
        reference_module,
        time_module,
        time_passes,
        time_replicas,
    )
    from simulator.profile.replica import Replica, build_replicas

_LAZY = {
    "Timing": "simulator.profile.measure",
    "profile_model": "simulator.profile.measure",
    "reference_module": "simulator.profile.measure",
    "time_module": "simulator.profile.measure",
    "time_passes": "simulator.profile.measure",
    "time_replicas": "simulator.profile.measure",
    "Replica": "simulator.profile.replica",
    "build_replicas": "simulator.profile.replica",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'simulator.profile' has no attribute {name!r}")
    return getattr(importlib.import_module(where), name)


__all__ = [
    "ProfileStore",
    "Replica",
    "Timing",
    "build_replicas",
    "model_profiles",
    "profile_model",
    "profiles_dir",
    "reference_module",
    "store_cost_params",
    "time_module",
    "time_passes",
    "time_replicas",
]
