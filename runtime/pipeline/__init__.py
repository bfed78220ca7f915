"""Pipeline execution (issue 17): a Plan's stages as processes running kFkB action lists for real.

``run_pipeline(model, cluster, plan, launcher, PipelineConfig(...))`` -> ``PipelineRun``. The only
module that names torch.distributed.pipelining's private runtime is ``adapter`` (pinned to 2.13).
"""

from runtime.pipeline.run import PipelineConfig, PipelineRun, run_pipeline, unsupported_plan_reason

__all__ = ["PipelineConfig", "PipelineRun", "run_pipeline", "unsupported_plan_reason"]
