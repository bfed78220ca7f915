"""Trace one forward pass on the meta device into segments: runs of ATen ops inside one module call.

How it works: the model runs eagerly on meta tensors (no memory, no data) under two dispatch modes,
torch's own ``FlopCounterMode`` and this module's ``_Recorder`` above it. Forward pre/post hooks on
every module keep a stack of active module calls. Every ATen op is attributed to the innermost
active call; a maximal run of consecutive ops in the same call is a *segment*. For each op the
recorder notes

- FLOPs: the growth of ``FlopCounterMode.get_total_flops()`` across the op (torch's convention:
  a multiply-add is 2 FLOPs, so a matmul is 2*M*N*K; bias adds and element-wise ops count 0);
- data flow: which earlier segment produced each tensor argument (a tensor's producer is the
  segment of the last op that returned it, so in-place ops hand a tensor on);
- parameters: the segment that first uses a parameter owns it; tied parameters are one tensor,
  so they are owned once; an embedding lookup counts the indices it reads;
- roofline inputs (issue 15): the bytes of every non-parameter tensor an op reads and of what it
  writes (an embedding lookup also reads the rows it returns), and one kernel per op that is
  not a view.

Why not ``torch.fx.symbolic_trace`` or ``torch.export``: symbolic tracing fails on models with
data-dependent Python control flow (the transformers models), and export specialises and lowers
the graph with no direct per-module FLOP attribution. Eager dispatch-level tracing on meta tensors
sees the same ATen ops that export would record, works for any model that runs eagerly, and keeps
the module that issued every op.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

EMBEDDING_OPS = frozenset({"aten.embedding.default", "aten._embedding_bag.default"})


@dataclass
class Segment:
    """Consecutive ops executed inside one call of one module (the innermost one)."""

    index: int  # position in execution order
    module_name: str  # qualified name of the module ('' for the root)
    module: nn.Module  # the module whose call issued the ops
    flops: float = 0.0  # forward FLOPs for the whole traced batch
    op_flops: dict[str, float] = field(default_factory=dict)  # FLOPs by ATen op name
    ops: dict[str, int] = field(default_factory=dict)  # how often each ATen op ran here
    params: list[str] = field(default_factory=list)  # parameters first used here, in use order
    inputs: list[int] = field(default_factory=list)  # producer segments of the tensors read here
    exported: dict[int, torch.Tensor] = field(default_factory=dict)  # outputs read elsewhere
    bytes: float = 0.0  # activation bytes the ops read + write (parameters and buffers excluded)
    kernels: int = 0  # ops that launch a kernel (views excluded)


@dataclass
class Trace:
    """The result of one traced forward pass."""

    segments: list[Segment]
    params: dict[str, nn.Parameter]  # every parameter of the model by (first) qualified name
    param_ops: dict[str, set[str]]  # ATen ops that read each parameter directly
    lookups: dict[str, int]  # embedding indices read per parameter (whole traced batch)


class _Recorder(TorchDispatchMode):
    """Attributes each ATen op to the innermost active module call (see the module docstring)."""

    def __init__(self, counter: FlopCounterMode, model: nn.Module) -> None:
        super().__init__()
        self.counter = counter
        self.names = {id(m): n for n, m in model.named_modules()}
        self.param_name = {id(p): n for n, p in model.named_parameters()}
        self.buffer_ids = {id(b) for b in model.buffers()}
        self.stack: list[tuple[int, nn.Module]] = []  # (call id, module) of active calls
        self.call_ids = itertools.count()
        self.segments: list[Segment] = []
        self.current_call = -1
        self.producer: dict[int, tuple[int, torch.Tensor]] = {}  # tensor id -> (segment, tensor)
        self.param_ops: dict[str, set[str]] = {}
        self.param_owner: dict[str, int] = {}
        self.lookups: dict[str, int] = {}

    def enter(self, module: nn.Module) -> None:
        self.stack.append((next(self.call_ids), module))

    def leave(self, module: nn.Module) -> None:
        while self.stack:  # pop through calls that raised without running their post-hook
            _, top = self.stack.pop()
            if top is module:
                break

    def _segment(self) -> Segment:
        call, module = self.stack[-1]
        if call != self.current_call or not self.segments:
            self.current_call = call
            name = self.names.get(id(module), type(module).__name__)
            self.segments.append(Segment(len(self.segments), name, module))
        return self.segments[-1]

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        seg = self._segment()
        op = str(func)
        seg.ops[op] = seg.ops.get(op, 0) + 1
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                self._read(seg, op, t)
        if op in EMBEDDING_OPS and len(args) > 1:
            name = self.param_name.get(id(args[0]))
            if name is not None and isinstance(args[1], torch.Tensor):
                self.lookups[name] = self.lookups.get(name, 0) + args[1].numel()
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)
        flops = float(self.counter.get_total_flops() - before)
        if not _is_view(func):
            seg.kernels += 1
            moved = sum(self._activation_bytes(t) for t in tree_leaves((args, kwargs)))
            written = sum(_nbytes(t) for t in tree_leaves(out))
            # An embedding lookup reads the rows it returns (its table is a parameter, excluded).
            seg.bytes += moved + written * (2 if op in EMBEDDING_OPS else 1)
        if flops:
            seg.flops += flops
            seg.op_flops[op] = seg.op_flops.get(op, 0.0) + flops
        for t in tree_leaves(out):
            ids = id(t)
            if isinstance(t, torch.Tensor) and ids not in self.buffer_ids and ids not in self.param_name:
                self.producer[ids] = (seg.index, t)
        return out

    def _activation_bytes(self, t: object) -> int:
        """Bytes of an op argument that is an activation (not a parameter or buffer)."""
        if not isinstance(t, torch.Tensor):
            return 0
        base = t._base if t._base is not None else t  # w.t() is a view of a parameter
        if id(base) in self.param_name or id(base) in self.buffer_ids:
            return 0
        return _nbytes(t)

    def _read(self, seg: Segment, op: str, t: torch.Tensor) -> None:
        name = self.param_name.get(id(t))
        if name is not None:
            self.param_ops.setdefault(name, set()).add(op)
            if name not in self.param_owner:
                self.param_owner[name] = seg.index
                seg.params.append(name)
            return
        src = self.producer.get(id(t))
        if src is None or src[0] == seg.index:
            return
        if src[0] not in seg.inputs:
            seg.inputs.append(src[0])
        self.segments[src[0]].exported[_base_id(src[1])] = src[1]

    def mark_outputs(self, output: Any) -> None:
        """Model outputs count as exported by the segment that produced them."""
        for t in _tensors(output):
            src = self.producer.get(id(t))
            if src is not None:
                self.segments[src[0]].exported[_base_id(src[1])] = src[1]


def _nbytes(t: object) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _is_view(func: Any) -> bool:
    """Views, aliases and metadata ops launch no kernel and move no bytes."""
    return bool(getattr(func, "is_view", False)) or str(func).split(".")[1] in _NO_KERNEL


_NO_KERNEL = frozenset(
    {"detach", "alias", "view", "_unsafe_view", "t", "expand", "size", "stride", "sym_size"}
)


def _base_id(t: torch.Tensor) -> int:
    return id(t._base) if t._base is not None else id(t)


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Tensors inside nested tuples, lists, dicts and dict-like outputs (transformers' ModelOutput)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)


def trace(model: nn.Module, call: Callable[[nn.Module], Any]) -> Trace:
    """Run ``call(model)`` once under the recorder and return its segments.

    ``model`` must already live on the meta device. Hooks are removed afterwards; the model's
    train/eval mode is left as the caller set it.
    """
    with FlopCounterMode(display=False) as counter:
        recorder = _Recorder(counter, model)
        handles = []
        for m in model.modules():
            handles.append(m.register_forward_pre_hook(lambda mod, _a: recorder.enter(mod)))
            handles.append(m.register_forward_hook(lambda mod, _a, _o: recorder.leave(mod), always_call=True))
        try:
            recorder.enter(model)  # ops issued outside any module call belong to the root
            with torch.no_grad(), recorder:
                output = call(model)
            recorder.mark_outputs(output)
        finally:
            for h in handles:
                h.remove()
    return Trace(
        segments=recorder.segments,
        params=dict(model.named_parameters()),
        param_ops=recorder.param_ops,
        lookups=recorder.lookups,
    )
