"""A hybrid search's trial (issue 19): a Whale ``HybridPlan`` measured on the heterogeneous testbed.

The document is the plan itself (``simulator.spec.HybridPlan``, ``"kind": "hybrid"``). The runner
hands it to ``runtime.hybrid.testbed.measure_plan`` on the worker's launcher (the emulated cluster
the trial process keeps up), with the session's scale, dilation, warm-up, iterations, efficiency
and timeout, so a hybrid trial is measured with the protocol of every other trial: each emulated
GPU replays its own type's compute and charges its own type's memory.

The Measurement's ``details``: ``busy_s`` (per device, median compute seconds of a measured step,
real-cluster seconds) and ``status``; a plan that does not fit a device is a failed trial whose
failure starts with ``oom:`` and names the device and allocation, as a GPU's out-of-memory would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.spec.hybrid import plan_document
from simulator.spec.measurement import Measurement

if TYPE_CHECKING:
    from runtime.worker.plans import TrialContext


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Measure a hybrid plan; an invalid, unsupported or out-of-memory plan is a failed Measurement."""
    from runtime.hybrid.testbed import measure_plan

    plan, profiles = plan_document(document)
    session = context.session()
    ex = session.config
    result = measure_plan(
        context.model,
        context.cluster,
        plan,
        iterations=ex.iterations,
        warmup=ex.warmup,
        scale=ex.scale,
        dilation=ex.dilation,
        efficiency=ex.efficiency,
        timeout_s=ex.timeout_s,
        launcher=session.launcher,
        profiles=profiles if profiles is not None else session.profiles,
    )
    base = {"scale": ex.scale, "compute_mode": "replay"}
    if result.status != "ok" or result.measurement is None:
        return Measurement(
            failure=f"{result.status}: {result.reason}",
            details={"plan_kind": "hybrid", "status": result.status},
            **base,
        )
    details = {
        "plan_kind": "hybrid",
        "status": "ok",
        "busy_s": {dev: float(t) for dev, t in result.busy_s.items()},
        "peak_memory_bytes": {dev: float(b) for dev, b in result.peak_memory_bytes.items()},
    }
    return result.measurement.model_copy(update={"details": details})
