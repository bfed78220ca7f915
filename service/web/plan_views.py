"""What the dashboard shows of a pipeline or hybrid plan and its trial (issues 17, 19), as plain view rows.

- Pipeline: the chosen and starting (k, b), the tuner's switches, and a Gantt picture of the last
  measured step drawn server-side as SVG rectangles (one lane per stage and replica, forward and
  backward of every micro-batch from the executor's timestamps: ``Measurement.details['gantt']``,
  written by ``runtime.worker.plan_pipeline``), plus the document's stages and (k, b) curve.
- Hybrid: one row per TaskGraph with its layers, primitive, devices (and their types), each
  device's batch share and, once measured, its busy seconds per step (``details['busy_s']``).

Documents that are not a pipeline or hybrid plan give None (the page shows nothing extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.domain import Trial
from simulator.spec import Plan
from simulator.spec.hybrid import plan_document

if TYPE_CHECKING:
    from service.web.heterogeneous_views import HeterogeneousView
    from simulator.threed.document import ThreeDDocument

#: Gantt geometry (px): drawing width, lane height, left margin for lane labels, axis height.
WIDTH, LANE, LEFT, AXIS = 720.0, 22.0, 110.0, 24.0


@dataclass(frozen=True)
class Rect:
    """One compute action in the Gantt picture (SVG user units)."""

    x: float
    y: float
    w: float
    h: float
    kind: str  # 'F' or 'B'
    label: str  # micro-batch index
    title: str  # hover text


@dataclass(frozen=True)
class Gantt:
    width: float
    height: float
    lanes: list[tuple[float, str]]  # (y of the lane's text baseline, label)
    rects: list[Rect]
    ticks: list[tuple[float, str]]  # (x, label) on the time axis
    seconds: float
    step: int


@dataclass(frozen=True)
class PipelineView:
    """A pipeline document (and its trial's details, once measured)."""

    stages: list[tuple[int, int, str]]  # (first layer, last layer exclusive, devices)
    curve: list[dict[str, Any]]  # every candidate's schedule, k, b; 'start' marks the first
    adaptive: bool
    chosen: dict[str, Any] | None = None
    switches: list[dict[str, Any]] = field(default_factory=list)
    evaluations: int = 0
    gantt: Gantt | None = None


@dataclass(frozen=True)
class TaskGraphRow:
    index: int
    name: str
    primitive: str
    degree: int
    layers: tuple[int, int]
    devices: list[tuple[str, str, int, float | None]]  # (device, type, share, busy seconds)


@dataclass(frozen=True)
class HybridView:
    """A hybrid plan (and its trial's measured busy time per device, once measured)."""

    name: str
    nested_dp: int
    global_batch: int
    micro_batches: int
    task_graphs: list[TaskGraphRow]
    measured: bool


def _kb(plan: Plan) -> dict[str, Any]:
    return {
        "schedule": plan.schedule,
        "k": plan.group_size(plan.replica_micro_batches(0)),
        "b": plan.micro_batch_size,
    }


def _fmt(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def gantt(details: dict[str, Any]) -> Gantt | None:
    """The SVG geometry of ``details['gantt']`` (None when the trial recorded none)."""
    g = details.get("gantt")
    if not g or not g.get("rows"):
        return None
    rows = g["rows"]
    total = max(float(g.get("seconds") or 0.0), max(float(r[5]) for r in rows)) or 1.0
    lanes_keys = sorted({(int(r[0]), int(r[1])) for r in rows}, key=lambda k: (k[1], k[0]))
    lane_of = {k: i for i, k in enumerate(lanes_keys)}
    replicas = len({k[0] for k in lanes_keys})
    span = WIDTH - LEFT - 10
    rects = []
    for replica, stage, kind, mb, start, end in rows:
        y = lane_of[(int(replica), int(stage))] * LANE
        x = LEFT + float(start) / total * span
        w = max(1.0, (float(end) - float(start)) / total * span)
        title = f"stage {stage} replica {replica}: {kind} of micro-batch {mb}, {_fmt(float(start))} → {_fmt(float(end))}"
        rects.append(Rect(round(x, 2), y + 2, round(w, 2), LANE - 4, str(kind), str(mb), title))
    lanes = [
        (i * LANE + LANE * 0.7, f"stage {s}" + (f" · replica {r}" if replicas > 1 else ""))
        for i, (r, s) in enumerate(lanes_keys)
    ]
    ticks = [(round(LEFT + f * span, 2), _fmt(f * total)) for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    height = len(lanes_keys) * LANE + AXIS
    return Gantt(WIDTH, height, lanes, rects, ticks, total, int(g.get("step", 0)))


def pipeline_view(document: dict[str, Any], details: dict[str, Any] | None) -> PipelineView:
    plans = [Plan.model_validate(p) for p in document["candidates"]]
    start = int(document.get("start", 0))
    stages = [(st.first_layer, st.last_layer, ", ".join(st.devices)) for st in plans[0].stages]
    curve = [{**_kb(p), "start": i == start} for i, p in enumerate(plans)]
    d = details or {}
    return PipelineView(
        stages=stages,
        curve=curve,
        adaptive=bool(document.get("adaptive", True)) and len(plans) > 1,
        chosen=d.get("chosen"),
        switches=list(d.get("switches") or []),
        evaluations=int(d.get("evaluations") or 0),
        gantt=gantt(d) if d else None,
    )


def hybrid_view(document: dict[str, Any], details: dict[str, Any] | None) -> HybridView:
    plan, _ = plan_document(document)
    busy: dict[str, float] = dict((details or {}).get("busy_s") or {})
    rows = []
    for i, tg in enumerate(plan.task_graphs):
        shares = plan.device_shares(i)
        types = [t for vd in tg.virtual_devices for t in (vd.types or ("",) * len(vd.devices))]
        rows.append(
            TaskGraphRow(
                index=i,
                name=tg.name,
                primitive=tg.primitive,
                degree=tg.degree,
                layers=(tg.first_layer, tg.last_layer),
                devices=[
                    (dev, typ, shares[dev], busy.get(dev)) for dev, typ in zip(tg.devices, types, strict=True)
                ],
            )
        )
    return HybridView(plan.name, plan.nested_dp, plan.global_batch, plan.num_micro_batches, rows, bool(busy))


def plan_label(document: dict[str, Any], details: dict[str, Any] | None = None) -> str:
    """One line for a trials table: a pipeline's start and chosen (k, b) and its switches, a hybrid
    plan's name and TaskGraphs; '' for a Strategy or another kind."""
    kind = document.get("kind")
    d = details or {}
    if kind == "pipeline":
        plan = Plan.model_validate(document["candidates"][int(document.get("start", 0))])
        kb = _kb(plan)
        text = f"P={len(plan.stages)} {kb['schedule']} k={kb['k']} b={kb['b']}"
        if d.get("chosen"):
            c = d["chosen"]
            text += (
                f" → chosen {c['schedule']} k={c['k']} b={c['b']} ({len(d.get('switches') or [])} switches)"
            )
        return text
    if kind == "hybrid":
        hp, _ = plan_document(document)
        return f"{hp.name or 'hybrid'}: {len(hp.task_graphs)} TaskGraphs, nested DP {hp.nested_dp}"
    if kind == "hybrid_3d":  # issue 42: layout and predicted memory per GPU
        from simulator.threed.document import ThreeDDocument

        d3 = ThreeDDocument.model_validate(document)
        return f"{d3.summary()} · {d3.memory_line()}"
    return ""


def plan_labels(trials: Sequence[Trial]) -> dict[int, str]:
    """Trial id -> ``plan_label`` of its document and measured details (the search page's column)."""
    return {t.id: plan_label(t.strategy, (t.measurement or {}).get("details")) for t in trials}


def plan_view(
    document: dict[str, Any], details: dict[str, Any] | None = None
) -> PipelineView | HybridView | HeterogeneousView | ThreeDDocument | None:
    """The view of a pipeline, hybrid or heterogeneous document; None for a Strategy or another kind."""
    kind = document.get("kind")
    if kind == "pipeline":
        return pipeline_view(document, details)
    if kind == "hybrid":
        return hybrid_view(document, details)
    if kind == "heterogeneous_plan":
        from service.web.heterogeneous_views import heterogeneous_view

        return heterogeneous_view(document, details)
    if kind == "hybrid_3d":  # issue 42: the document is its own view (hybrid3d_plan.html)
        from simulator.threed.document import ThreeDDocument

        return ThreeDDocument.model_validate(document)
    return None
