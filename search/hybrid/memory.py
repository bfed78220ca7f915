"""Algorithm 1's inputs from the one memory model and the one compute model.

Every memory figure here comes from ``search.feasibility.MemoryModel`` (parameters, gradients,
optimizer state, activations stashed per schedule, point-to-point buffers; the same rules the
sampler and the pipeline candidates use), every speed from ``simulator.analytical.compute``.

- ``replicate_profile``: a replicate TaskGraph's units are samples of the batch; device i holding
  u samples needs ``stage_bytes(first, last, stashed=u, buffers=0)`` (a full replica with its
  optimizer state, activations of u samples).
- ``split_profile``: a split TaskGraph's units are columns of its split dimension; a device with
  fraction f = u / units holds f of every parameter, gradient, optimizer slot and activation of
  the TaskGraph's layers (every layer is sharded along the split dimension: a decision, Whale's
  sharding patterns cover the matmul/attention/embedding layers that hold nearly all of them) and
  full-size bridge buffers for the batch (the bridge gathers whole tensors, §3.2.3).
- ``device_slots``: DF_i and DM_i. ``capacity="peak"`` is the paper's DF_i, the device's
  single-precision FLOP/s; ``capacity="compute"`` (the default) is the FLOP/s the compute model
  says the device reaches on this TaskGraph at the even share: the same ratio the testbed's
  replay and the cost model use, which differs from the peak ratio where layers are bound by
  memory bandwidth or launch overhead.

Shapes: N devices; the profile's memory(i, u) -> bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from search.feasibility import MemoryModel
from search.hybrid.balance import DeviceSlot, TaskGraphProfile
from simulator.analytical.compute import layer_times, layer_work
from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, DeviceType, ModelSpec

Capacity = Literal["compute", "peak"]


def node_of(device: str) -> str:
    """The node name of 'node:gpu'."""
    node, sep, idx = device.rpartition(":")
    if not sep or not idx.isdigit():
        raise ValueError(f"device {device!r} is not 'node:gpu_index'")
    return node


def train_flops_per_sample(model: ModelSpec, first: int, last: int) -> float:
    """Forward + backward FLOPs of one sample through layers [first, last) (the compute model's count)."""
    return float(layer_work(model, 1).flops[:, first:last].sum())


def replicate_profile(
    memory: MemoryModel, first: int, last: int, batch: int, granularity: int = 1
) -> TaskGraphProfile:
    """A replicate TaskGraph of layers [first, last) sharing ``batch`` samples per step."""
    model = memory.model
    return TaskGraphProfile(
        units=batch,
        flop_per_unit=train_flops_per_sample(model, first, last),
        memory=lambda _i, u: memory.stage_bytes(first, last, u, 0).total,
        granularity=granularity,
    )


def split_profile(memory: MemoryModel, first: int, last: int, batch: int, units: int) -> TaskGraphProfile:
    """A split TaskGraph of layers [first, last) whose split dimension of ``units`` is shared."""
    model = memory.model
    whole = memory.stage_bytes(first, last, batch, 0)
    bridge = memory.boundary_bytes(first, last) * batch

    def bytes_of(_i: int, u: int) -> float:
        f = u / units
        return (whole.params + whole.grads + whole.optimizer + whole.activations) * f + bridge

    return TaskGraphProfile(
        units=units,
        flop_per_unit=train_flops_per_sample(model, first, last) * batch / units,
        memory=bytes_of,
    )


def device_type_of(cluster: ClusterSpec, device: str) -> DeviceType:
    return cluster.device_type(node_of(device))


def achieved_flops(
    model: ModelSpec, device: DeviceType, first: int, last: int, batch: int, params: CostParams
) -> float:
    """FLOP/s the compute model says ``device`` reaches on layers [first, last) at ``batch`` samples."""
    t = layer_times(model, device, max(1, batch), params)
    seconds = float(t.fwd[first:last].sum() + t.bwd[first:last].sum())
    flops = train_flops_per_sample(model, first, last)
    # FLOP-free layers (embedding lookups only): samples per second keeps the devices' ratio
    return (flops if flops > 0 else 1.0) * max(1, batch) / seconds


def device_slots(
    model: ModelSpec,
    cluster: ClusterSpec,
    devices: Sequence[str],
    memory: MemoryModel,
    *,
    first: int = 0,
    last: int | None = None,
    batch: int = 1,
    capacity: Capacity = "compute",
    params: CostParams | None = None,
) -> list[DeviceSlot]:
    """DF_i and DM_i of ``devices`` for layers [first, last); ``batch`` is the per-device batch
    at which the compute model's FLOP/s is read (the even share)."""
    last = len(model.layers) if last is None else last
    params = params or CostParams()
    out = []
    per_type: dict[str, float] = {}
    for d in devices:
        dt = device_type_of(cluster, d)
        if dt.name not in per_type:
            per_type[dt.name] = (
                dt.fp32_tflops * 1e12
                if capacity == "peak"
                else achieved_flops(model, dt, first, last, batch, params)
            )
        out.append(DeviceSlot(d, per_type[dt.name], memory.device_capacity_of(node_of(d))))
    return out
