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
- ``autocast_activation_factor``: the activation factor of mixed precision (PyTorch autocast):
  the fraction of a model's traced activation bytes it stores when matrix ops run in float16 and
  everything else keeps autocast's dtype rules (see the function).
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
from simulator.spec import DTYPE_BYTES, ClusterSpec, DeviceType, ModelSpec

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


# Layer kinds whose output autocast(float16) makes half precision: its "ops that can autocast to
# float16" (conv*, linear, matmul/bmm/addmm, prelu, ...; a multi-head attention module ends in
# its out-projection, a linear). Lower-case ``Layer.kind`` prefixes.
AUTOCAST_FP16_KINDS = (
    "linear",
    "conv",
    "matmul",
    "bmm",
    "addmm",
    "baddbmm",
    "mm",
    "prelu",
    "multiheadattention",
)
# Kinds autocast runs in float32 ("ops that can autocast to float32": layer_norm, group_norm,
# softmax, log_softmax, the losses, ...), and embedding lookups, which autocast leaves alone and
# which return their float32 table's rows.
AUTOCAST_FP32_KINDS = ("layernorm", "groupnorm", "softmax", "logsoftmax", "embedding", "loss")


def autocast_activation_factor(model: ModelSpec, first: int = 0, last: int | None = None) -> float:
    """Stored activation bytes of layers [first, last) under autocast(float16) / traced bytes.

    Mixed precision as PyTorch runs it (``torch.autocast`` + GradScaler): parameters, gradients and
    optimizer state stay float32 (so the memory rule's parameter, gradient and state bytes and the
    data-parallel all-reduce's gradient bytes do not change); a layer's output is float16 where
    autocast casts the op to float16 (``AUTOCAST_FP16_KINDS``), float32 where it runs the op in
    float32 (``AUTOCAST_FP32_KINDS``), and otherwise (add, ReLU, dropout, batch norm, pooling,
    ...: ops autocast does not list) the type promotion of its inputs: float32 if any input is
    float32, a layer reading the model's input reads float32. ResNet50: every conv, batch norm
    (cuDNN keeps the float16 input's type) and residual add is float16: 0.5. BERT-large: the linear
    and attention outputs are float16, the residual adds and LayerNorms float32 (the residual
    stream stays float32, the input of every add): 0.64. Models traced in 2-byte types: 1.

    Not counted (the memory rule has no place for them): autocast's cache of float16 weight copies
    (2 bytes per parameter of the cast layers, freed after the step; BERT-large 0.67 GB, ResNet50
    0.05 GB), inside the 10 % the planner leaves unused (``MemoryConfig.device_usable``).
    """
    last = len(model.layers) if last is None else last
    traced = max((DTYPE_BYTES.get(v.dtype, 4) for v in model.variables if "float" in v.dtype), default=4)
    if traced <= 2:
        return 1.0
    half: dict[str, bool] = {}
    for layer in model.layers:
        kind = layer.kind.lower().replace("_", "")
        if kind.startswith(AUTOCAST_FP16_KINDS):
            half[layer.name] = True
        elif kind.startswith(AUTOCAST_FP32_KINDS) or not layer.inputs:
            half[layer.name] = False
        else:
            half[layer.name] = all(half.get(s, False) for s in layer.inputs)
    layers = model.layers[first:last]
    total = sum(layer.activation_bytes for layer in layers)
    if total <= 0:
        return 1.0
    stored = sum(layer.activation_bytes * (2 / traced if half[layer.name] else 1.0) for layer in layers)
    return stored / total


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
