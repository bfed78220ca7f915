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
    """One rank's stage of a pipeline plan: stage module, PipelineStage and schedule per candidate, tuner.

    ``candidates`` share their stages and global batch (a ``PipelineTrial`` document);
    ``tuner_interval`` None runs ``candidates[start]`` fixed.
    """

    def __init__(
        self,
        module: nn.Module,
        model: ModelSpec,
        cluster: ClusterSpec,
        candidates: tuple[Plan, ...],
        start: int,
        tuner_interval: int | None,
    ) -> None:
        first = candidates[0]
        self.candidates = candidates
        self.cuts = stage_cuts(module, model, first)
        self.ranks = stage_ranks(cluster, first)
        self.P, self.D = len(first.stages), first.stages[0].replicate
        self.global_batch = first.global_batch
        self.module = module
        self.model = model
        self.rank = dist.get_rank()
        where = [(d, s) for d, row in enumerate(self.ranks) for s, r in enumerate(row) if r == self.rank]
        if len(where) != 1:
            raise PlanMismatch(
                f"rank {self.rank}: runs {len(where)} stages of the plan, apply_plan needs one"
            )
        self.replica, self.stage = where[0]
        # Every rank creates every group in the same order (new_group's rule).
        pp = [dist.new_group(row) for row in self.ranks]
        dp = [dist.new_group([self.ranks[d][s] for d in range(self.D)]) for s in range(self.P)]
        self.pp_group, self.dp_group = pp[self.replica], dp[self.stage]
        children = list(module.named_children())
        self.stage_children = [OrderedDict(children[self.cuts[s] : self.cuts[s + 1]]) for s in range(self.P)]
        self.stage_module = nn.Sequential(self.stage_children[self.stage])
        self.params = [p for p in self.stage_module.parameters() if p.requires_grad]
        self.log = EventLog()
        self._runners: dict[int, tuple[ScheduleRunner, int, int]] = {}
        self._grad_scale = 1.0
        self.current = start
        self.tuner = (
            AutoTuner(list(candidates), start, TunerConfig(interval=tuner_interval))
            if tuner_interval
            else None
        )
        self.steps = 0
        self._step_times: list[float] = []
        self._seen_events = 0
        self._first_steps: set[int] = set()
        self._ran: set[int] = set()

    # -- one step ---------------------------------------------------------------------------------

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
        for g in grads:
            g.mul_(self._grad_scale)
        if self.D > 1 and grads:
            flat = torch.cat([g.flatten() for g in grads])
            dist.all_reduce(flat, group=self.dp_group)
            i = 0
            for g in grads:
                g.copy_(flat[i : i + g.numel()].view_as(g))
                i += g.numel()

    def _runner(
        self, index: int, loss_fn: LossFn, dtype: torch.dtype, device: torch.device
    ) -> ScheduleRunner:
        if index not in self._runners:
            plan = self.candidates[index]
            b, s, P = plan.micro_batch_size, self.stage, self.P
            n = plan.replica_micro_batches(self.replica)
            first_layer, last_layer = plan.stages[s].first_layer, plan.stages[s].last_layer
            w_in = input_width(self.model) if s == 0 else output_width(self.model, first_layer)
            ex_in = torch.zeros(b, w_in, dtype=dtype, device=device)
            ex_out = torch.zeros(b, output_width(self.model, last_layer), dtype=dtype, device=device)
            stage = make_stage(self.stage_module, s, P, ex_in, ex_out, self.pp_group, self.log)
            self._runners[index] = (
                ScheduleRunner(stage, kfkb(P, n, plan.group_size(n)), loss_fn, self._reduce_grad, self.log),
                n,
                b,
            )
        return self._runners[index][0]

    def step(self, inputs: torch.Tensor, target: torch.Tensor, loss_fn: LossFn) -> torch.Tensor | None:
        """Forward and backward of this rank's rows through the pipeline; gradients synchronised.

        ``inputs`` / ``target``: this replica's rows (``rows()``); only the first stage reads the
        inputs and only the last the target, but every rank passes them. ``loss_fn`` must be a mean
        over its rows. Returns the replica's mean micro-batch loss on the last stage, else None.
        """
        if self.tuner is not None and self.steps and self.steps % self.tuner.config.interval == 0:
            self._tune()
        index = self.current
        runner = self._runner(index, loss_fn, inputs.dtype, inputs.device)
        plan = self.candidates[index]
        self._grad_scale = plan.micro_batch_size / plan.global_batch
        if index not in self._ran:
            self._ran.add(index)
            self._first_steps.add(self.steps)
        losses: list[Any] = []
        t0 = time.monotonic()
        runner.step(inputs if self.stage == 0 else None, target if self.stage == self.P - 1 else None, losses)
        self._step_times.append(time.monotonic() - t0)
        self.steps += 1
        if self.stage != self.P - 1 or not losses:
            return None
        return torch.stack([torch.as_tensor(v).detach() for v in losses]).mean()

    def _tune(self) -> None:
        """Every rank gathers every rank's new events and step times; all take the same decision."""
        assert self.tuner is not None
        window = range(self.steps - self.tuner.config.interval, self.steps)
        durations = [self._step_times[i] for i in window if i not in self._first_steps]
        events = self.log.events[self._seen_events :]
        self._seen_events = len(self.log.events)
        mine = {"replica": self.replica, "stage": self.stage, "events": events, "durations": durations}
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        slowest = [max(g["durations"][i] for g in gathered) for i in range(len(durations))]
        self.tuner.observe(profile_records(dict(enumerate(gathered))), slowest)
        self.tuner.decide(self.steps)
        self.current = self.tuner.current

    # -- checkpoints ------------------------------------------------------------------------------

    def gather_module(self) -> None:
        """Broadcast every stage's parameters and buffers from its replica-0 rank to every rank."""
        with torch.no_grad():
            for s in range(self.P):
                tensors = [
                    t for m in self.stage_children[s].values() for t in (*m.parameters(), *m.buffers())
                ]
                if not tensors:
                    continue
                flat = torch.cat([t.detach().flatten().to(tensors[0].dtype) for t in tensors])
                dist.broadcast(flat, src=self.ranks[0][s])
                i = 0
                for t in tensors:
                    t.copy_(flat[i : i + t.numel()].view_as(t))
                    i += t.numel()

    def gather_optimizer(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state dict with every parameter's state from the rank that trains it."""
        sd = optimizer.state_dict()
        index: dict[int, int] = {}
        i = 0
        for group in optimizer.param_groups:
            for p in group["params"]:
                index[id(p)] = i
                i += 1
        state: dict[int, Any] = {}
        for s in range(self.P):
            owned = [
                index[id(p)]
                for m in self.stage_children[s].values()
                for p in m.parameters()
                if id(p) in index
            ]
            box: list[Any] = [{k: sd["state"][k] for k in owned if k in sd["state"]}]
            dist.broadcast_object_list(box, src=self.ranks[0][s])
            state.update(box[0])
        return {"state": dict(sorted(state.items())), "param_groups": sd["param_groups"]}


class PipelinedModule(nn.Module):
    """The user's module under a pipeline plan: ``step()`` trains, ``state_dict()`` is the user's model's."""

    def __init__(self, module: nn.Module, plan: Any, engine: PipelineEngine) -> None:
        super().__init__()
        self.module = module
        self.plan = plan
        self.engine = engine
        self.global_batch = engine.global_batch

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
        self.engine.gather_module()
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def optim_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Collective: ``optimizer.state_dict()`` as one process training the whole model would hold it."""
        return self.engine.gather_optimizer(optimizer)

    @property
    def tuner_log(self) -> list[dict[str, Any]]:
        return self.engine.tuner.log if self.engine.tuner is not None else []
