"""Pipeline schedules: kFkB action lists (Ada-Grouper), their event simulation and pipeline length."""

from simulator.pipeline.events import Deadlock, PairingError, Timeline, simulate
from simulator.pipeline.schedule import Action, Op, Schedule, expected_peak_stashed, kfkb

__all__ = [
    "Action",
    "Deadlock",
    "Op",
    "PairingError",
    "Schedule",
    "Timeline",
    "expected_peak_stashed",
    "kfkb",
    "simulate",
]
