"""StrategyBatch: N strategies of one model flattened into one row per shard (CSR), and back.

A sampler can build a batch straight from numpy choices with ``make_batch`` (no pydantic objects
per strategy), score it with ``simulator.analytical.vectorised.score`` and ``decode`` only the
strategies it keeps; ``encode`` builds a batch from ``Strategy`` objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.analytical.arrays import (
    ALGORITHMS,
    COMPRESSORS,
    OP_ALLGATHER,
    ClusterArrays,
    ModelArrays,
)
from simulator.analytical.geometry import ShardGeometry, shard_geometry
from simulator.spec import (
    CollectiveSync,
    Compressor,
    Partition,
    PSSync,
    Strategy,
    VariableStrategy,
    comm,
)


@dataclass(frozen=True, eq=False)
class StrategyBatch:
    """N strategies as flat shard rows; rows of strategy n are ``offsets[n]:offsets[n+1]``.

    Shapes: N strategies, T shard rows, G collective calls: the executor's units
    (``simulator.spec.comm.unit_key``: merge group, algorithm, compressor, rank), split by op
    (dense all-reduce or sparse all-gather).
        offsets (N+1,) int64; strategy (T,) int64; variable (T,) int64 (forward index);
        axis, num_shards, shard_index (T,) int64 (the variable's partition and this shard);
        is_ps (T,) bool; server (T,) int64 node index (-1 for collective rows);
        local_replication (T,) bool; staleness (T,) int64;
        group (T,) int64 merge group id as written (-1 for PS rows);
        algorithm (T,) int64 (0 ring, 1 hierarchical); compressor (T,) int64 (0 none, 1 fp16,
        2 powersgd); rank (T,) int64 (PowerSGD rank, 0 otherwise);
        op (T,) int64 collective op code (``arrays.OP_NAMES``; -1 for PS rows);
        call (T,) int64 index of the row's collective call in [0, G) (-1 for PS rows);
        call_strategy, call_group, call_op (G,) int64: each call's strategy, group id and op;
        call_repeats (G,) float64: how many times the call runs its op (all-reduce: 1 for an
            uncompressed part plus 2 for a PowerSGD part, ``comm.primitive_calls``; all-gather: 1,
            whose price already counts its three gathers).
        geo: ``ShardGeometry`` of the rows (sizes, m_i, c_i(m_i); independent of CostParams);
        code (T,) int64: index into ``ClusterArrays.code_*`` (2·server + I_p, or 2·J + op);
        bin (T,) int64: where the row's time accumulates: strategy·J + server for PS rows,
            N·J + call for collective rows.
    Rows of one strategy are in forward order of variables, then shard index. Everything that
    does not depend on CostParams is computed here, once; ``score`` only applies φ, δ and the
    per-byte coefficients.
    """

    offsets: np.ndarray
    strategy: np.ndarray
    variable: np.ndarray
    axis: np.ndarray
    num_shards: np.ndarray
    shard_index: np.ndarray
    is_ps: np.ndarray
    server: np.ndarray
    local_replication: np.ndarray
    staleness: np.ndarray
    group: np.ndarray
    algorithm: np.ndarray
    compressor: np.ndarray
    rank: np.ndarray
    op: np.ndarray
    call: np.ndarray
    call_strategy: np.ndarray
    call_group: np.ndarray
    call_op: np.ndarray
    call_repeats: np.ndarray
    geo: ShardGeometry
    code: np.ndarray
    bin: np.ndarray

    @property
    def size(self) -> int:
        """N, the number of strategies."""
        return len(self.offsets) - 1

    @property
    def rows(self) -> int:
        """T, the number of shard rows."""
        return len(self.strategy)


def make_batch(
    ma: ModelArrays,
    ca: ClusterArrays,
    *,
    strategy: np.ndarray,
    variable: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    shard_index: np.ndarray,
    is_ps: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    staleness: np.ndarray,
    group: np.ndarray,
    algorithm: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    geo: ShardGeometry | None = None,
    checked: bool = True,
) -> StrategyBatch:
    """Build a batch from per-row choices (all shape (T,), rows grouped by strategy 0..N-1).

    ``geo``: the rows' ``ShardGeometry`` when the caller has it already (a sampler looks its
    shards up in a table of ``shard_geometry`` results); computed from the choices when None.
    ``checked=False`` skips the range checks below: only for rows that are in range by
    construction (``search.samplers.arrays``' draws, whose strategies its tests decode and check).

    Derives the collective op of each row (all-gather for sparse variables, else the row's
    all-reduce algorithm) and numbers the distinct collective calls (strategy, unit key, op).
    Raises ValueError naming the field and first bad row when a value is out of range; it does
    not check that every variable is covered exactly once (``decode`` + ``Strategy.check`` do).
    """
    strategy = np.asarray(strategy, dtype=np.int64)
    if strategy.size and np.any(np.diff(strategy) < 0):
        raise ValueError("strategy: rows must be grouped by strategy in increasing order")
    if strategy.size == 0 or strategy[0] < 0:
        raise ValueError("strategy: need rows, numbered from 0")
    n = int(strategy[-1]) + 1
    counts = np.bincount(strategy, minlength=n)
    if np.any(counts == 0):
        raise ValueError(f"strategy: strategy {int(np.argmin(counts))} has no shard rows")
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    ints = {
        k: np.asarray(a, dtype=np.int64)
        for k, a in dict(
            variable=variable,
            axis=axis,
            num_shards=num_shards,
            shard_index=shard_index,
            server=server,
            staleness=staleness,
            group=group,
            algorithm=algorithm,
            compressor=compressor,
            rank=rank,
        ).items()
    }
    is_ps = np.asarray(is_ps, dtype=bool)
    if checked:
        _check_rows(ma, ca, len(strategy), is_ps, ints, np.asarray(local_replication))
    variable, axis, num_shards, shard_index = (
        ints[k] for k in ("variable", "axis", "num_shards", "shard_index")
    )
    server, staleness, compressor, rank = (ints[k] for k in ("server", "staleness", "compressor", "rank"))
    group = np.where(is_ps, -1, ints["group"])
    algorithm = ints["algorithm"]
    op = np.where(is_ps, -1, np.where(ma.sparse[variable], OP_ALLGATHER, algorithm))
    cc = ~is_ps
    call = np.full(strategy.shape, -1, dtype=np.int64)
    gspan = int(group.max()) + 1 if cc.any() else 1
    rspan = max(int(rank.max()), 0) + 1  # a bound on the collective rows' ranks (a masked max is slow)
    # Mixed radix over (strategy, group, algorithm, compressor, rank, op): comm.unit_key + op.
    # Computed on every row (whole-array arithmetic), kept for the collective rows only.
    uspan = gspan * 2 * 3 * rspan
    key = group * 2 + algorithm
    key *= 3
    key += compressor
    key *= rspan
    key += rank
    key += strategy * uspan
    key *= 3
    key += op
    uniq, call[cc] = _dense_rank(key[cc], n * uspan * 3)
    if geo is None:
        geo = shard_geometry(ma, variable, axis, num_shards, shard_index, compressor, rank)
    elif len(geo.sent_bytes) != len(strategy):
        raise ValueError(f"geo: {len(geo.sent_bytes)} rows, expected {len(strategy)} like strategy")
    calls = len(uniq)
    if geo.lowrank.any():
        lowrank = np.bincount(call[cc], weights=geo.lowrank[cc], minlength=calls) > 0
        plain = np.bincount(call[cc], weights=~geo.lowrank[cc], minlength=calls) > 0
    else:  # no PowerSGD-compressed shard: every call is a plain one
        lowrank, plain = np.zeros(calls, dtype=bool), np.ones(calls, dtype=bool)
    call_op = uniq % 3
    repeats = np.where(call_op == OP_ALLGATHER, 1.0, plain + comm.POWERSGD_ALLREDUCES * lowrank)
    server = np.where(is_ps, server, -1)
    local_replication = np.asarray(local_replication, dtype=bool) & is_ps
    j = len(ca.gpus)
    return StrategyBatch(
        offsets=offsets,
        strategy=strategy,
        variable=variable,
        axis=axis,
        num_shards=num_shards,
        shard_index=shard_index,
        is_ps=is_ps,
        server=server,
        local_replication=local_replication,
        staleness=staleness,
        group=group,
        algorithm=algorithm,
        compressor=compressor,
        rank=rank,
        op=op,
        call=call,
        call_strategy=uniq // (3 * uspan),
        call_group=(uniq // (3 * uspan // gspan)) % gspan,
        call_op=call_op,
        call_repeats=repeats.astype(np.float64),
        geo=geo,
        code=np.where(is_ps, 2 * server + local_replication, 2 * j + op),
        bin=np.where(is_ps, strategy * j + server, n * j + call),
    )


class _Lazy:
    """Attributes named in the instance's ``_lazy`` dict (name -> thunk) are computed on first
    access and kept (``__getattr__`` runs only for attributes not set yet)."""

    def __getattr__(self, name: str) -> Any:
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name not in lazy:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = lazy[name]()
        object.__setattr__(self, name, value)
        del lazy[name]
        return value


class LazyGeometry(_Lazy, ShardGeometry):
    """A ShardGeometry whose fields are computed on first access: ``fields`` maps every field
    name to a thunk (a sampler gathers them from its shard table; the analytical scorer reads
    only ``sent_bytes`` and ``lowrank``)."""

    def __init__(self, fields: dict[str, Callable[[], np.ndarray]]) -> None:
        object.__setattr__(self, "_lazy", dict(fields))


class _SampledBatch(_Lazy, StrategyBatch):
    """A StrategyBatch from ``make_sampled_batch``: the fields the analytical scorer does not read
    are computed on first access; ``_columns`` keeps the sampler's own columns (``sync_columns``)."""


def sync_columns(
    b: StrategyBatch,
) -> tuple[
    tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None,
]:
    """What ``kernels.sync_times`` reads of ``b``'s rows: (variable, server, local_replication,
    algorithm), and (group, compressor, rank, lowrank) when the batch's calls are not numbered yet
    (a sampled batch whose call fields nobody read: the kernel numbers them itself, the same way),
    else None. A sampled batch gives its own columns (any integer width), so that scoring it
    computes none of its int64 fields."""
    columns = b.__dict__.get("_columns")
    if columns is None:
        return (b.variable, b.server, b.local_replication, b.algorithm), None
    variable, server, local_replication, algorithm, group, compressor, rank = columns
    rows = (variable, server, local_replication, algorithm)
    if "call" in b.__dict__:  # numbered already (a field was read)
        return rows, None
    return rows, (group, compressor, rank, np.asarray(b.geo.lowrank, dtype=bool))


def make_sampled_batch(
    ma: ModelArrays,
    ca: ClusterArrays,
    *,
    offsets: np.ndarray,
    variable: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    shard_index: np.ndarray,
    is_ps: np.ndarray,
    server: np.ndarray,
    local_replication: np.ndarray,
    group: np.ndarray,
    algorithm: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
    geo: ShardGeometry,
) -> StrategyBatch:
    """``make_batch`` for a sampler's rows (``search.samplers.arrays``), field for field the same
    batch (tests/search/test_round.py), every field but offsets, is_ps and geo computed on first
    access: the collective calls (call and the per-call arrays) in one compiled pass
    (``kernels.number_calls``), the other columns as int64 like make_batch's. The analytical
    scorer reads none of them: it takes the sampler's columns (``sync_columns``) and numbers the
    calls as it goes.

    The rows must be in range and hold the samplers' invariants, which make several of
    make_batch's masks identities: ``server`` -1 and ``local_replication`` False on collective
    rows; ``group`` -1 and ``algorithm``, ``compressor``, ``rank`` 0 on PS rows; staleness 0.
    Columns may be any integer width (the samplers' int8/int16/int32). ``geo`` may be a
    ``LazyGeometry``.
    """
    n = len(offsets) - 1
    offsets = np.asarray(offsets, dtype=np.int64)
    is_ps = np.asarray(is_ps, dtype=bool)
    j = len(ca.gpus)
    out = object.__new__(_SampledBatch)
    eager: dict[str, Any] = dict(
        offsets=offsets,
        is_ps=is_ps,
        geo=geo,
        _columns=(variable, server, local_replication, algorithm, group, compressor, rank),
    )
    for k, v in eager.items():
        object.__setattr__(out, k, v)
    calls: list[tuple[np.ndarray, ...]] = []

    def numbered(
        i: int,
    ) -> Callable[[], np.ndarray]:  # call, call_strategy, call_group, call_op, call_repeats
        def field() -> np.ndarray:
            if not calls:
                from simulator.analytical.kernels import number_calls  # numba: imported on first use

                calls.append(
                    number_calls(
                        offsets,
                        variable,
                        is_ps,
                        group,
                        algorithm,
                        compressor,
                        rank,
                        np.asarray(geo.lowrank, dtype=bool),
                        ma.sparse,
                        float(comm.POWERSGD_ALLREDUCES),
                    )
                )
            return calls[0][i]

        return field

    def as64(a: np.ndarray) -> Callable[[], np.ndarray]:
        return lambda: np.asarray(a, dtype=np.int64)

    def op() -> np.ndarray:  # make_batch's: all-gather for sparse variables, else the algorithm
        return np.where(is_ps, -1, np.where(ma.sparse[variable], OP_ALLGATHER, algorithm)).astype(np.int64)

    lazy: dict[str, Callable[[], np.ndarray]] = dict(
        strategy=lambda: np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets)),
        variable=as64(variable),
        axis=as64(axis),
        num_shards=as64(num_shards),
        shard_index=as64(shard_index),
        server=as64(server),
        local_replication=lambda: np.asarray(local_replication, dtype=bool),
        staleness=lambda: np.zeros(len(is_ps), dtype=np.int64),
        group=as64(group),
        algorithm=as64(algorithm),
        compressor=as64(compressor),
        rank=as64(rank),
        op=op,
        call=numbered(0),
        call_strategy=numbered(1),
        call_group=numbered(2),
        call_op=numbered(3),
        call_repeats=numbered(4),
        code=lambda: np.where(is_ps, 2 * out.server + out.local_replication, 2 * j + out.op),
        bin=lambda: np.where(is_ps, out.strategy * j + out.server, n * j + out.call),
    )
    object.__setattr__(out, "_lazy", lazy)
    return out


def _check_rows(
    ma: ModelArrays,
    ca: ClusterArrays,
    t: int,
    is_ps: np.ndarray,
    ints: dict[str, np.ndarray],
    local_replication: np.ndarray,
) -> None:
    """Raise ValueError for the first field with a wrong length or an out-of-range value."""
    for k, a in [*ints.items(), ("is_ps", is_ps), ("local_replication", local_replication)]:
        if a.shape != (t,):
            raise ValueError(f"{k}: has shape {a.shape}, expected ({t},) like strategy")
    v = ints["variable"]
    cc = ~is_ps
    checks = [
        ("variable", (v < 0) | (v >= len(ma.numel))),
    ]
    if not checks[0][1].any():
        axis, shards = ints["axis"], ints["num_shards"]
        bad_axis = (axis < 0) | (axis >= ma.ndim[v])
        dim = ma.dims[v, np.where(bad_axis, 0, axis)]
        checks += [
            ("axis", bad_axis),
            ("num_shards", (shards < 1) | (shards > dim)),
            ("shard_index", (ints["shard_index"] < 0) | (ints["shard_index"] >= shards)),
            ("server", is_ps & ((ints["server"] < 0) | (ints["server"] >= len(ca.gpus)))),
            ("staleness", ints["staleness"] < 0),
            ("group", cc & (ints["group"] < 0)),
            ("algorithm", cc & ((ints["algorithm"] < 0) | (ints["algorithm"] >= len(ALGORITHMS)))),
            ("compressor", cc & ((ints["compressor"] < 0) | (ints["compressor"] >= len(COMPRESSORS)))),
            ("rank", cc & ((ints["compressor"] == 2) != (ints["rank"] >= 1))),
        ]
    for name, bad in checks:
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"{name}: row {row} has an out-of-range value {int(ints[name][row])}")


def _dense_rank(key: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``key`` (all in [0, span)) and each element's index among them.

    A presence table is O(T + span); sorting (np.unique) is the fallback when span is much larger.
    """
    if span > 8 * len(key) + 1024:
        uniq, inv = np.unique(key, return_inverse=True)
        return uniq, inv
    present = np.zeros(span, dtype=bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    index = np.cumsum(present) - 1
    return uniq, index[key]


def encode(ma: ModelArrays, ca: ClusterArrays, strategies: Sequence[Strategy]) -> StrategyBatch:
    """Flatten ``strategies`` (valid for ma.model on ca.cluster) into a StrategyBatch."""
    node_index = ca.cluster.node_index
    names = [v.name for v in ma.model.variables]
    flat: list[int] = []
    counts = np.zeros(len(strategies), dtype=np.int64)
    width = len(CHOICE_FIELDS) - 1
    for n, s in enumerate(strategies):
        if s.plan is not None:
            raise ValueError(f"strategies.{n}.plan: hybrid plans are not modelled by the analytical cost")
        start = len(flat)
        subs = s.variables
        if len(subs) != len(names) or any(vs.variable != name for vs, name in zip(subs, names, strict=True)):
            subs = tuple(s.by_variable[name] for name in names)  # not listed in forward order
        for vi, vs in enumerate(subs):
            flat.extend(_variable_rows(vi, vs, node_index))
        counts[n] = (len(flat) - start) // width
    table = np.ascontiguousarray(np.array(flat, dtype=np.int64).reshape(-1, width).T)
    cols = dict(zip(CHOICE_FIELDS[1:], table, strict=True))
    return make_batch(ma, ca, strategy=np.repeat(np.arange(len(strategies)), counts), **cols)


def _variable_rows(vi: int, vs: VariableStrategy, node_index: dict[str, int]) -> tuple[int, ...]:
    """The rows of one sub-strategy, flattened, each in ``CHOICE_FIELDS[1:]`` order."""
    axis, k = vs.partition.axis, vs.partition.shards
    out: list[int] = []
    for si, sync in enumerate(vs.shards):
        if isinstance(sync, PSSync):
            out += (vi, axis, k, si, 1, node_index[sync.server], int(sync.local_replication), sync.staleness)
            out += (0, 0, 0, 0)
        else:
            comp = sync.compressor
            algorithm, kind = ALGORITHMS.index(sync.algorithm), COMPRESSORS.index(comp.kind)
            out += (vi, axis, k, si, 0, -1, 0, 0, sync.group, algorithm, kind, comp.rank or 0)
    return tuple(out)


#: The per-shard choice arrays `make_batch` takes, in the order `encode` flattens them.
CHOICE_FIELDS = (
    "strategy",
    "variable",
    "axis",
    "num_shards",
    "shard_index",
    "is_ps",
    "server",
    "local_replication",
    "staleness",
    "group",
    "algorithm",
    "compressor",
    "rank",
)


def decode(ma: ModelArrays, ca: ClusterArrays, batch: StrategyBatch, n: int, name: str = "") -> Strategy:
    """Strategy ``n`` of ``batch`` as a ``Strategy`` (the inverse of ``encode``)."""
    lo, hi = int(batch.offsets[n]), int(batch.offsets[n + 1])
    nodes = ca.cluster.nodes
    per_var: dict[int, list[int]] = {}
    for r in range(lo, hi):
        per_var.setdefault(int(batch.variable[r]), []).append(r)
    out = []
    for vi, rows in per_var.items():
        syncs: list[PSSync | CollectiveSync] = []
        for r in sorted(rows, key=lambda r: int(batch.shard_index[r])):
            if batch.is_ps[r]:
                syncs.append(
                    PSSync(
                        server=nodes[int(batch.server[r])].name,
                        local_replication=bool(batch.local_replication[r]),
                        staleness=int(batch.staleness[r]),
                    )
                )
            else:
                kind = COMPRESSORS[int(batch.compressor[r])]
                syncs.append(
                    CollectiveSync(
                        group=int(batch.group[r]),
                        compressor=Compressor(
                            kind=kind, rank=int(batch.rank[r]) if kind == "powersgd" else None
                        ),
                        algorithm=ALGORITHMS[int(batch.algorithm[r])],
                    )
                )
        r0 = rows[0]
        out.append(
            VariableStrategy(
                variable=ma.model.variables[vi].name,
                partition=Partition(axis=int(batch.axis[r0]), shards=int(batch.num_shards[r0])),
                shards=tuple(syncs),
            )
        )
    return Strategy(name=name, model=ma.model.name, cluster=ca.cluster.name, variables=tuple(out))
