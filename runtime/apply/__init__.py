"""Use a searched plan in your own training: ``load_plan``, ``apply_plan`` and the plan checks (issue 40).

``apply_plan(model, load_plan("plan.json"))`` inside a torchrun job returns the model with the
plan's gradient synchronisation attached, built from the same :class:`GradientSync` the executor's
trials run. See runtime/apply/README.md.
"""

# The executor package first: its trial worker imports runtime.apply.sync (one implementation), and
# loading it from here keeps that import order whichever of the two packages a program imports first.
import runtime.executor  # noqa: F401  # isort: skip
from runtime.apply.checks import JobShape, PlanMismatch, check_job, check_model
from runtime.apply.module import PlannedModule, apply_plan, load_plan
from runtime.apply.pipeline import PipelinedModule, PipelineEngine
from runtime.apply.sync import GradientSync
from simulator.spec.planfile import PlanFile, sync_plan_file, write_plan_file

__all__ = [
    "GradientSync",
    "JobShape",
    "PipelineEngine",
    "PipelinedModule",
    "PlanFile",
    "PlanMismatch",
    "PlannedModule",
    "apply_plan",
    "check_job",
    "check_model",
    "load_plan",
    "sync_plan_file",
    "write_plan_file",
]
