"""Measured HeterPS plans (issue 18, item 6): stages as processes on shaped links, PS-served embeddings.

Public API:
    measure_plan(model, resources, plan, provisioning, *, config) -> HeterogeneousRun
    MeasureConfig, HeterogeneousRun, StageMeasurement
"""

from runtime.heterogeneous.measure import HeterogeneousRun, MeasureConfig, StageMeasurement, measure_plan

__all__ = ["HeterogeneousRun", "MeasureConfig", "StageMeasurement", "measure_plan"]
