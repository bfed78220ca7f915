"""One emulated GPU of a hybrid run: ``python -m runtime.hybrid.worker --job DIR --rank R ...``.

Per step: a barrier; forward through the TaskGraphs this device belongs to, in order, with the
bridge exchanges between them (every process takes part in the bridges it sends to or receives
from); the loss on the last TaskGraph's devices; backward in reverse order (each TaskGraph's
autograd graph starts at a detached input, so bridge gradients are explicit messages); then one
all-reduce (sum) of each TaskGraph's gradients over its data-parallel group and an SGD update.
Replay mode sleeps each TaskGraph's forward/backward time on this device's own GPU type (times
x dilation) and communicates scaled buffers of the same messages. Memory is charged to the
device's ledger (``memory.DeviceMemory``); running out writes an ``oom`` record and exits 3.

Output: ``rank<R>.json`` with per-step timestamps (start, end of backward, end of step), busy
(compute) seconds and peak memory; real mode with ``record_grads`` also ``rank<R>.pt``.
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
from runtime.hybrid.config import HybridConfig
from runtime.hybrid.layout import Layout
from runtime.hybrid.memory import DeviceMemory, DeviceOutOfMemory
from runtime.hybrid.net import TOKENS, Batch, TaskGraphNet, sample_loss, synthetic_batch, widths
from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
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
        self.replay: dict[int, tuple[float, float, int]] = {}
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}
        for t in self.mine:
            r, j = self.L.place(t, self.rank)  # type: ignore[misc]
            tg = self.plan.task_graphs[t]
            group = groups.get(f"split:{t}:{r}") if tg.primitive == "split" and tg.degree > 1 else None
            if self.real:
                self.nets[t] = TaskGraphNet(self.L, t, j, group, self.cfg.seed, self.dtype)
            else:
                lo, hi = self.L.rows(t, self.rank)
                fwd = bwd = 0.0
                if hi > lo:
                    times = layer_times(
                        self.model,
                        self.gpu,
                        hi - lo,
                        CostParams(efficiency=self.cfg.efficiency, compute_dtype=self.cfg.compute_dtype),
                    )
                    frac = self.L.split_fraction(t, j) if tg.primitive == "split" else 1.0
                    fwd = frac * float(times.fwd[tg.first_layer : tg.last_layer].sum())
                    bwd = frac * float(times.bwd[tg.first_layer : tg.last_layer].sum())
                pbytes = next(b for w, b in self._param_items(t))
                self.replay[t] = (fwd, bwd, max(1, int(pbytes / 4 / self.cfg.scale)))
                # the gradient buffer, allocated before the first step (``_buffer``)
                self._buffer(("grads", t), self.replay[t][2])

    def _param_items(self, t: int) -> list[tuple[str, float]]:
        return [i for i in self.L.memory_items(self.rank, 0.0) if i[0] == f"task_graphs.{t} parameters"]

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
                self._sleep(self.replay[t][0])
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
                self._sleep(self.replay[t][1])
                self._replay_split_comm(t, backward=True)
            if self.cfg.check_memory:
                self.mem.free(self.act_items[t][0])
        t1 = time.monotonic()
        self._sync_and_update()
        return [t0, t1, time.monotonic(), self.busy]

    def _sync_and_update(self) -> None:
        self.step_grads: dict[str, torch.Tensor] = {}
        for t in self.mine:
            key = self.L.dp_group_key(t, self.rank)
            if not self.real:
                if key is not None:
                    dist.all_reduce(self._buffer(("grads", t), self.replay[t][2]), group=self.groups[key])
                continue
            params = list(self.nets[t].params.values())
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            if key is not None:
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
