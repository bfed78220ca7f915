"""Deciding pipeline plans: (k, b) candidates on the memory-limit curve (Ada-Grouper §4.2)."""

from search.pipeline.candidates import (
    Candidate,
    StageVerdict,
    memory_curve,
    plan_memory,
    plan_memory_reasons,
    with_kb,
)

__all__ = ["Candidate", "StageVerdict", "memory_curve", "plan_memory", "plan_memory_reasons", "with_kb"]
