"""Pipeline plans (Ada-Grouper kFkB) applied to the user's module: :class:`PipelineEngine`, :class:`PipelinedModule`.

    model = apply_plan(model, load_plan("plan.json"))     # a pipeline plan: returns a PipelinedModule
    for x, y in loader:                                   # x, y: the step's GLOBAL batch (every rank)
        loss = model.step(x[model.rows(len(x))], y[model.rows(len(x))], loss_fn)
        optimizer.step(); optimizer.zero_grad()
    state = model.state_dict()                            # collective: every rank calls it

What runs is the trials' pipeline path: the user's ``nn.Sequential`` is cut at the plan's stage
boundaries by module name (a stage's first layer names the child it starts at), this rank's
stage becomes a ``torch.distributed.pipelining.PipelineStage`` and the plan's kFkB action lists
(``simulator.pipeline.schedule.kfkb``) run through the one adapter the trials use
(``runtime/pipeline/adapter.py``: ``make_stage``, ``ScheduleRunner``). Gradients follow the trial
worker's rule (``runtime/pipeline/worker.py``): every micro-batch loss is a mean over its rows, a
stage scales its summed gradients by b / global_batch and all-reduces them (sum, one fused call)
over its data-parallel replicas, exact for unequal replica shares. With an adaptive plan the
online tuner (``runtime/pipeline/tuner.py``) re-evaluates the candidates every ``tuner_interval``
steps from every rank's event log, all ranks take the same decision, and (k, b) switches at a
step boundary. That data-parallel all-reduce is not :class:`~runtime.apply.sync.GradientSync`
(the pipeline trials never used the per-variable synchronisers), so the executor's mutation
switch does not reach this path.

Ranks: stage s of pipeline replica d runs on the plan's device ``stages[s].devices[d]``, i.e.
global rank ``device_rank(cluster, that device)`` (torchrun numbers ranks node by node). Each
replica's ranks must increase with the stage index (``new_group`` orders its ranks, and a
``PipelineStage``'s peers are group ranks s - 1 and s + 1); another placement is refused by name.

Every rank holds the whole user module (each builds the same seeded model); a stage trains only
its own children. ``state_dict()`` broadcasts every stage's parameters and buffers from its
replica-0 rank into every rank's module and returns the user's module's own state dict, and
``optim_state_dict(optimizer)`` gathers the optimizer state the same way, so a checkpoint is the
unpipelined model's and loads under any plan (or none).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runtime.apply.checks import PlanMismatch
from runtime.pipeline.adapter import EventLog, ScheduleRunner, make_stage
from runtime.pipeline.profile import profile_records
from runtime.pipeline.stage_net import input_width, output_width
from runtime.pipeline.tuner import AutoTuner, TunerConfig
from simulator.pipeline.schedule import kfkb
from simulator.spec import ModelSpec, Plan
from simulator.spec.cluster import ClusterSpec
from simulator.spec.hybrid import device_rank

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def stage_cuts(module: nn.Module, model: ModelSpec, plan: Plan) -> list[int]:
    """Child indices where each stage starts (plus the end): the user's module cut by module name.

    PlanMismatch names the reason when ``module`` is not an ``nn.Sequential`` whose children hold
    the plan's layers in the plan's order.
    """
    if not isinstance(module, nn.Sequential):
        raise PlanMismatch(
            f"module: a pipeline plan cuts an nn.Sequential at its stage boundaries; this module is a "
            f"{type(module).__name__} (wrap its layers, in forward order, in an nn.Sequential)"
        )
    names = [n for n, _ in module.named_children()]
    index = {n: i for i, n in enumerate(names)}
    children = []
    for layer in model.layers:
        top = layer.name.split(".", 1)[0]
        if top not in index:
            raise PlanMismatch(
                f"layer {layer.name!r}: the plan's layer is not below any child of this module"
            )
        children.append(index[top])
    if children != sorted(children):
        raise PlanMismatch("layers: the plan's layer order is not the module's children order")
    cuts = [0]
    for st in plan.stages[1:]:
        c = children[st.first_layer]
        if children[st.first_layer - 1] == c:
            raise PlanMismatch(
                f"stage boundary at layer {model.layers[st.first_layer].name!r}: it shares child "
                f"{names[c]!r} with the layer before it; a stage boundary must fall between children"
            )
        cuts.append(c)
    cuts.append(len(names))
    return cuts


def stage_ranks(cluster: ClusterSpec, plan: Plan) -> list[list[int]]:
    """ranks[d][s]: the global rank of stage s of replica d; PlanMismatch for a placement torch cannot run."""
    P, D = len(plan.stages), plan.stages[0].replicate
    for s, st in enumerate(plan.stages):
        if st.split != 1:
            raise PlanMismatch(
                f"stages.{s}.split: {st.split}; tensor-split stages are not applied (only replicate)"
            )
        if st.replicate != D:
            raise PlanMismatch(
                f"stages.{s}.replicate: {st.replicate}, stage 0 has {D}; unequal replicate degrees are not applied"
            )
    ranks = [[device_rank(cluster, plan.stages[s].devices[d]) for s in range(P)] for d in range(D)]
    for d, row in enumerate(ranks):
        if row != sorted(row):
            raise PlanMismatch(
                f"replica {d}: its stages run on ranks {row}; apply_plan needs them increasing with the stage"
            )
    return ranks


class PipelineEngine:
    """One rank's stage of a pipeline plan: a PipelineStage and kFkB runner per candidate, DP sync, tuner.

    Shared by ``apply_plan`` (the user's module cut into stages, :class:`PipelinedModule`) and the
    pipeline trial worker (``runtime/pipeline/worker.py``: a stage of layer replicas or replay).
    ``candidates`` share their stages and global batch (a ``PipelineTrial`` document); ``tuner``
    None runs ``current`` fixed (the caller may set it between steps: the worker's phases).
    ``widths``: the stage's input and output widths per sample. ``scale_grads`` False: gradients
    carry no values (replay) and only their all-reduce runs. ``stage_module_for(index)``: the module
    candidate ``index`` runs (the worker's re-materialised phases), default ``stage_module``.
    """

    def __init__(
        self,
        stage_module: nn.Module,
        stage: int,
        replica: int,
        candidates: tuple[Plan, ...] | list[Plan],
        pp_group: dist.ProcessGroup,
        dp_group: dist.ProcessGroup,
        widths: tuple[int, int],
        *,
        start: int = 0,
        tuner: TunerConfig | None = None,
        floors: dict[int, dict[tuple[int, int], float]] | None = None,
        scale_grads: bool = True,
        stage_module_for: Callable[[int], nn.Module] | None = None,
    ) -> None:
        first = candidates[0]
        for i, plan in enumerate(candidates):
            if plan.stages != first.stages:
                raise ValueError(f"plans.{i}.stages: every plan must keep the stages of plans.0")
        self.candidates = tuple(candidates)
        self.P, self.D = len(first.stages), first.stages[0].replicate
        self.stage, self.replica = stage, replica
        self.global_batch = first.global_batch
        self.stage_module = stage_module
        self.params = list(stage_module.parameters())
        self.pp_group, self.dp_group = pp_group, dp_group
        self.widths = widths
        self.scale_grads = scale_grads
        self._module_for = stage_module_for or (lambda _: stage_module)
        self.log = EventLog()
        self.runners: dict[int, tuple[ScheduleRunner, int, int]] = {}
        self.schedules: dict[str, list[str]] = {}
        self._grad_scale = 1.0
        self.current = start
        self.tuner = AutoTuner(list(self.candidates), start, tuner, floors=floors or {}) if tuner else None
        self.steps = 0
        self.step_times: list[tuple[int, float, float]] = []  # (candidate, start, end) of every step
        self._seen_events = self._seen_steps = 0
        self._first_steps: set[int] = set()  # a plan's first step (torch's one-off set-up): not observed
        self._ran: set[int] = set()
        self._tuned_at = -1

    def rows(self, global_batch: int, index: int | None = None) -> slice:
        """The rows of the global batch this rank's pipeline replica consumes."""
        if global_batch != self.global_batch:
            raise PlanMismatch(
                f"global batch: the plan is for {self.global_batch} samples per step, this step has {global_batch}"
            )
        plan = self.candidates[self.current if index is None else index]
        b = plan.micro_batch_size
        offset = sum(plan.replica_micro_batches(d) for d in range(self.replica)) * b
        return slice(offset, offset + plan.replica_micro_batches(self.replica) * b)

    def _reduce_grad(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.scale_grads:
            for g in grads:
                g.mul_(self._grad_scale)
        if self.D > 1 and grads:
            flat = torch.cat([g.flatten() for g in grads])
            dist.all_reduce(flat, group=self.dp_group)
            i = 0
            for g in grads:
                g.copy_(flat[i : i + g.numel()].view_as(g))
                i += g.numel()

    def runner(self, index: int, loss_fn: LossFn, dtype: torch.dtype, device: torch.device) -> ScheduleRunner:
        """Candidate ``index``'s PipelineStage and schedule runner (built once, kept for switches)."""
        if index not in self.runners:
            plan = self.candidates[index]
            b = plan.micro_batch_size
            n = plan.replica_micro_batches(self.replica)
            ex_in = torch.zeros(b, self.widths[0], dtype=dtype, device=device)
            ex_out = torch.zeros(b, self.widths[1], dtype=dtype, device=device)
            pstage = make_stage(
                self._module_for(index), self.stage, self.P, ex_in, ex_out, self.pp_group, self.log
            )
            schedule = kfkb(self.P, n, plan.group_size(n))
            self.runners[index] = (
                ScheduleRunner(pstage, schedule, loss_fn, self._reduce_grad, self.log),
                n,
                b,
            )
            self.schedules[str(index)] = schedule.to_rows()[self.stage]
        return self.runners[index][0]

    def step(
        self, inputs: torch.Tensor, target: torch.Tensor, loss_fn: LossFn, started: float | None = None
    ) -> torch.Tensor | None:
        """Forward and backward of this replica's rows through the pipeline; gradients synchronised.

        ``inputs`` / ``target``: this replica's rows (``rows()``); only the first stage reads the
        inputs and only the last the target. ``loss_fn`` must be a mean over its rows. ``started``:
        when the caller's step began (default now). Returns the replica's mean micro-batch loss on
        the last stage, else None.
        """
        self.tune()
        index = self.current
        t0 = time.monotonic() if started is None else started
        runner = self.runner(index, loss_fn, inputs.dtype, inputs.device)
        plan = self.candidates[index]
        self._grad_scale = plan.micro_batch_size / plan.global_batch
        if index not in self._ran:
            self._ran.add(index)
            self._first_steps.add(len(self.step_times))
        losses: list[Any] = []
        first, last = self.stage == 0, self.stage == self.P - 1
        runner.step(inputs if first else None, target if last else None, losses)
        self.step_times.append((index, t0, time.monotonic()))
        self.steps += 1
        if not last or not losses:
            return None
        return torch.stack([torch.as_tensor(v).detach() for v in losses]).mean()

    def mark_end(self) -> None:
        """The step the caller just ran ends now (after its own work: the trial's SGD)."""
        index, t0, _ = self.step_times[-1]
        self.step_times[-1] = (index, t0, time.monotonic())

    def tune(self) -> None:
        """Every ``interval`` steps: every rank gathers every rank's new events and step times, all
        take the same decision (``current`` may change). Idempotent within a step."""
        if (
            self.tuner is None
            or not self.steps
            or self.steps % self.tuner.config.interval
            or self._tuned_at == self.steps
        ):
            return
        self._tuned_at = self.steps
        window = range(self._seen_steps, len(self.step_times))
        durations = [
            self.step_times[i][2] - self.step_times[i][1] for i in window if i not in self._first_steps
        ]
        after = max((self.step_times[i][2] for i in window if i in self._first_steps), default=0.0)
        events = [e for e in self.log.events[self._seen_events :] if e[2] >= after]
        mine = {"replica": self.replica, "stage": self.stage, "events": events, "durations": durations}
        self._seen_events, self._seen_steps = len(self.log.events), len(self.step_times)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        slowest = [max(g["durations"][i] for g in gathered) for i in range(len(durations))]
        self.tuner.observe(profile_records(dict(enumerate(gathered))), slowest)
        self.tuner.decide(self.steps)
        self.current = self.tuner.current


def user_pipeline(
    module: nn.Module,
    model: ModelSpec,
    cluster: ClusterSpec,
    candidates: tuple[Plan, ...],
    start: int,
    tuner_interval: int | None,
) -> tuple[PipelineEngine, list[OrderedDict[str, nn.Module]], list[list[int]]]:
    """The user's module cut into stages: this rank's engine, every stage's children, ranks[d][s]."""
    first = candidates[0]
    cuts = stage_cuts(module, model, first)
    ranks = stage_ranks(cluster, first)
    P, D = len(first.stages), first.stages[0].replicate
    rank = dist.get_rank()
    where = [(d, s) for d, row in enumerate(ranks) for s, r in enumerate(row) if r == rank]
    if len(where) != 1:
        raise PlanMismatch(f"rank {rank}: runs {len(where)} stages of the plan, apply_plan needs one")
    replica, stage = where[0]
    # Every rank creates every group in the same order (new_group's rule).
    pp = [dist.new_group(row) for row in ranks]
    dp = [dist.new_group([ranks[d][s] for d in range(D)]) for s in range(P)]
    children = list(module.named_children())
    stage_children = [OrderedDict(children[cuts[s] : cuts[s + 1]]) for s in range(P)]
    st = first.stages[stage]
    w_in = input_width(model) if stage == 0 else output_width(model, st.first_layer)
    engine = PipelineEngine(
        nn.Sequential(stage_children[stage]),
        stage,
        replica,
        candidates,
        pp[replica],
        dp[stage],
        (w_in, output_width(model, st.last_layer)),
        start=start,
        tuner=TunerConfig(interval=tuner_interval) if tuner_interval else None,
    )
    return engine, stage_children, ranks


def gather_module(stage_children: list[OrderedDict[str, nn.Module]], ranks: list[list[int]]) -> None:
    """Broadcast every stage's parameters and buffers from its replica-0 rank to every rank."""
    with torch.no_grad():
        for s, kids in enumerate(stage_children):
            tensors = [t for m in kids.values() for t in (*m.parameters(), *m.buffers())]
            if not tensors:
                continue
            flat = torch.cat([t.detach().flatten().to(tensors[0].dtype) for t in tensors])
            dist.broadcast(flat, src=ranks[0][s])
            i = 0
            for t in tensors:
                t.copy_(flat[i : i + t.numel()].view_as(t))
                i += t.numel()


def gather_optimizer(
    optimizer: torch.optim.Optimizer,
    stage_children: list[OrderedDict[str, nn.Module]],
    ranks: list[list[int]],
) -> dict[str, Any]:
    """The optimizer's state dict with every parameter's state from the rank that trains it."""
    sd = optimizer.state_dict()
    index: dict[int, int] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            index[id(p)] = len(index)
    state: dict[int, Any] = {}
    for s, kids in enumerate(stage_children):
        owned = [index[id(p)] for m in kids.values() for p in m.parameters() if id(p) in index]
        box: list[Any] = [{k: sd["state"][k] for k in owned if k in sd["state"]}]
        dist.broadcast_object_list(box, src=ranks[0][s])
        state.update(box[0])
    return {"state": dict(sorted(state.items())), "param_groups": sd["param_groups"]}


class PipelinedModule(nn.Module):
    """The user's module under a pipeline plan: ``step()`` trains, ``state_dict()`` is the user's model's."""

    def __init__(
        self,
        module: nn.Module,
        plan: Any,
        engine: PipelineEngine,
        stage_children: list[OrderedDict[str, nn.Module]],
        ranks: list[list[int]],
    ) -> None:
        super().__init__()
        self.module = module
        self.plan = plan
        self.engine = engine
        self.global_batch = engine.global_batch
        self._stage_children = stage_children
        self._ranks = ranks

    def rows(self, global_batch: int) -> slice:
        """This rank's rows of the step's global batch (its pipeline replica's share)."""
        return self.engine.rows(global_batch)

    def step(self, inputs: torch.Tensor, target: torch.Tensor, loss_fn: LossFn) -> torch.Tensor | None:
        """See :meth:`PipelineEngine.step`."""
        return self.engine.step(inputs, target, loss_fn)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a pipelined module trains with step(inputs, target, loss_fn), not forward()")

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """Collective (every rank calls it): the whole user model's state dict, unprefixed."""
        gather_module(self._stage_children, self._ranks)
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def optim_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Collective: ``optimizer.state_dict()`` as one process training the whole model would hold it."""
        return gather_optimizer(optimizer, self._stage_children, self._ranks)

    def close(self) -> None:
        """Nothing to stop (the schedule runs in the caller's thread); for symmetry with PlannedModule."""

    @property
    def tuner_log(self) -> list[dict[str, Any]]:
        return self.engine.tuner.log if self.engine.tuner is not None else []
