"""Pipeline execution (issue 17): a Plan's stages as processes running kFkB action lists for real.

``run_pipeline(model, cluster, plan, launcher, PipelineConfig(...))`` -> ``PipelineRun``. The only
module that names torch.distributed.pipelining's private runtime is ``adapter`` (pinned to 2.13).
"""

from runtime.pipeline.run import PipelineConfig, PipelineRun, TunerRun, run_pipeline, unsupported_plan_reason
from runtime.pipeline.tuner import AutoTuner, TunerConfig

__all__ = [
    "AutoTuner",
    "PipelineConfig",
    "PipelineRun",
    "TunerConfig",
    "TunerRun",
    "run_pipeline",
    "unsupported_plan_reason",
]
