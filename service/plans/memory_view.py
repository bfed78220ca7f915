"""Memory per GPU of a strategy, by part, as `strategist cost` and the dashboard's candidate page show it.

The rule is ``simulator.memory``'s, applied by ``search.feasibility.MemoryModel`` (the sampler's
feasibility check): parameters + gradients + optimizer state + activations per GPU against the
usable share of the smallest GPU, and each PS server's host memory.
"""

from __future__ import annotations

from typing import Any

from simulator.spec import ClusterSpec, ModelSpec, Strategy


def memory_parts(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy) -> dict[str, Any]:
    """Bytes per GPU by part under ``search.feasibility.MemoryModel`` (the sampler's rule), its
    capacity and verdict. Optimizer state is the remainder of the rule's total after parameters,
    gradients and activations (collective shards' Adam moments, PowerSGD buffers)."""
    from search.feasibility import MemoryModel
    from simulator.memory import MemoryConfig

    config = MemoryConfig()
    check = MemoryModel(model, cluster, config).check(strategy)
    params = float(model.param_bytes)
    grads = float(sum(v.grad_bytes for v in model.variables))
    activations = model.activation_bytes * model.batch_size * config.activation_factor
    parts = {
        "parameters": params,
        "gradients": grads,
        "optimizer state": max(check.device_bytes - params - grads - activations, 0.0),
        "activations": activations,
    }
    return {
        "fits": check.ok,
        "device_bytes": check.device_bytes,
        "device_capacity": check.device_capacity,
        "parts": parts,
        "host_bytes": check.host_bytes,
        "reasons": list(check.reasons),
        "assumptions": f"{config.optimizer} optimizer state, batch {model.batch_size}/GPU, "
        f"{config.device_usable:.0%} of the smallest GPU usable",
    }
