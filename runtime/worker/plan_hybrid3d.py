"""A 3D plan's trial (issue 42): refused, never run and never reported as a measurement.

A ``hybrid_3d`` document (``simulator.threed.document.ThreeDDocument``: a Megatron-style
TP x PP x DP layout with ZeRO and recompute for a GPT) is predicted only. Nothing in this service
runs such a plan: the testbed replays AutoSync, pipeline, Whale and HeterPS plans on shaped
namespaces and has no tensor-parallel GEMMs, ZeRO sharding or recompute to replay; a gpu-pool
worker runs the executor's data-parallel strategies. So the service never queues a trial of one:
the search loop records a 3D search's ranking as predicted candidates with no trial
(``PlanKind.predicted_only``, ``service.loop``). A worker that is handed one anyway (a trial queued
by hand, or by an older service) refuses it with this reason instead of pretending to run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.spec.measurement import Measurement

if TYPE_CHECKING:
    from runtime.worker.plans import TrialContext

REASON = (
    "refused: hybrid_3d plans are predicted only: no runner executes a TP x PP x DP plan with ZeRO "
    "and recompute on this service's workers, and the service ranks them without queueing trials "
    "(see the search's candidates for the predicted ranking)"
)


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Refuse a 3D plan's trial (see the module docstring): a failed trial, no iteration times."""
    return Measurement(failure=REASON, details={"plan_kind": "hybrid_3d", "status": "refused"})
