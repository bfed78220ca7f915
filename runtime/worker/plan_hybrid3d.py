"""A 3D plan's trial (issue 42): predicted only, reported as such, never as a measurement.

The document is a ``hybrid_3d`` plan (``simulator.threed.document.ThreeDDocument``): a
Megatron-style TP x PP x DP layout with ZeRO and recompute for a GPT. Nothing in this service runs
such a plan yet: the testbed emulates AutoSync, pipeline, Whale and HeterPS plans by replaying
their compute on shaped namespaces, and has no tensor-parallel GEMMs, ZeRO sharding or recompute to
replay; a gpu-pool worker runs the executor's data-parallel strategies only. So the trial reports a
failure that starts with ``predicted only:`` and carries the predictions in ``details``
(``status: "predicted_only"``) with no iteration times: the search's result then has no measured
best (``service.plans.results``), and nothing downstream can read a prediction as a measurement.

An invalid document is a failed trial naming the field, as for every other runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from simulator.spec.measurement import Measurement
from simulator.threed.document import ThreeDDocument

if TYPE_CHECKING:
    from runtime.worker.plans import TrialContext

REASON = (
    "no runner executes a TP x PP x DP plan with ZeRO and recompute on this service's workers "
    "(the testbed replays AutoSync, pipeline, Whale and HeterPS plans; a GPU pool runs data-parallel "
    "strategies), so this trial has no measurement"
)


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Report a 3D plan as predicted only (see the module docstring)."""
    try:
        doc = ThreeDDocument.model_validate(document)
        doc.plan().check(doc.model.config())
    except (ValidationError, ValueError) as e:
        return Measurement(
            failure=f"invalid: hybrid_3d document: {e}",
            details={"plan_kind": "hybrid_3d", "status": "invalid"},
        )
    p = doc.predicted
    return Measurement(
        failure=(
            f"predicted only: {doc.summary()}; predicted {p.seconds * 1e3:.1f} ms per iteration and "
            f"{doc.memory_line()}; {REASON}"
        ),
        details={
            "plan_kind": "hybrid_3d",
            "status": "predicted_only",
            "predicted_s": p.seconds,
            "predicted_peak_memory_bytes": doc.memory.peak_bytes,
            "predicted_fits": doc.memory.fits,
        },
    )
