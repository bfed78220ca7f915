"""The one place strategist touches torch.distributed.pipelining's private schedule runtime (torch 2.13).

strategist plans its own kFkB action lists (``simulator.pipeline.schedule``); torch 2.13 executes
per-rank action lists given in its "compute_comms" format through the private class
``_PipelineScheduleRuntime`` (``_prepare_schedule_with_comms``, ``_Action``, ``REDUCE_GRAD``,
``register_custom_function``). Private APIs move between releases, so everything that names them
lives here, ``check_api()`` refuses any other torch minor version and any missing name, and
``tests/runtime/pipeline/test_adapter_api.py`` fails loudly when they move.

Facts about 2.13 this module relies on (checked by the tests):
- actions are parsed from strings such as ``0F3``, ``1SEND_B2`` (``_Action.from_str``);
- with ``format="compute_comms"`` the lists are executed as given: RECV_* posts ``irecv``s, SEND_*
  posts ``isend``s, F/B wait for their receive, sends are waited for at the end of ``step``;
- ``REDUCE_GRAD`` at the end of a list runs a registered custom function once per step (here:
  gradient scaling and the data-parallel all-reduce of the stage's replicas);
- a stage given ``input_args`` / ``output_args`` examples runs in the static metadata mode; those
  examples must require grad (input: on every stage but the first) or no gradient is exchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as _schedules

from simulator.pipeline.schedule import Schedule

TORCH_MINOR = "2.13"
_REQUIRED = ("_PipelineScheduleRuntime", "_Action", "_ComputationType", "REDUCE_GRAD", "_wait_batch_p2p")


class PipeliningApiMoved(RuntimeError):
    """The installed torch does not offer the private pipelining API this adapter was written for."""


def check_api() -> None:
    """Raise PipeliningApiMoved unless torch is 2.13.x and every private name used here exists."""
    if not torch.__version__.startswith(TORCH_MINOR + "."):
        raise PipeliningApiMoved(
            f"runtime/pipeline/adapter.py is pinned to torch {TORCH_MINOR}.x, found {torch.__version__}; "
            "re-check _PipelineScheduleRuntime's compute_comms format before moving the pin"
        )
    missing = [n for n in _REQUIRED if not hasattr(_schedules, n)]
    runtime = getattr(_schedules, "_PipelineScheduleRuntime", None)
    for method in ("_prepare_schedule_with_comms", "register_custom_function", "step"):
        if runtime is not None and not hasattr(runtime, method):
            missing.append(f"_PipelineScheduleRuntime.{method}")
    if missing:
        raise PipeliningApiMoved(f"torch.distributed.pipelining lacks {', '.join(missing)}")


@dataclass
class EventLog:
    """What one stage process did, on the host's monotonic clock: (kind, micro-batch, start, end).

    kinds: 'F', 'B' (compute only; a wait for the input ended at ``start``), 'SEND_F'/'SEND_B'/
    'RECV_F'/'RECV_B' (when the operation was built, just before it is posted; start == end up to
    the call's own cost), 'WAIT_F'/'WAIT_B' (the runtime's wait for the receive that F / B of that
    micro-batch consumes, logged just before the compute: ``end - start`` is how long the stage
    blocked on that input, ~0 when it had already arrived), 'REDUCE' (gradient scaling +
    data-parallel sync).
    """

    events: list[tuple[str, int, float, float]] = field(default_factory=list)

    def add(self, kind: str, mb: int, start: float, end: float) -> None:
        self.events.append((kind, mb, start, end))


def make_stage(
    module: torch.nn.Module,
    stage: int,
    num_stages: int,
    example_input: torch.Tensor,
    example_output: torch.Tensor,
    group: dist.ProcessGroup,
    log: EventLog,
) -> PipelineStage:
    """A PipelineStage for one micro-batch shape whose compute and sends are timed into ``log``."""
    inp = example_input.detach().clone().requires_grad_(stage > 0)
    out = example_output.detach().clone().requires_grad_(True)
    st = PipelineStage(
        module, stage, num_stages, example_input.device, input_args=inp, output_args=out, group=group
    )
    _time_method(st, "forward_one_chunk", "F", log)
    _time_method(st, "backward_one_chunk", "B", log)
    _time_method(st, "get_fwd_send_ops", "SEND_F", log)
    _time_method(st, "get_bwd_send_ops", "SEND_B", log)
    _time_method(st, "get_fwd_recv_ops", "RECV_F", log)
    _time_method(st, "get_bwd_recv_ops", "RECV_B", log)
    return st


# The last receive wait of this process (start, end), consumed by the next F / B (one process runs
# one stage, single-threaded: the runtime waits for a compute's receive right before the compute).
_pending_wait: list[tuple[float, float]] = []


def _install_wait_probe() -> None:
    """Time torch's ``_wait_batch_p2p`` (the runtime's wait for posted p2p work; module-global in 2.13).

    The runtime calls it for a compute's receive immediately before ``forward_one_chunk`` /
    ``backward_one_chunk`` and for the outstanding sends at the end of ``step``; the timed F / B
    wrapper turns the pending span into a 'WAIT_F' / 'WAIT_B' event. Idempotent.
    """
    inner = _schedules._wait_batch_p2p
    if getattr(inner, "_strategist_timed", False):
        return

    def timed_wait(work: list[dist.Work]) -> None:
        t0 = time.monotonic()
        inner(work)
        _pending_wait[:] = [(t0, time.monotonic())]

    timed_wait._strategist_timed = True  # type: ignore[attr-defined]
    _schedules._wait_batch_p2p = timed_wait


def _time_method(obj: Any, name: str, kind: str, log: EventLog) -> None:
    inner = getattr(obj, name)

    def timed(mb: int, *args: Any, **kwargs: Any) -> Any:
        if kind in ("F", "B") and _pending_wait:
            w0, w1 = _pending_wait.pop()
            log.add("WAIT_" + kind, mb, w0, w1)
        t0 = time.monotonic()
        out = inner(mb, *args, **kwargs)
        log.add(kind, mb, t0, time.monotonic())
        return out

    setattr(obj, name, timed)


class ScheduleRunner:
    """Runs one pipeline replica's ``Schedule`` for the stage of this process, step after step.

    ``reduce_grad()`` runs once per step after the stage's last backward (the REDUCE_GRAD action);
    gradient scaling is left to it (``scale_grads=False``). Not thread-safe; one per process.
    """

    def __init__(
        self,
        stage: PipelineStage,
        schedule: Schedule,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        reduce_grad: Callable[[], None],
        log: EventLog,
    ) -> None:
        check_api()
        _install_wait_probe()
        self.stage_index = stage.stage_index
        self._runtime = _schedules._PipelineScheduleRuntime(
            [stage], schedule.num_micro_batches, loss_fn=loss_fn, scale_grads=False
        )
        reduce_type = _schedules.REDUCE_GRAD

        def reduce(action: Any, ctx: Any) -> None:
            t0 = time.monotonic()
            reduce_grad()
            log.add("REDUCE", -1, t0, time.monotonic())

        self._runtime.register_custom_function(reduce_type, reduce)
        actions = {
            r: [_schedules._Action.from_str(a) for a in row] + [_schedules._Action(r, reduce_type, None)]
            for r, row in enumerate(schedule.to_rows())
        }
        self._runtime._prepare_schedule_with_comms(actions, format="compute_comms")

    def step(self, inputs: torch.Tensor | None, target: torch.Tensor | None, losses: list[Any]) -> None:
        """One training step: the first stage passes the replica's batch, the last its target."""
        args = (inputs,) if inputs is not None else ()
        _pending_wait.clear()  # the previous step's send waits belong to no compute
        self._runtime.step(*args, target=target, losses=losses, return_outputs=False)
