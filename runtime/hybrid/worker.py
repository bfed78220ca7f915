"""One emulated GPU of a hybrid run: ``python -m runtime.hybrid.worker --job DIR --rank R ...``.

Per step: a barrier; forward through the TaskGraphs this device belongs to, in order, with the
bridge exchanges between them (every process takes part in the bridges it sends to or receives
from); the loss on the last TaskGraph's devices; backward in reverse order (each TaskGraph's
autograd graph starts at a detached input, so bridge gradients are explicit messages); each
TaskGraph's gradients all-reduced (sum) over its data-parallel group and an SGD update.

Gradient sync (``HybridConfig.overlap_sync``, default True): the buckets of
``simulator.hybrid.buckets.grad_buckets`` (DDP's rule; the cost model reads the same buckets),
each all-reduced with ``async_op=True`` as soon as its gradients exist, in backward order, and
all waited for after the backward (before the update). Decisions:
- Async gloo work, not a comm thread of our own: ``ProcessGroupGloo`` queues async collectives to
  its own worker threads (2 by default) and runs them without the GIL, so the ring proceeds while
  this thread sleeps a replayed backward or runs autograd; ``Work.wait`` joins them. DDP on gloo
  does the same.
- Launch order: a bucket is launched only after every earlier bucket (backward order) was, as
  DDP does; collectives of a group must be issued in the same order on every member (gloo
  matches them by sequence), and a bucket that becomes ready early (a parameter whose gradient
  arrives first) would otherwise break that order.
- Replay: TaskGraph t's backward sleep is cut at the buckets' boundaries: sleep the layers of
  bucket k (``hi_k`` down to ``lo_k``), launch bucket k, ..., then the layers below the last
  bucket. Real mode: ``register_post_accumulate_grad_hook`` on every parameter marks it ready;
  a complete bucket is flattened (``torch.cat``) and launched from the hook, inside autograd.
  Buckets still missing a gradient after backward (unused parameters) are launched with zeros
  after it, in order.
- The reduced values are the same sums as the fused all-reduce's: every element is the sum of
  the same per-rank values (with two ranks bit-identical; with more, gloo's ring may add them in
  another order per chunk: equal to rounding). ``tests/runtime/hybrid`` checks both.
``overlap_sync=False``: one fused all-reduce per TaskGraph after the whole backward.
Replay mode sleeps each TaskGraph's forward/backward time on this device's own GPU type (times
x dilation) and communicates scaled buffers of the same messages. Memory is charged to the
device's ledger (``memory.DeviceMemory``); running out writes an ``oom`` record and exits 3.

Output: ``rank<R>.json`` with per-step timestamps (start, end of backward, end of step), busy
(compute) seconds, when each DP bucket's all-reduce was launched (``bucket_launch_s``: seconds
relative to the end of the backward, negative = during it) and peak memory; real mode with ``record_grads`` also ``rank<R>.pt``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runtime.hybrid.collectives import exchange
from runtime.hybrid.config import HybridConfig, replay_cost_params
from runtime.hybrid.layout import Layout
from runtime.hybrid.memory import DeviceMemory, DeviceOutOfMemory
from runtime.hybrid.net import TOKENS, Batch, TaskGraphNet, sample_loss, synthetic_batch, widths
from simulator.hybrid.buckets import Bucket, grad_buckets
from simulator.hybrid.cost import DeviceTimes, device_layer_times
from simulator.hybrid.sharding import shard_ops
from simulator.memory import usable_bytes
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec

OOM_EXIT = 3


class Worker:
    def __init__(self, job: dict[str, Any], rank: int) -> None:
        self.cfg = HybridConfig.from_dict(job["config"])
        self.model = ModelSpec.model_validate(job["model"])
        self.cluster = ClusterSpec.model_validate(job["cluster"])
        self.plan = HybridPlan.model_validate(job["plan"])
        self.L = Layout(self.model, self.cluster, self.plan, self.cfg.attention_heads)
        self.rank = rank
        self.n = len(self.plan.task_graphs)
        self.mine = [t for t in range(self.n) if self.L.place(t, rank) is not None]
        self.real = self.cfg.compute == "real"
        self.dtype = torch.float64 if self.cfg.dtype == "float64" else torch.float32
        self.device = torch.device("cpu")
        if self.cfg.backend == "nccl":
            self.device = torch.device("cuda", int(self.L.devices[rank].rpartition(":")[2]))
            torch.cuda.set_device(self.device)
        gpu = self.cluster.device_type(self.L.node_of(rank))
        self.gpu = gpu
        self.mem = DeviceMemory(self.L.devices[rank], gpu.name, usable_bytes(gpu, self.cfg.memory_fraction))
        self.busy = 0.0
        self.launch_offsets: list[list[float]] = []  # per step (``step``)

    # ------------------------------------------------------------------ set-up
    def setup(self, groups: dict[str, Any]) -> None:
        self.groups = groups
        items = self.L.memory_items(self.rank, self.cfg.optimizer_state_factor, self.cfg.activation_factor)
        self.act_items = {
            t: (w, b)
            for t, (w, b) in zip(self.mine, [i for i in items if "activations" in i[0]], strict=True)
        }
        if self.cfg.check_memory:
            for what, nbytes in items:
                if "activations" not in what:
                    self.mem.allocate(what, nbytes)
        self.nets: dict[int, TaskGraphNet] = {}
        self.replay: dict[int, DeviceTimes] = {}
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}
        self.buckets: dict[int, tuple[Bucket, ...]] = {}
        self.grad_frac: dict[int, float] = {}
        self._works: list[tuple[int, Any, torch.Tensor | None, list[str]]] = []
        self._bucket_names: dict[int, list[list[str]]] = {}  # real mode: variables per bucket
        self._pending: dict[int, list[set[str]]] = {}  # real mode: gradients a bucket still waits for
        self._next: dict[int, int] = {}  # real mode: the next bucket to launch
        params = replay_cost_params(self.cfg, self.model.name)
        for t in self.mine:
            r, j = self.L.place(t, self.rank)  # type: ignore[misc]
            tg = self.plan.task_graphs[t]
            group = groups.get(f"split:{t}:{r}") if tg.primitive == "split" and tg.degree > 1 else None
            frac = self.L.split_fraction(t, j) if tg.primitive == "split" else None
            # gradient bytes this device all-reduces: its shard's share of a split TaskGraph's
            self.grad_frac[t] = frac if frac is not None else 1.0
            self.buckets[t] = grad_buckets(self.model, tg.first_layer, tg.last_layer, self.cfg.bucket_bytes)
            if self.real:
                self.nets[t] = TaskGraphNet(self.L, t, j, group, self.cfg.seed, self.dtype)
                if self.cfg.overlap_sync and self.L.dp_group_key(t, self.rank) is not None:
                    self._arm_hooks(t)
            else:
                lo, hi = self.L.rows(t, self.rank)
                # the cost model's per-layer times (one compute model, same params and profiles)
                self.replay[t] = device_layer_times(
                    self.model, self.gpu, tg.first_layer, tg.last_layer, hi - lo, frac, params
                )
                # gradient buffers, allocated before the first step (``_buffer``)
                if self.cfg.overlap_sync:
                    for k, b in enumerate(self.buckets[t]):
                        self._buffer(("grads", t, k), self._numel(b.grad_bytes * self.grad_frac[t]))
                else:
                    total = sum(b.grad_bytes for b in self.buckets[t])
                    self._buffer(("grads", t), self._numel(total * self.grad_frac[t]))

    def _numel(self, nbytes: float) -> int:
        """FP32 elements of a replayed message of ``nbytes`` real-cluster bytes (scaled)."""
        return max(1, int(nbytes / 4 / self.cfg.scale))

    # ------------------------------------------------------------------ bucketed DP sync
    def _arm_hooks(self, t: int) -> None:
        """Real mode: a post-accumulate hook per parameter launches complete buckets in order."""
        net = self.nets[t]
        names = [
            [
                v.name
                for li in range(b.lo, b.hi)
                for v in self.model.layers[li].variables
                if v.name in net.params
            ]
            for b in self.buckets[t]
        ]
        self._bucket_names[t] = names
        for k, ns in enumerate(names):
            for n in ns:
                net.params[n].register_post_accumulate_grad_hook(
                    lambda _p, t=t, k=k, n=n: self._ready(t, k, n)
                )

    def _reset_buckets(self) -> None:
        self._works = []
        for t, names in self._bucket_names.items():
            self._pending[t] = [set(ns) for ns in names]
            self._next[t] = 0

    def _ready(self, t: int, k: int, name: str) -> None:
        self._pending[t][k].discard(name)
        self._launch_ready(t, force=False)

    def _launch_ready(self, t: int, force: bool) -> None:
        """Launch bucket ``_next[t]`` and the ones after it while complete (``force``: all)."""
        names, pending = self._bucket_names[t], self._pending[t]
        group = self.groups[self.L.dp_group_key(t, self.rank)]  # type: ignore[index]
        params = self.nets[t].params
        while self._next[t] < len(names) and (force or not pending[self._next[t]]):
            k = self._next[t]
            grads: list[torch.Tensor] = []
            for n in names[k]:
                g = params[n].grad
                grads.append(g if g is not None else torch.zeros_like(params[n]))
            flat = torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0, dtype=self.dtype)
            self._works.append((t, dist.all_reduce(flat, group=group, async_op=True), flat, names[k]))
            self.launches.append(time.monotonic())
            self._next[t] = k + 1

    def _replay_backward(self, t: int) -> None:
        """Sleep t's backward; with overlap, launch each bucket's all-reduce when its layers are done."""
        tg = self.plan.task_graphs[t]
        bwd = self.replay[t].bwd
        key = self.L.dp_group_key(t, self.rank)
        if not self.cfg.overlap_sync or key is None:
            self._sleep(sum(bwd))
            return
        hi = tg.last_layer
        for k, b in enumerate(self.buckets[t]):
            self._sleep(sum(bwd[b.lo - tg.first_layer : hi - tg.first_layer]))
            hi = b.lo
            buf = self._buffer(("grads", t, k), self._numel(b.grad_bytes * self.grad_frac[t]))
            self._works.append((t, dist.all_reduce(buf, group=self.groups[key], async_op=True), None, []))
            self.launches.append(time.monotonic())
        self._sleep(sum(bwd[: hi - tg.first_layer]))

    # ------------------------------------------------------------------ bridges
    def _bridge(self, b: int, held: torch.Tensor | None, backward: bool) -> torch.Tensor | None:
        """Exchange bridge b's rows; return the rows this device needs (None if it needs none)."""
        routes = self.L.routes(b, backward)
        if not any(self.rank in (r.src, r.dst) for r in routes):
            return None
        src_t, dst_t = (b + 1, b) if backward else (b, b + 1)
        if self.L.place(src_t, self.rank) is not None:
            src_lo = self.L.rows(src_t, self.rank)[0]
        need = self.L.rows(dst_t, self.rank) if self.L.place(dst_t, self.rank) is not None else None
        out = None
        if need is not None and self.real:
            width = widths(self.model)[self.plan.task_graphs[b].last_layer]
            out = torch.zeros(need[1] - need[0], TOKENS, width, dtype=self.dtype, device=self.device)
        sends, recvs, pieces = [], [], []
        for r in routes:
            if self.real:
                if r.src == self.rank:
                    assert held is not None
                    piece = held[r.lo - src_lo : r.hi - src_lo]
                    if r.dst == self.rank:
                        assert out is not None and need is not None
                        out[r.lo - need[0] : r.hi - need[0]] = piece
                    else:
                        sends.append((r.dst, piece))
                elif r.dst == self.rank:
                    assert out is not None and need is not None
                    buf = torch.empty_like(out[r.lo - need[0] : r.hi - need[0]])
                    recvs.append((r.src, buf))
                    pieces.append((r.lo - need[0], buf))
            elif r.src != r.dst:
                numel = self.L.bridge_numel(b, r.hi - r.lo, self.cfg.scale)
                if r.src == self.rank:
                    sends.append((r.dst, self._buffer(("bridge", b, backward, r.src, r.dst), numel)))
                elif r.dst == self.rank:
                    recvs.append((r.src, self._buffer(("bridge", b, backward, r.src, r.dst), numel)))
        exchange(sends, recvs, tag=2 * b + int(backward))
        if out is not None:
            for at, buf in pieces:
                out[at : at + buf.shape[0]] = buf
        return out

    # ------------------------------------------------------------------ replay helpers
    def _buffer(self, key: tuple[Any, ...], numel: int) -> torch.Tensor:
        """Replay's message buffer ``key``, allocated and touched on first use, then reused.

        A GPU's gradient and communication buffers persist across steps; allocating (and
        zeroing, page-faulting) tens of MB per step inside the timed step is this host's cost,
        not the cluster's (it made BERT-large's DP all-reduce 0.04-0.1 s slower per step).
        """
        buf = self._buffers.get(key)
        if buf is None or buf.numel() != numel:
            buf = self._buffers[key] = torch.zeros(numel, device=self.device)
        return buf

    def _sleep(self, seconds: float) -> None:
        start = time.monotonic()
        end = start + seconds * self.cfg.dilation
        while (left := end - time.monotonic()) > 0:
            time.sleep(left)
        self.busy += time.monotonic() - start

    def _replay_split_comm(self, t: int, backward: bool) -> None:
        tg = self.plan.task_graphs[t]
        if tg.primitive != "split" or tg.degree == 1:
            return
        r, _ = self.L.place(t, self.rank)  # type: ignore[misc]
        group = self.groups[f"split:{t}:{r}"]
        lo, hi = self.L.rows(t, self.rank)
        ops = shard_ops(self.model, tg.first_layer, tg.last_layer)
        for op in reversed(ops) if backward else ops:
            li = op.layer
            layer_bytes = self.model.layers[li].activation_bytes
            in_bytes = self.model.layers[li - 1].activation_bytes if li > 0 else layer_bytes
            nbytes = 0.0
            gather = False
            if not backward and op.kind in ("row", "emb", "attn"):
                nbytes = layer_bytes
            elif not backward and op.kind == "col" and op.gather_after:
                nbytes, gather = layer_bytes, True
            elif backward and op.kind in ("col", "attn"):
                nbytes = in_bytes
            if nbytes <= 0:
                continue
            numel = max(1, int((hi - lo) * nbytes / 4 / self.cfg.scale))
            key = ("split", t, li, backward)
            if gather:
                n = max(1, numel // tg.degree)
                part = self._buffer((*key, "part"), n)
                parts = [self._buffer((*key, k), n) for k in range(tg.degree)]
                dist.all_gather(parts, part, group=group)
            else:
                dist.all_reduce(self._buffer(key, numel), group=group)

    # ------------------------------------------------------------------ one step
    def step(self, step: int) -> list[float]:
        t0 = time.monotonic()
        self.busy = 0.0
        self._reset_buckets()
        self.launches: list[float] = []
        batch: Batch | None = None
        if self.real:
            batch = synthetic_batch(self.model, step, self.cfg.seed, self.plan.global_batch, self.dtype)
        inputs: dict[int, torch.Tensor] = {}
        outs: dict[int, torch.Tensor] = {}
        prev: torch.Tensor | None = None
        loss: torch.Tensor | None = None
        for t in range(self.n):
            if t > 0:
                prev = self._bridge(t - 1, outs.get(t - 1), backward=False)
            if t not in self.mine:
                continue
            lo, hi = self.L.rows(t, self.rank)
            if self.cfg.check_memory:
                self.mem.allocate(*self.act_items[t])
            if self.real:
                assert batch is not None
                x = batch.x[lo:hi] if t == 0 else prev
                assert x is not None
                x = x.detach().to(self.device).requires_grad_(t > 0)
                inputs[t] = x
                c = time.monotonic()
                outs[t] = self.nets[t].forward(x, batch.tokens[lo:hi].to(self.device))
                if t == self.n - 1:
                    y = batch.y[lo:hi].to(self.device)
                    loss = sample_loss(outs[t], y).sum() / self.plan.global_batch
                self.busy += time.monotonic() - c
            else:
                self._sleep(sum(self.replay[t].fwd))
                self._replay_split_comm(t, backward=False)
                outs[t] = torch.zeros(0)
        grad_out: dict[int, torch.Tensor | None] = {}
        for t in reversed(range(self.n)):
            if t < self.n - 1:
                g_in = inputs[t + 1].grad if (self.real and t + 1 in inputs) else None
                grad_out[t] = self._bridge(t, g_in, backward=True)
            if t not in self.mine:
                continue
            if self.real:
                c = time.monotonic()
                if t == self.n - 1:
                    assert loss is not None
                    loss.backward()
                else:
                    g = grad_out[t]
                    assert g is not None
                    outs[t].backward(g)
                self.busy += time.monotonic() - c
            else:
                self._replay_backward(t)
                self._replay_split_comm(t, backward=True)
            if self.cfg.check_memory:
                self.mem.free(self.act_items[t][0])
        t1 = time.monotonic()
        self._sync_and_update()
        # when each bucket's all-reduce was launched, seconds before (-) the end of the backward
        self.launch_offsets.append([x - t1 for x in self.launches])
        return [t0, t1, time.monotonic(), self.busy]

    def _sync_and_update(self) -> None:
        self.step_grads: dict[str, torch.Tensor] = {}
        overlap = self.cfg.overlap_sync
        if overlap and self.real:
            for t in self._bucket_names:
                self._launch_ready(t, force=True)  # buckets with unused parameters, in order
        reduced: dict[str, torch.Tensor] = {}
        for _t, work, flat, names in self._works:
            work.wait()
            if flat is not None:
                pmap = self.nets[_t].params
                sizes = [pmap[n].numel() for n in names]
                for n, c in zip(names, flat.split(sizes), strict=True):
                    reduced[n] = c.view_as(pmap[n])
        self._works = []
        for t in self.mine:
            key = self.L.dp_group_key(t, self.rank)
            if not self.real:
                if key is not None and not overlap:
                    dist.all_reduce(self._buffers[("grads", t)], group=self.groups[key])
                continue
            params = list(self.nets[t].params.values())
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            if key is not None and overlap:
                grads = [reduced[n] for n in self.nets[t].params]
            elif key is not None:
                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat, group=self.groups[key])
                grads = [
                    c.view_as(g) for c, g in zip(flat.split([g.numel() for g in grads]), grads, strict=True)
                ]
            with torch.no_grad():
                for (name, p), g in zip(self.nets[t].params.items(), grads, strict=True):
                    if self.cfg.record_grads:
                        self.step_grads[name] = g.detach().cpu().clone()
                    p.sub_(g, alpha=self.cfg.lr)
                    p.grad = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", type=Path, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args(argv)
    job = json.loads((a.job / "job.json").read_text())
    w = Worker(job, a.rank)
    out = a.job / f"rank{a.rank}.json"
    dist.init_process_group(
        w.cfg.backend,
        init_method=f"tcp://{a.master}:{a.port}",
        rank=a.rank,
        world_size=w.L.world,
        timeout=timedelta(seconds=w.cfg.deadline_s),
    )
    groups = {key: dist.new_group(list(ranks)) for key, ranks in w.L.groups()}
    steps, grads = [], []
    try:
        w.setup(groups)
        for s in range(w.cfg.warmup + w.cfg.iterations):
            dist.barrier()
            steps.append(w.step(s))
            if w.cfg.record_grads and w.real:
                grads.append(w.step_grads)
    except DeviceOutOfMemory as e:
        out.write_text(json.dumps({"status": "oom", "reason": str(e), "device": w.L.devices[a.rank]}))
        sys.stderr.write(f"{e}\n")
        sys.stderr.flush()
        os._exit(OOM_EXIT)  # peers blocked in a collective are killed by the driver
    record = {
        "status": "ok",
        "device": w.L.devices[a.rank],
        "type": w.gpu.name,
        "steps": steps,
        "bucket_launch_s": w.launch_offsets,
        "peak_memory_bytes": w.mem.peak,
        "memory_capacity_bytes": w.mem.capacity,
    }
    if w.real:
        params = {n: p.detach().cpu() for net in w.nets.values() for n, p in net.params.items()}
        slices = {n: s for net in w.nets.values() for n, s in net.slices.items()}
        torch.save(
            {
                "grads": grads,
                "params": params,
                "slices": {n: None if s is None else (s.axis, s.lo, s.hi) for n, s in slices.items()},
            },
            a.job / f"rank{a.rank}.pt",
        )
    out.write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
