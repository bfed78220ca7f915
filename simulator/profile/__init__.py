"""Measured compute: per-layer forward/backward times of a model on a real device (issue 15).

Public API:
    profile_model(model, device_name=, batch=, device=, ...) -> Profile   what `strategist profile` runs
    reference_module(name, batch, device)   the zoo model's real implementation where it imports here
    build_replicas(model, batch, device)    every layer rebuilt as real torch ops of its shapes
    time_module / time_replicas / time_passes   the timers
    ProfileStore                             profiles on disk (datasets/profiles/), looked up by key
"""

from simulator.profile.measure import (
    Timing,
    profile_model,
    reference_module,
    time_module,
    time_passes,
    time_replicas,
)
from simulator.profile.replica import Replica, build_replicas
from simulator.profile.store import ProfileStore, profiles_dir

__all__ = [
    "ProfileStore",
    "Replica",
    "Timing",
    "build_replicas",
    "profile_model",
    "profiles_dir",
    "reference_module",
    "time_module",
    "time_passes",
    "time_replicas",
]
