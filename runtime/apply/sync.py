"""GradientSync: a SyncPlan's synchronisation attached to a process's parameters (users and trials alike).

This is the one place where a plan meets tensors. ``apply_plan`` (the user's module) and the
executor's trial workers (``runtime/executor/worker.py``: layer replicas in real compute, or replay)
both build a :class:`GradientSync`: it wraps the shards in the test-only mutation switch
(``runtime/executor/mutation.py``), owns the :class:`~runtime.executor.engine.SyncEngine` (three
ordered channels: collectives, PS pushes, PS pulls) and registers one post-accumulate-grad hook per
parameter, so a unit is launched as soon as its variables' gradients are final and communication
overlaps the rest of backward, as DDP's buckets do.

Contract: ``begin()`` before each forward/backward pass (``PlannedModule.forward`` calls it);
``finish()`` once backward is over: the executor calls it itself (it times the wait), a user's
module queues it on autograd's engine (``auto_finish=True``), so ``loss.backward()`` returns with
every gradient synchronised, again as DDP does. Not thread-safe beyond that: one backward at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from runtime.executor.engine import SyncEngine
from runtime.executor.groups import CommGroups
from runtime.executor.mutation import maybe_mutate
from runtime.executor.plan import SyncPlan
from runtime.executor.shards import ShardTensors


class GradientSync:
    """The synchronisation of one process: shards, engine, hooks."""

    def __init__(
        self,
        plan: SyncPlan,
        tensors: ShardTensors,
        groups: CommGroups,
        *,
        lr: float,
        seed: int,
    ) -> None:
        self.plan = plan
        self.num_vars = len({s.var_index for s in plan.shards})
        # Tests only: STRATEGIST_TEST_MUTATION breaks what this process contributes (no-op by default).
        self.tensors = maybe_mutate(tensors, groups.rank, groups.layout.num_workers)
        self.engine = SyncEngine(plan, self.tensors, groups, lr, seed)
        self.device = groups.device
        self._queued = False
        self._auto_finish = False

    def hook(self, params: Sequence[torch.Tensor], *, auto_finish: bool) -> None:
        """Mark variable ``i`` ready when autograd has accumulated ``params[i]``'s gradient."""
        if len(params) != self.num_vars:
            raise ValueError(f"params: {len(params)} tensors for a plan of {self.num_vars} variables")
        self._auto_finish = auto_finish
        for vi, p in enumerate(params):
            p.register_post_accumulate_grad_hook(self._ready_hook(vi))

    def begin(self) -> None:
        """Start an iteration: forget last pass's readiness and per-iteration caches."""
        self.tensors.new_iteration()
        self.engine.begin_iteration()
        self._queued = False

    def variable_ready(self, vi: int) -> None:
        self.engine.variable_ready(vi)

    def finish(self) -> None:
        """Launch what is left, wait for every channel, apply the updates (main thread)."""
        self.engine.finish(self.num_vars)

    def close(self) -> None:
        self.engine.close()

    def _ready_hook(self, vi: int) -> Callable[[torch.Tensor], None]:
        dev = self.device

        def hook(_: torch.Tensor) -> None:
            if dev.type == "cuda":
                torch.cuda.current_stream(dev).synchronize()
            if self._auto_finish and not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            self.engine.variable_ready(vi)

        return hook

    def _finish_backward(self) -> None:
        self.finish()
        self.begin()  # a second backward without a new forward (gradient accumulation) starts afresh
