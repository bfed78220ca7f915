"""Who does what in a hybrid run: processes, rows per device, bridge routes, shard ops, memory.

Pure bookkeeping over a ``HybridPlan`` (no torch.distributed): every process computes the same
tables, so all processes post matching sends/receives and collectives without negotiating.

- One process per GPU of the plan (``HybridPlan.devices`` order is the rank order).
- Rows: nested replica r owns rows [base_r, base_r + replica_batch(r)) of the global batch; a
  replicate TaskGraph's device j holds its share's rows, a split TaskGraph's devices all hold the
  replica's rows.
- Bridges (Whale §3.2.3) between TaskGraph t and t + 1: the rows every device of t + 1 needs come
  from the device of t that holds them: itself when it holds them (a shared GPU: no message),
  else the replicate device whose share covers them, or a split TaskGraph's first device (its
  devices hold identical copies). This is the paper's gather (batch dimension after replicate; the
  split dimension is gathered inside the split TaskGraph's last op) fused with the scatter to the
  next TaskGraph's layout, so at most one message per ordered device pair. Backward routes the
  gradient the same way in reverse: a split TaskGraph's devices each hold the full, identical
  gradient of their copy, so one of them answers.
- Shard ops of a split TaskGraph (``simulator.hybrid.sharding``, shared with the cost model;
  Megatron-style pairing, Whale's sharding patterns): a linear
  whose input is whole is column-parallel (output sharded); the next linear is row-parallel
  (partial sums all-reduced); an embedding is vocab-parallel (masked lookup, all-reduce); an
  attention layer is split by heads (column-parallel q/k/v, row-parallel output); any other layer
  runs whole on every device ("dup"). A sharded activation that reaches a layer needing it whole
  (or the end of the TaskGraph) is all-gathered in the split dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.hybrid.sharding import (
    ShardKind,
    ShardOp,
    shard_ops,
)
from simulator.memory import activation_bytes, boundary_bytes, layer_bytes
from simulator.spec import ClusterSpec, HybridPlan, Layer, ModelSpec
from simulator.spec.hybrid import proportional_sizes


def split_dim(layer: Layer, kind: ShardKind, heads: int) -> int:
    """Size of the dimension a shard op cuts: output features, input features, vocab rows, heads."""
    if kind == "col":
        return layer.variables[0].shape[0]
    if kind == "row":
        return layer.variables[0].shape[1]
    if kind == "emb":
        return layer.variables[0].shape[0]
    if kind == "attn":
        return heads
    return 0


@dataclass(frozen=True)
class Slice:
    """A variable's shard on one device: elements [lo, hi) of ``axis`` (None: the whole variable)."""

    axis: int
    lo: int
    hi: int


def variable_slices(
    layer: Layer, kind: ShardKind, sizes: tuple[int, ...], j: int, heads: int
) -> tuple[Slice | None, ...]:
    """The shard device ``j`` holds of each of ``layer``'s variables under shard op ``kind``."""
    lo = sum(sizes[:j])
    hi = lo + sizes[j]
    n = len(layer.variables)
    if kind == "col":
        return tuple(Slice(0, lo, hi) for _ in range(n))
    if kind == "row":
        return (Slice(1, lo, hi),) + (None,) * (n - 1)  # the bias is added after the all-reduce
    if kind == "emb":
        return (Slice(0, lo, hi),)
    if kind == "attn":
        hd = layer.variables[0].shape[0] // heads
        q = Slice(0, lo * hd, hi * hd)
        return (q, q, q, Slice(1, lo * hd, hi * hd))
    return (None,) * n


def slice_fraction(shape: tuple[int, ...], s: Slice | None) -> float:
    return 1.0 if s is None else (s.hi - s.lo) / shape[s.axis]


@dataclass(frozen=True)
class Route:
    """One bridge message: rows [lo, hi) of the global batch from rank ``src`` to rank ``dst``."""

    src: int
    dst: int
    lo: int
    hi: int


class Layout:
    """The tables of one hybrid run (identical in every process)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, heads: int = 1) -> None:
        self.model, self.cluster, self.plan, self.heads = model, cluster, plan, heads
        self.devices = plan.devices
        self.rank_of = {d: r for r, d in enumerate(self.devices)}
        self.world = len(self.devices)
        self.base = [sum(plan.replica_batch(q) for q in range(r)) for r in range(plan.nested_dp)]

    # ------------------------------------------------------------------ who runs what
    def node_of(self, rank: int) -> int:
        return self.cluster.node_index[self.devices[rank].rpartition(":")[0]]

    def device_type(self, rank: int) -> str:
        return self.cluster.device_type(self.node_of(rank)).name

    def place(self, t: int, rank: int) -> tuple[int, int] | None:
        """(nested replica, position in its VirtualDevice) of ``rank`` in TaskGraph t, or None."""
        dev = self.devices[rank]
        for r, vd in enumerate(self.plan.task_graphs[t].virtual_devices):
            if dev in vd.devices:
                return r, vd.devices.index(dev)
        return None

    def rows(self, t: int, rank: int) -> tuple[int, int]:
        """Rows [lo, hi) of the global batch ``rank`` holds in TaskGraph t (must be in it)."""
        p = self.place(t, rank)
        assert p is not None
        r, j = p
        tg = self.plan.task_graphs[t]
        shares = tg.shares(r, self.plan.replica_batch(r))
        if tg.primitive == "split":
            return self.base[r], self.base[r] + self.plan.replica_batch(r)
        lo = self.base[r] + sum(shares[:j])
        return lo, lo + shares[j]

    def ranks(self, t: int, replica: int) -> tuple[int, ...]:
        return tuple(self.rank_of[d] for d in self.plan.task_graphs[t].virtual_devices[replica].devices)

    def split_sizes(self, t: int, op: ShardOp) -> tuple[int, ...]:
        layer = self.model.layers[op.layer]
        return proportional_sizes(
            split_dim(layer, op.kind, self.heads),
            self.plan.task_graphs[t].split_shares or (1,) * self.tg_degree(t),
        )

    def tg_degree(self, t: int) -> int:
        return self.plan.task_graphs[t].degree

    def split_fraction(self, t: int, j: int) -> float:
        """Device j's fraction of a split TaskGraph's sharded work (its split share)."""
        tg = self.plan.task_graphs[t]
        w = tg.split_shares or (1,) * tg.degree
        return w[j] / sum(w)

    # ------------------------------------------------------------------ groups
    def groups(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every process group, in the order all processes create them: (key, ranks).

        ``split:t:r``: the devices of nested replica r of split TaskGraph t (its shard collectives);
        ``dp:t``: a replicate TaskGraph's devices over all replicas (its gradient all-reduce);
        ``dp:t:j``: shard j of a split TaskGraph over the nested replicas.
        """
        out: list[tuple[str, tuple[int, ...]]] = []
        for t, tg in enumerate(self.plan.task_graphs):
            if tg.primitive == "split":
                for r in range(self.plan.nested_dp):
                    out.append((f"split:{t}:{r}", self.ranks(t, r)))
                if self.plan.nested_dp > 1:
                    for j in range(tg.degree):
                        out.append(
                            (f"dp:{t}:{j}", tuple(self.ranks(t, r)[j] for r in range(self.plan.nested_dp)))
                        )
            else:
                out.append((f"dp:{t}", tuple(self.rank_of[d] for d in tg.devices)))
        return out

    def dp_group_key(self, t: int, rank: int) -> str | None:
        p = self.place(t, rank)
        if p is None:
            return None
        tg = self.plan.task_graphs[t]
        if tg.primitive == "split":
            return f"dp:{t}:{p[1]}" if self.plan.nested_dp > 1 else None
        return f"dp:{t}" if len(tg.devices) > 1 else None

    # ------------------------------------------------------------------ bridges
    def _holders(self, t: int, r: int) -> tuple[bool, list[tuple[int, int, int]]]:
        tg = self.plan.task_graphs[t]
        return tg.primitive == "split", [(k, *self.rows(t, k)) for k in self.ranks(t, r)]

    def routes(self, t: int, backward: bool = False) -> list[Route]:
        """Messages of the bridge between TaskGraph t and t + 1 (``backward``: gradients, t+1 -> t)."""
        out: list[Route] = []
        for r in range(self.plan.nested_dp):
            src_t, dst_t = (t + 1, t) if backward else (t, t + 1)
            whole, holders = self._holders(src_t, r)
            _, needs = self._holders(dst_t, r)
            held_by = {k: (lo, hi) for k, lo, hi in holders}
            for d, lo, hi in needs:
                if hi <= lo:
                    continue
                if whole:
                    src = d if d in held_by else holders[0][0]
                    out.append(Route(src, d, lo, hi))
                    continue
                if d in held_by and held_by[d][0] <= lo and hi <= held_by[d][1]:
                    out.append(Route(d, d, lo, hi))
                    continue
                for k, a, b in holders:
                    a, b = max(a, lo), min(b, hi)
                    if a < b:
                        out.append(Route(k, d, a, b))
        return out

    # ------------------------------------------------------------------ memory
    def memory_items(
        self, rank: int, state_factor: float, activation_factor: float = 1.0
    ) -> list[tuple[str, float]]:
        """(what, bytes) a device holds in a step, in allocation order (``runtime.hybrid.memory``).

        The memory rule (``simulator.memory``, the planner's) applied to what this device runs.
        Per TaskGraph: its parameters (split: its shards, whole copies of the layers it does not
        shard), gradients (density-scaled for sparse variables),
        ``state_factor`` x parameters of optimizer state, for a split TaskGraph bridge buffers of
        its input and output for the whole batch (``boundary_bytes`` x rows), then the activations
        it stashes for backward: every layer's ``activation_bytes`` x its rows x
        ``activation_factor`` (a split TaskGraph's by its split fraction).
        """
        params: list[tuple[str, float]] = []
        acts: list[tuple[str, float]] = []
        for t, tg in enumerate(self.plan.task_graphs):
            p = self.place(t, rank)
            if p is None:
                continue
            lo, hi = self.rows(t, rank)
            frac = 1.0
            if tg.primitive == "split":
                frac = self.split_fraction(t, p[1])
                pbytes = gbytes = 0.0
                for op in shard_ops(self.model, tg.first_layer, tg.last_layer):
                    layer = self.model.layers[op.layer]
                    sizes = self.split_sizes(t, op) if split_dim(layer, op.kind, self.heads) else ()
                    slices = variable_slices(layer, op.kind, sizes, p[1], self.heads) if sizes else ()
                    for i, v in enumerate(layer.variables):
                        f = slice_fraction(v.shape, slices[i]) if slices else 1.0
                        pbytes += v.bytes * f
                        gbytes += v.grad_bytes * f
            else:
                pbytes, gbytes = layer_bytes(self.model, tg.first_layer, tg.last_layer)
            per_sample = activation_bytes(self.model, tg.first_layer, tg.last_layer, activation_factor)
            params += [(f"task_graphs.{t} parameters", pbytes), (f"task_graphs.{t} gradients", gbytes)]
            if state_factor:
                params.append((f"task_graphs.{t} optimizer state", state_factor * pbytes))
            if tg.primitive == "split":
                boundary = boundary_bytes(self.model, tg.first_layer, tg.last_layer)
                params.append((f"task_graphs.{t} bridge buffers", boundary * (hi - lo)))
            acts.append((f"task_graphs.{t} activations ({hi - lo} samples)", frac * (hi - lo) * per_sample))
        return params + acts

    def bridge_numel(self, t: int, rows: int, scale: float) -> int:
        """Replay: elements of a bridge message of ``rows`` samples of TaskGraph t's output."""
        tg = self.plan.task_graphs[t]
        return max(1, math.ceil(rows * self.model.layers[tg.last_layer - 1].activation_bytes / 4 / scale))
