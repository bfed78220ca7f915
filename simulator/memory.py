"""The memory rule: the bytes a GPU holds for a training step, and what it may hold.

One home for the rule the planners check plans with (``search.feasibility.MemoryModel``: the
sampler's feasibility check, the pipeline and hybrid planners) and the runtime measures plans
with (``runtime.hybrid``'s emulated devices, the executor's estimate): a plan the planner says
fits is one the runtime's ledger admits, because both count with these functions.

For the layers [first, last) of a model, one GPU holds
    parameters        sum of the layers' variable bytes
  + gradients         sum of their gradient bytes (density-scaled for sparse variables)
  + optimizer state   state_factor x parameter bytes
  + activations       per-sample activation bytes x activation_factor x samples stashed for backward
  + buffers           point-to-point buffers: the boundary activations per sample x buffered samples
and may hold ``usable`` x its memory. state_factor: Adam keeps two moments (2x parameter bytes), SGD
with momentum one (1x), plain SGD none; Adam is the default assumption (BERT and NCF train with it
in MLPerf, the worst common case). GB in ``DeviceType.memory_gb`` and ``Node.host_memory_gb`` is
read as 1e9 bytes (conservative against the GiB that vendors mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.spec import DeviceType, ModelSpec, Node

GB = 1e9
Optimizer = Literal["adam", "sgd_momentum", "sgd"]
#: Optimizer state bytes per parameter byte.
STATE_FACTOR: dict[str, float] = {"adam": 2.0, "sgd_momentum": 1.0, "sgd": 0.0}


@dataclass(frozen=True)
class MemoryConfig:
    """Assumptions of the memory rule (the planners' defaults; the runtime's hybrid testbed reads them)."""

    # Optimizer whose state is counted (Adam: 2x parameters; SGD momentum: 1x; SGD: 0).
    optimizer: Optimizer = "adam"
    # Multiplier on the per-sample activation bytes stored for the backward pass.
    activation_factor: float = 1.0
    # Fraction of a GPU's memory the training step may use (the rest: CUDA context, workspace,
    # allocator fragmentation).
    device_usable: float = 0.9
    # Fraction of a server's host memory its PS shards may use.
    host_usable: float = 0.8
    # Per-GPU batch size; None = the model's default.
    batch_size: int | None = None

    @property
    def state_factor(self) -> float:
        return STATE_FACTOR[self.optimizer]


@dataclass(frozen=True)
class StageMemory:
    """Bytes one GPU holding some layers needs, by kind."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers


def layer_bytes(model: ModelSpec, first: int, last: int) -> tuple[float, float]:
    """(parameter bytes, gradient bytes) of layers [first, last)."""
    variables = [v for layer in model.layers[first:last] for v in layer.variables]
    return float(sum(v.bytes for v in variables)), float(sum(v.grad_bytes for v in variables))


def activation_bytes(model: ModelSpec, first: int, last: int, activation_factor: float = 1.0) -> float:
    """Activation bytes per sample that layers [first, last) stash for backward."""
    return sum(layer.activation_bytes for layer in model.layers[first:last]) * activation_factor


def boundary_bytes(model: ModelSpec, first: int, last: int) -> float:
    """Point-to-point buffer bytes per sample of a GPU holding layers [first, last): their output
    activation and, unless ``first`` is the first layer, their input (the previous layer's output)."""
    return model.layers[last - 1].activation_bytes + (
        model.layers[first - 1].activation_bytes if first > 0 else 0.0
    )


def stage_memory(
    model: ModelSpec,
    first: int,
    last: int,
    *,
    stashed_samples: float,
    buffer_samples: float = 0,
    state_factor: float = STATE_FACTOR["adam"],
    activation_factor: float = 1.0,
) -> StageMemory:
    """Bytes of one GPU holding layers [first, last) (a pipeline stage or a replica): the rule above
    with ``stashed_samples`` samples of activations and ``buffer_samples`` of boundary buffers."""
    params, grads = layer_bytes(model, first, last)
    return StageMemory(
        params=params,
        grads=grads,
        optimizer=state_factor * params,
        activations=activation_bytes(model, first, last, activation_factor) * stashed_samples,
        buffers=boundary_bytes(model, first, last) * buffer_samples,
    )


def usable_bytes(device: DeviceType, usable: float = 1.0) -> float:
    """Bytes of one GPU of type ``device`` a step may use."""
    return device.memory_gb * GB * usable


def usable_host_bytes(node: Node, usable: float = 1.0) -> float:
    """Bytes of ``node``'s host memory its parameter-server shards may use."""
    return node.host_memory_gb * GB * usable
