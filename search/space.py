"""The synchronisation-strategy space of one model on one cluster, and its size.

This module is the one place that says which strategies exist (AutoSync supplementary §2-§3, §6).
Every sampler, searcher parametrisation and similarity function reads its choices from here.

Per variable v (a parameter tensor, in forward order):

1. **Partition** — not partitioned (1 shard), or split along one axis into ``k`` near-equal shards
   with ``2 <= k <= k_max(v, axis)`` where
   ``k_max(v, axis) = min(max_shards, shape[axis], floor(bytes(v) / min_shard_bytes))``.
   So a variable is partitionable only when it holds at least ``2 * min_shard_bytes`` (default
   2 x 256 KiB): splitting smaller tensors only adds per-message overhead (phi, delta of Eq. 2-3).
   A sparse (row-sparse embedding) variable is split on axis 0 only; a dense one on any axis whose
   ``k_max >= 2``.
2. **Synchroniser per shard** — parameter server (PS) or collective.
   - PS: the **server** node (any node of the cluster, CPU-only nodes included), and **local
     replication** I_p (reduce inside a node first) on or off. Staleness is fixed to 0: SSP changes
     convergence, not only speed, so it is not a free choice of a synchronisation search.
   - Collective: **merge group** (0 .. N-1, N the number of merge groups of the strategy,
     ``1 <= N <= min(max_groups, #collective shards)``), **compressor** (none; fp16 for float32
     tensors; PowerSGD of rank r in ``powersgd_ranks`` for a dense shard that is a matrix with both
     sides > r) and the **all-reduce algorithm** (ring or hierarchical).

Lossless by default (issue 14): fp16 and PowerSGD change what the model learns, not only how fast
a step runs, so a speed-up found with them is not comparable with a lossless baseline. The default
space offers only ``none``; a user opts in with a *compression* choice (``none`` | ``fp16`` |
``powersgd`` | ``all``, :func:`compressor_kinds`), and a strategy's :func:`space_of` says whether it
is lossless or lossy.

Placement and merge group are the two fields the constrained sampler leaves to Algorithms 1
and 2 (``search.constraints``); the others are the "partial strategy".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, get_args

from simulator.spec import (
    DTYPE_BYTES,
    ClusterSpec,
    CollectiveSync,
    Compressor,
    ModelSpec,
    Partition,
    Strategy,
    Variable,
)

#: What a user may opt into: no compression (the default), fp16, PowerSGD, or both.
Compression = Literal["none", "fp16", "powersgd", "all"]
COMPRESSIONS: tuple[Compression, ...] = get_args(Compression)
#: A strategy (or a search space) is lossless when no shard is compressed, lossy otherwise.
SpaceKind = Literal["lossless", "lossy"]


def compressor_kinds(compression: Compression) -> tuple[str, ...]:
    """The compressor kinds of ``SpaceConfig.compressors`` for a compression choice ('none' always kept)."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression: must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    return {"none": ("none",), "fp16": ("none", "fp16"), "powersgd": ("none", "powersgd")}.get(
        compression, ("none", "fp16", "powersgd")
    )


def space_kind(compression: Compression) -> SpaceKind:
    """'lossless' for compression 'none', else 'lossy'."""
    return "lossless" if compression == "none" else "lossy"


def space_of(strategy: Strategy) -> SpaceKind:
    """'lossy' if any collective shard of ``strategy`` is compressed (fp16, PowerSGD), else 'lossless'."""
    for vs in strategy.variables:
        for sync in vs.shards:
            if isinstance(sync, CollectiveSync) and sync.compressor.kind != "none":
                return "lossy"
    return "lossless"


@dataclass(frozen=True)
class SpaceConfig:
    """The bounds of the strategy space."""

    # A shard holds at least this many bytes, so only variables >= 2x this are partitioned.
    min_shard_bytes: int = 256 * 1024
    # Upper bound on the shards of one variable (AutoDist's partitioner uses a handful).
    max_shards: int = 16
    # Upper bound on the number of collective merge groups N of a strategy.
    max_groups: int = 16
    # PowerSGD ranks on offer (a rank must be smaller than both sides of the shard's matrix).
    powersgd_ranks: tuple[int, ...] = (1, 2, 4, 8)
    # All-reduce algorithms on offer.
    algorithms: tuple[str, ...] = ("ring", "hierarchical")
    # Compressor kinds on offer ("none" must be kept: it is the only one every shard accepts).
    # Lossless by default: lossy kinds are an explicit opt-in (compressor_kinds(compression)).
    compressors: tuple[str, ...] = ("none",)


@dataclass(frozen=True)
class VariableSpace:
    """The choices of one variable: partition axes and shard counts, and its byte sizes."""

    index: int  # position in forward order
    variable: Variable
    k_max: dict[int, int] = field(hash=False)  # axis -> largest shard count (axes with k_max >= 2)

    @property
    def name(self) -> str:
        return self.variable.name

    @property
    def partitionable(self) -> bool:
        return bool(self.k_max)

    @property
    def partitions(self) -> list[tuple[int, int]]:
        """Every (axis, shards) choice; (0, 1) is 'not partitioned'."""
        return [(0, 1)] + [(a, k) for a, km in self.k_max.items() for k in range(2, km + 1)]


@dataclass(frozen=True)
class ShardLayout:
    """One shard of a partitioned variable: its shape, gradient message bytes and compressors."""

    shape: tuple[int, ...]
    message_bytes: float
    compressors: tuple[Compressor, ...]

    @cached_property
    def by_kind(self) -> dict[str, tuple[Compressor, ...]]:
        """The compressors grouped by kind ('none', 'fp16', 'powersgd'), in config order."""
        out: dict[str, list[Compressor]] = {}
        for c in self.compressors:
            out.setdefault(c.kind, []).append(c)
        return {k: tuple(v) for k, v in out.items()}


class Space:
    """The strategy space of ``model`` on ``cluster`` under ``config`` (see the module docstring)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, config: SpaceConfig | None = None) -> None:
        self.model = model
        self.cluster = cluster
        self.config = config or SpaceConfig()
        self.variables = tuple(
            VariableSpace(i, v, _k_max(v, self.config)) for i, v in enumerate(model.variables)
        )
        self._compressors: dict[tuple[str, tuple[int, ...]], list[Compressor]] = {}
        self._layouts: dict[tuple[int, int, int], tuple[ShardLayout, ...]] = {}

    @cached_property
    def servers(self) -> tuple[str, ...]:
        """Node names that may host a PS shard (every node)."""
        return tuple(n.name for n in self.cluster.nodes)

    @cached_property
    def server_bandwidth(self) -> tuple[float, ...]:
        """b_{j,j} of Algorithm 1 for each server, Gbit/s."""
        return tuple(self.cluster.node_bandwidth_gbps(j) for j in range(len(self.cluster.nodes)))

    @cached_property
    def max_shard_count(self) -> int:
        """The most shards a strategy of this space can have."""
        return sum(max([1, *vs.k_max.values()]) for vs in self.variables)

    def layout(self, vs: VariableSpace, axis: int, shards: int) -> tuple[ShardLayout, ...]:
        """Per shard of ``vs`` split ``shards`` ways on ``axis``: shape, message bytes, compressors."""
        key = (vs.index, axis, shards)
        if key not in self._layouts:
            shapes = Partition(axis=axis, shards=shards).shard_shapes(vs.variable.shape)
            self._layouts[key] = tuple(
                ShardLayout(s, shard_message_bytes(vs.variable, s), tuple(self.compressors(vs.variable, s)))
                for s in shapes
            )
        return self._layouts[key]

    def compressors(self, var: Variable, shard_shape: tuple[int, ...]) -> list[Compressor]:
        """The compressors a collective shard of ``var`` with ``shard_shape`` may use."""
        key = (var.name, shard_shape)
        if key not in self._compressors:
            self._compressors[key] = self._compressor_options(var, shard_shape)
        return self._compressors[key]

    def _compressor_options(self, var: Variable, shard_shape: tuple[int, ...]) -> list[Compressor]:
        out = [Compressor()]
        kinds = self.config.compressors
        if "fp16" in kinds and var.dtype == "float32":
            out.append(Compressor(kind="fp16"))
        if "powersgd" in kinds and not var.sparse and len(shard_shape) >= 2:
            rows, cols = shard_shape[0], math.prod(shard_shape[1:])
            out.extend(
                Compressor(kind="powersgd", rank=r) for r in self.config.powersgd_ranks if r < min(rows, cols)
            )
        return out

    def max_groups(self, collective_shards: int) -> int:
        """Largest merge-group count N for a strategy with this many collective shards."""
        return max(1, min(self.config.max_groups, collective_shards))

    def log10_size(self) -> float:
        """log10 of the number of distinct strategies in the space.

        Count = sum over N (merge groups) of prod over variables of
        sum over partitions (a, k) of (c_PS + c_CC(N))^k, where c_PS = 2 x servers and
        c_CC(N) = N x compressors x algorithms (compressors of the first shard's shape; shards of
        one partition differ by at most one row, which rarely changes the PowerSGD ranks).
        Group labels are counted as given (not up to renaming), matching what a sampler draws.
        """
        c_ps = 2 * len(self.servers)
        n_alg = len(self.config.algorithms)
        terms = []
        for n_groups in range(1, self.config.max_groups + 1):
            total = 0.0
            for vs in self.variables:
                logs = []
                for axis, k in vs.partitions:
                    shape = vs.variable.shape
                    shard_shape = (
                        (*shape[:axis], math.ceil(shape[axis] / k), *shape[axis + 1 :]) if k > 1 else shape
                    )
                    c_cc = n_groups * len(self.compressors(vs.variable, shard_shape)) * n_alg
                    logs.append(k * math.log10(c_ps + c_cc))
                total += _log10_sum(logs)
            terms.append(total)
        return _log10_sum(terms)


def shard_message_bytes(var: Variable, shard_shape: tuple[int, ...]) -> float:
    """Bytes of one worker's gradient message for a shard (m_i of Eq. 2; density-scaled if sparse).

    This is the "byte size" Algorithms 1 and 2 balance: a server's and a merge group's traffic is
    proportional to it (a sparse embedding's rows pushed/pulled per step, not its stored size).
    """
    return math.prod(shard_shape) * DTYPE_BYTES[var.dtype] * var.density


def _k_max(var: Variable, config: SpaceConfig) -> dict[int, int]:
    axes = (0,) if var.sparse else tuple(range(len(var.shape)))
    out = {}
    for a in axes:
        k = min(config.max_shards, var.shape[a], var.bytes // config.min_shard_bytes)
        if k >= 2:
            out[a] = k
    return out


def _log10_sum(logs: list[float]) -> float:
    m = max(logs)
    return m + math.log10(sum(10 ** (x - m) for x in logs))
