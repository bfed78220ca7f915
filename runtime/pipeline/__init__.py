"""Pipeline execution (issue 17): a Plan's stages as processes running kFkB action lists for real.

``run_pipeline(model, cluster, plan, launcher, PipelineConfig(...))`` -> ``PipelineRun``. The only
module that names torch.distributed.pipelining's private runtime is ``adapter`` (pinned to 2.13).
Names are imported lazily, so the light entry points (``runtime.pipeline.preempt``'s flow
processes) start without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.pipeline.run import (
        PipelineConfig,
        PipelineRun,
        TunerRun,
        run_pipeline,
        unsupported_plan_reason,
    )
    from runtime.pipeline.tuner import AutoTuner, TunerConfig

_EXPORTS = {
    "AutoTuner": "runtime.pipeline.tuner",
    "TunerConfig": "runtime.pipeline.tuner",
    "PipelineConfig": "runtime.pipeline.run",
    "PipelineRun": "runtime.pipeline.run",
    "TunerRun": "runtime.pipeline.run",
    "run_pipeline": "runtime.pipeline.run",
    "unsupported_plan_reason": "runtime.pipeline.run",
}

__all__ = [
    "AutoTuner",
    "PipelineConfig",
    "PipelineRun",
    "TunerConfig",
    "TunerRun",
    "run_pipeline",
    "unsupported_plan_reason",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'runtime.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
