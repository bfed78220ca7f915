"""Pipeline-length cost model (Ada-Grouper §4.3, §5.2): stage compute + measured cross-stage transfers.

The length of one training step of a kFkB plan is the event simulation (``simulator.pipeline.events``)
of its action lists, with

- per-stage compute from the compute model (``stage_compute_seconds``, the only call into it):
  the sums over the stage's layers of ``simulator.analytical.compute.layer_times`` (roofline per
  layer, class-dependent backward, or a measured profile for (model, device, dtype, b)) for one
  micro-batch of b samples, with the caller's full ``CostParams``; the pipeline executor's replay
  takes its ``PipelineConfig.cost_params`` (efficiency + the profile store's profiles of the
  model, as the executor's ``layer_seconds``), so a prediction given the same params predicts
  what the replay sleeps;
- per-link transfer seconds *measured end to end* (not derived from bandwidth: §4.3 explains that
  preemption and tensor shapes make bytes/bandwidth unreliable), smoothed by a moving average over
  the last ``window`` samples (``TransferWindow``); links without samples fall back to
  bytes / bandwidth of the slower of the two nodes (a prior, replaced as soon as samples arrive);
- the data-parallel gradient all-reduce of each stage's replicas added after its last backward.

Shapes: ``fwd``, ``bwd``: [P] seconds per micro-batch; transfers: {(src, dst): seconds/message}.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
from simulator.pipeline.events import simulate
from simulator.pipeline.schedule import kfkb
from simulator.spec import GBPS, ClusterSpec, DeviceType, ModelSpec, Plan


def stage_compute_seconds(
    model: ModelSpec,
    device: DeviceType,
    first: int,
    last: int,
    micro_batch: int,
    efficiency: float = 1.0,
    params: CostParams | None = None,
) -> tuple[float, float]:
    """(forward, backward) seconds of layers [first, last) for one micro-batch of ``micro_batch``.

    ``params``: the full CostParams of the caller (op efficiencies, compute dtype, per-device
    corrections, measured profiles: a profile keyed (model, device, dtype, ``micro_batch``) gives
    the layers it lists); when given, ``efficiency`` is not used. Without it,
    ``CostParams(efficiency=efficiency)`` (the roofline with its defaults), as before 2026-11-25b.
    """
    t = layer_times(model, device, micro_batch, params or CostParams(efficiency=efficiency))
    return float(t.fwd[first:last].sum()), float(t.bwd[first:last].sum())


@dataclass
class TransferWindow:
    """Moving average of the last ``window`` measured transfer times per directed link (§4.3)."""

    window: int = 16
    _samples: dict[tuple[int, int], deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"TransferWindow.window: must be >= 1, got {self.window}")

    def add(self, link: tuple[int, int], seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"transfer time of link {link} must be >= 0, got {seconds}")
        self._samples.setdefault(link, deque(maxlen=self.window)).append(seconds)

    def mean(self, link: tuple[int, int]) -> float | None:
        q = self._samples.get(link)
        return sum(q) / len(q) if q else None

    def means(self) -> dict[tuple[int, int], float]:
        return {k: sum(q) / len(q) for k, q in self._samples.items() if q}


def cut_bytes(model: ModelSpec, boundary: int) -> float:
    """Bytes per sample that cross a pipeline cut before layer ``boundary``.

    Every output of a layer before the cut that a layer at or after it reads (``Layer.inputs``; a
    layer naming no inputs reads its predecessor): for a chain, the last layer's output; for a
    U-Net, also the encoder outputs its skip connections carry past the cut (a decision: they
    travel with the activation, one message per micro-batch; their gradients come back the same way).
    """
    before = {layer.name: layer for layer in model.layers[:boundary]}
    crossing: set[str] = set()
    for j in range(boundary, len(model.layers)):
        layer = model.layers[j]
        sources = layer.inputs or ((model.layers[j - 1].name,) if j > 0 else ())
        crossing.update(n for n in sources if n in before)
    return float(sum(before[n].activation_bytes for n in crossing))


def boundary_bytes(model: ModelSpec, plan: Plan, stage: int) -> float:
    """Bytes stage ``stage`` sends forward per micro-batch (``cut_bytes`` after its last layer)."""
    return cut_bytes(model, plan.stages[stage].last_layer) * plan.micro_batch_size


def prior_transfers(model: ModelSpec, cluster: ClusterSpec, plan: Plan) -> dict[tuple[int, int], float]:
    """Bytes / bandwidth of each link between adjacent stages (activation forward, gradient back)."""
    out = {}
    for s in range(len(plan.stages) - 1):
        a = plan.stages[s].devices[0].rpartition(":")[0]
        b = plan.stages[s + 1].devices[0].rpartition(":")[0]
        ia, ib = cluster.node_index[a], cluster.node_index[b]
        gbps = cluster.link_gbps(ia, ib)
        t = boundary_bytes(model, plan, s) / (gbps * GBPS)
        out[(s, s + 1)] = out[(s + 1, s)] = t
    return out


def pipeline_length(
    plan: Plan,
    fwd: Sequence[float],
    bwd: Sequence[float],
    transfers: Mapping[tuple[int, int], float],
    dp_sync: Sequence[float] | None = None,
    replica: int = 0,
    host: Sequence[float] | None = None,
    recompute: bool = False,
) -> float:
    """Predicted seconds of one step of ``plan``'s pipeline replica ``replica`` (``host``: the
    runtime's per-action host seconds per stage, ``simulator.pipeline.events.simulate``).

    ``recompute``: the plan runs with re-materialisation (GPipe's; ``runtime.pipeline.stage_net.
    Recompute``), so every backward re-runs its stage's forward first and lasts fwd + bwd. Leave it
    False when ``bwd`` is a measured backward of such a run (it holds the recomputation already)."""
    n = plan.replica_micro_batches(replica)
    if recompute:
        bwd = [f + b for f, b in zip(fwd, bwd, strict=True)]
    timeline = simulate(kfkb(len(plan.stages), n, plan.group_size(n)), fwd, bwd, transfers, host=host)
    sync = dp_sync or [0.0] * len(plan.stages)
    return max(end + s for end, s in zip(timeline.stage_end, sync, strict=True))


def plan_stage_times(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: Plan,
    efficiency: float = 1.0,
    params: CostParams | None = None,
) -> tuple[list[float], list[float]]:
    """Per-stage (forward, backward) seconds per micro-batch of ``plan`` on its devices
    (``stage_compute_seconds``; pass the replay's ``params`` to predict what it sleeps)."""
    fwd, bwd = [], []
    for st in plan.stages:
        device = cluster.device_type(st.devices[0].rpartition(":")[0])
        f, b = stage_compute_seconds(
            model, device, st.first_layer, st.last_layer, plan.micro_batch_size, efficiency, params
        )
        fwd.append(f)
        bwd.append(b)
    return fwd, bwd
