"""SyncEngine: launches the plan's units as gradients become ready, overlapping backward.

A unit is launched when all its shards' variables are ready and every earlier unit has been
launched, so every rank issues the same sequence. *Plain* units (one flat ring all-reduce of dense
shards, no PowerSGD: what a DDP bucket is) are started with ``async_op=True`` right where they
become ready (the gradient hook's thread, as DDP's reducer does) and waited for in :meth:`finish`.
Everything else runs on three ordered channels (a thread each, like Horovod's background thread):
collectives, PS pushes, PS pulls; the channels run chains of dependent calls (hierarchical
all-reduce, PowerSGD's two all-reduces, a local-replication reduce then send), which a single
``async_op=True`` call cannot express. Plain units go direct only if no channel unit uses the
workers' group (ring PowerSGD, sparse all-gathers), so one group never gets calls from two threads
in rank-dependent order. Measured reason (benchmarks/apply_overhead.py): handing each plain unit
to a Python thread cost GIL hand-overs between autograd's thread and the channel.
Parameter updates are collected and applied by the main thread after backward, so autograd never
sees a parameter change under it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

from runtime.executor import ps
from runtime.executor.collective import PendingPlain, finish_plain, is_plain, run_collective, start_plain
from runtime.executor.groups import CommGroups
from runtime.executor.plan import CollectiveUnit, SyncPlan
from runtime.executor.powersgd import PowerSGD
from runtime.executor.shards import ShardTensors, Update


class Channel:
    """One thread executing submitted callables in order; the first error is kept and re-raised."""

    def __init__(self, name: str) -> None:
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fn = self._q.get()
            try:
                if fn is None:
                    return
                if self.error is None:
                    fn()
            except BaseException as e:  # kept for the main thread, which fails the trial
                self.error = e
            finally:
                self._q.task_done()

    def submit(self, fn: Callable[[], None]) -> None:
        self._q.put(fn)

    def drain(self) -> None:
        self._q.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=5)


class SyncEngine:
    """Per-trial synchronisation state of one worker."""

    def __init__(self, plan: SyncPlan, tensors: ShardTensors, g: CommGroups, lr: float, seed: int) -> None:
        self.plan = plan
        self.tensors = tensors
        self.g = g
        self.lr = lr
        self.powersgd = PowerSGD(plan, seed, g.device)
        unit_vars = [{plan.shards[s].var_index for s in plan.unit_shards(u)} for u in plan.units]
        self._unit_size = [len(vs) for vs in unit_vars]
        self._var_units: dict[int, list[int]] = {}
        for i, vs in enumerate(unit_vars):
            for v in vs:
                self._var_units.setdefault(v, []).append(i)
        collective = [(i, u) for i, u in enumerate(plan.units) if isinstance(u, CollectiveUnit)]
        plain = {i for i, u in collective if is_plain(u, plan)}
        # A channel unit on the workers' group (ring PowerSGD, any sparse all-gather) would race the
        # direct launches on that group: then every collective unit goes through the channel.
        shares_workers = any(
            i not in plain and (u.algorithm == "ring" or any(plan.shards[s].sparse for s in u.shards))
            for i, u in collective
        )
        self.direct: frozenset[int] = frozenset() if shares_workers else frozenset(plain)
        self.channels = {k: Channel(f"sync-{k}") for k in ("collective", "push", "pull")}
        self._lock = threading.Lock()
        self._updates: list[Update] = []
        self._sends: list[tuple[dist.Work, object]] = []
        self._started: list[PendingPlain] = []
        self._buckets: dict[int, torch.Tensor] = {}  # a direct unit's buffer, reused (DDP's buckets)
        self._ready: set[int] = set()
        self._missing = list(self._unit_size)
        self._next = 0

    def begin_iteration(self) -> None:
        self._started.clear()  # only after a failed finish() is anything left here
        self._ready = set()
        self._missing = list(self._unit_size)
        self._next = 0

    def variable_ready(self, var_index: int) -> None:
        """Mark one variable's gradient final; launch every unit that is now complete, in order."""
        if var_index in self._ready:
            return
        self._ready.add(var_index)
        for u in self._var_units.get(var_index, ()):
            self._missing[u] -= 1
        n = len(self._missing)
        while self._next < n and self._missing[self._next] == 0:
            self._launch(self._next)
            self._next += 1

    def _launch(self, i: int) -> None:
        unit = self.plan.units[i]
        if i in self.direct:
            assert isinstance(unit, CollectiveUnit)
            p = start_plain(unit, self.plan, self.tensors, self.g, self._buckets.get(i))
            self._buckets[i] = p.flat
            self._started.append(p)
            return
        if isinstance(unit, CollectiveUnit):
            cu = unit

            def collective() -> None:
                ups = run_collective(cu, self.plan, self.tensors, self.g, self.powersgd, self.lr)
                with self._lock:
                    self._updates.extend(ups)

            self.channels["collective"].submit(collective)
            return
        pu = unit

        def push() -> None:
            sends = ps.push(pu, self.plan, self.tensors, self.g)
            with self._lock:
                self._sends.extend(sends)

        pending = ps.post_pull(pu, self.plan, self.tensors, self.g)

        def pull() -> None:
            up = ps.pull(pending, self.plan, self.tensors, self.g)
            with self._lock:
                self._updates.append(up)

        self.channels["push"].submit(push)
        self.channels["pull"].submit(pull)

    def finish(self, num_vars: int) -> None:
        """After backward: launch what is left, wait for all communication, apply the updates."""
        for v in range(num_vars):
            if v not in self._ready:
                self.variable_ready(v)
        for p in self._started:
            ups = finish_plain(p, self.tensors, self.g, self.lr)
            with self._lock:
                self._updates.extend(ups)
        self._started.clear()
        for ch in self.channels.values():
            ch.drain()
        for work, _ in self._sends:
            work.wait()
        for up in self._updates:
            up()
        self._updates.clear()
        self._sends.clear()

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
