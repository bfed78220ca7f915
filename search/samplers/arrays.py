"""The array sampler: many strategies drawn at once, straight into the analytical scorer's arrays.

The object samplers (``uniform``, ``constrained``) draw one ``Strategy`` at a time in Python,
about a hundred a second on BERT-large. A round wants thousands (AutoSync's M), so this sampler
draws a whole chunk of strategies with numpy and emits ``simulator.analytical.StrategyBatch``
arrays (one row per shard); only the strategies a round keeps become Strategy objects
(``StrategyBatch`` -> ``decode``).

Distribution: the same as the object samplers' (``search.samplers.partial``'s two priors, then
c_lb / c_am or uniform placement and groups), factor by factor:

- prior per strategy: 'hierarchical' draws p_split, p_ps, p_replication ~ U(0, 1) and the
  compressor-kind and algorithm weights ~ Dirichlet(1) (normalised Exp(1) draws); 'flat' uses
  1/2 and equal weights;
- per variable: split with probability p_split when partitionable, then the axis uniformly among
  its splittable axes and the shard count uniformly in 2..k_max (``search.space``);
- per shard: PS with probability p_ps, then local replication with probability p_replication;
  else a compressor kind among those the shard accepts (weights restricted to them, in the order
  none, fp16, PowerSGD), a PowerSGD rank uniformly among those allowed, the algorithm by weight;
- merge groups N uniform in 1..max_groups(collective shards);
- constrained: PS servers by Algorithm 1 (``search.constraints.load_balance``: shards by size,
  descending, each server drawn from the softmax of how far it lags its bandwidth share, in units
  of temperature x the strategy's mean PS shard size) and groups by Algorithm 2
  (``adjacent_merge``: collective shards in back-propagation order, a group closes once its bytes
  reach total / N); random: servers and groups uniform.

How: the uniforms are drawn with numpy, chunk by chunk, in a fixed order and shape (that is the
stream), into buffers reused chunk after chunk; the rules above turn them into rows in compiled
loops (``search.samplers.kernels``, numba): the layouts, then one pass over the chunk, strategy by
strategy (Algorithm 1 is sequential within a strategy: each shard's server depends on the loads
the larger ones left), that writes every row, server, group, the memory check and the content
hash straight into the columns ``sample_arrays`` returns (``_Columns``). Shard sizes in Algorithm
1 are pre-divided by the softmax unit (temperature x the strategy's mean PS shard) so that the
logits need no division; Algorithm 2's boundaries come from one running sum over the chunk's
collective rows in reverse row order. Both give the same result as the scalar functions on the
same shards and uniforms (tests/search/test_round.py), up to float rounding: a draw can differ
only where its uniform falls within rounding of a cumulative-weight boundary, or at exact ties of
non-integer byte counts. The compiled loops replaced numpy versions draw for draw: every column
of the same seeds' draws is equal (issue 16).

Each row keeps its ``entry`` in the space's shard table, so the scorer's shard sizes are table
lookups (``ChoiceArrays.batch``) and the memory check sums PS bytes only (a strategy's collective
bytes are the model's bytes less its PS bytes). Each strategy keeps its content hash
(``ChoiceArrays.ids``), so the round's duplicate and already-tried checks read no rows.

Reproducibility: chunk c of a sampler seeded s uses ``np.random.default_rng([s, c, 0x5A])``
(``chunk`` strategies per chunk, whatever n is asked), so the same seed and chunk size give the
same strategies, and ``sample_arrays(a)`` then ``sample_arrays(b)`` equals ``sample_arrays(a + b)``
of a fresh sampler. A round uses chunk = min(CHUNK, M), so a small round draws little more than M. The stream differs from the object samplers' (they draw strategy by strategy): the
round's object path (the reference) decodes this sampler's draws, so both paths see the same M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache, partial
from typing import Literal

import numpy as np

from search.feasibility import MemoryModel
from search.samplers.base import InfeasibleSpaceError
from search.samplers.constrained import Constraints
from search.samplers.partial import Prior, _collective, _partition, _ps
from search.space import Space
from simulator.analytical import (
    ModelArrays,
    ShardGeometry,
    StrategyBatch,
    cluster_arrays,
    model_arrays,
    shard_geometry,
)
from simulator.analytical.arrays import ALGORITHMS, COMPRESSORS
from simulator.analytical.batch import CHOICE_FIELDS, LazyGeometry, make_batch, make_sampled_batch
from simulator.spec import DTYPE_BYTES, Compressor, Strategy, Synchronizer, VariableStrategy

#: Strategies drawn per chunk (one generator per chunk).
CHUNK = 1024
#: The per-row choice columns a ChoiceArrays holds (``make_batch``'s, less strategy and staleness).
COLUMNS = tuple(f for f in CHOICE_FIELDS if f not in ("strategy", "staleness"))


#: ``ShardGeometry``'s fields, and the choice columns ``shard_geometry`` reads (in its order).
_GEO_FIELDS = tuple(f.name for f in fields(ShardGeometry))
_GEO_CHOICES = ("variable", "axis", "num_shards", "shard_index", "compressor", "rank")


@lru_cache(maxsize=64)
def _compressor(kind: str, rank: int | None) -> Compressor:
    return Compressor(kind=kind, rank=rank)


@dataclass(frozen=True, eq=False)
class _Tables:
    """The space's per-variable, per-layout and per-shard constants (computed once per space).

    A layout is one (variable, axis, shards) choice; its shards are entries
    ``start[l] .. start[l] + k[l]`` of the shard table.
    """

    n_axes: np.ndarray  # (V,) splittable axes
    n_axes_f: np.ndarray  # (V,) float32, max(n_axes, 1)
    last_axis: np.ndarray  # (V,) max(n_axes - 1, 0)
    axis_tab: np.ndarray  # (V, A) the splittable axes
    kmax_tab: np.ndarray  # (V, A) k_max per splittable axis
    base: np.ndarray  # (V, A) layout id of k = 2 on that axis
    whole: np.ndarray  # (V,) layout id of 'not partitioned'
    lay_axis: np.ndarray  # (L,)
    lay_k: np.ndarray  # (L,)
    lay_start: np.ndarray  # (L,)
    msg: np.ndarray  # (S,) message bytes (``search.space.shard_message_bytes``)
    param: np.ndarray  # (S,) parameter bytes of the shard (the memory model's)
    brank: np.ndarray  # (S,) int16 rank of msg, descending (0 = largest)
    fp16: np.ndarray  # (S,) bool: fp16 is on offer
    min_side: np.ndarray  # (S,) min(rows, cols) of a dense >= 2-D shard, else 0 (no PowerSGD)
    geo: ShardGeometry  # (S,) ``shard_geometry`` of every shard entry, uncompressed
    heads: np.ndarray  # (S,) uint64 the entry's part of a row's content hash (``kernels.identity_heads``)
    model_bytes: float  # parameter bytes of the whole model (every strategy's shards sum to it)


@lru_cache(maxsize=16)
def _tables(space: Space) -> _Tables:
    from search.samplers.kernels import identity_heads  # numba: imported on first use

    cfg = space.config
    v_count = len(space.variables)
    a_max = max([1, *(len(vs.k_max) for vs in space.variables)])
    n_axes = np.zeros(v_count, dtype=np.int64)
    axis_tab = np.zeros((v_count, a_max), dtype=np.int64)
    kmax_tab = np.ones((v_count, a_max), dtype=np.int64)
    base = np.zeros((v_count, a_max), dtype=np.int64)
    whole = np.zeros(v_count, dtype=np.int64)
    layouts: list[tuple[int, int, int]] = []  # (variable, axis, shards)
    for vs in space.variables:
        whole[vs.index] = len(layouts)
        layouts.append((vs.index, 0, 1))
        for a_i, (axis, km) in enumerate(sorted(vs.k_max.items())):
            n_axes[vs.index] += 1
            axis_tab[vs.index, a_i], kmax_tab[vs.index, a_i] = axis, km
            base[vs.index, a_i] = len(layouts)
            layouts += [(vs.index, axis, k) for k in range(2, km + 1)]
    lv, la, lk = np.array(layouts, dtype=np.int64).T
    start = np.concatenate(([0], np.cumsum(lk)[:-1]))
    # per shard entry: which layout, and its index in the layout
    entry_lay = np.repeat(np.arange(len(lk)), lk)
    idx = np.arange(int(lk.sum())) - start[entry_lay]
    var = lv[entry_lay]
    shapes = [vs.variable.shape for vs in space.variables]
    nd = max(len(s) for s in shapes)
    dims = np.ones((v_count, nd), dtype=np.int64)
    for i, s in enumerate(shapes):
        dims[i, : len(s)] = s
    ndim = np.array([len(s) for s in shapes], dtype=np.int64)
    numel_v = np.prod(dims, axis=1)
    axis_e, k_e = la[entry_lay], lk[entry_lay]
    d = dims[var, axis_e]
    size = d // k_e + (idx < d % k_e)  # Partition.shard_shapes: near-equal, the first ones larger
    numel = numel_v[var] // d * size
    rows = np.where(axis_e == 0, size, dims[var, 0])
    cols = numel // np.maximum(rows, 1)
    variables = [vs.variable for vs in space.variables]
    dtype_bytes = np.array([DTYPE_BYTES[v.dtype] for v in variables], dtype=np.int64)
    density = np.array([v.density for v in variables])
    sparse = np.array([v.sparse for v in variables])
    f32 = np.array([v.dtype == "float32" for v in variables])
    param = (numel * dtype_bytes[var]).astype(np.float64)
    msg = numel * dtype_bytes[var] * density[var]
    order = np.argsort(-msg, kind="stable")
    brank = np.empty(len(msg), dtype=np.int64)
    brank[order] = np.arange(len(msg))
    # equal sizes share a rank (ties keep row order, as the scalar Algorithm 1's stable sort does)
    same = np.r_[False, msg[order][1:] == msg[order][:-1]]
    dense_rank = np.cumsum(~same) - 1
    brank[order] = dense_rank
    psgd = ~sparse[var] & (ndim[var] >= 2)
    zero = np.zeros(len(var), dtype=np.int64)
    return _Tables(
        n_axes=n_axes,
        n_axes_f=np.maximum(n_axes, 1).astype(np.float32),
        last_axis=np.maximum(n_axes - 1, 0),
        axis_tab=axis_tab,
        kmax_tab=kmax_tab,
        base=base,
        whole=whole,
        lay_axis=la,
        lay_k=lk,
        lay_start=start,
        msg=msg,
        param=param,
        brank=brank.astype(np.int16 if dense_rank[-1] < 2**15 else np.int32),
        fp16=f32[var] & ("fp16" in cfg.compressors),
        min_side=np.where(psgd & ("powersgd" in cfg.compressors), np.minimum(rows, cols), 0),
        geo=shard_geometry(model_arrays(space.model), var, axis_e, k_e, idx, zero, zero),
        heads=identity_heads(var, axis_e, k_e, idx),
        model_bytes=float(param[start[whole]].sum()),
    )


@dataclass(frozen=True, eq=False)
class ChoiceArrays:
    """N strategies as per-shard choice rows (grouped by strategy, variables in forward order).

    ``offsets`` (N+1,) int64; every column of ``COLUMNS`` (T,), small integer types or bool
    (a 10,000-strategy BERT-large round holds ~10 M rows); ``server`` is a node index (-1 for
    collective rows), ``group`` -1 for PS rows. ``batch()`` is the scorer's StrategyBatch of
    them, ``strategy(space, i)`` one Strategy object, ``identity()`` a content hash per strategy
    (``ids``: the sampler's, hashed as it drew them; None for other arrays).
    """

    offsets: np.ndarray
    variable: np.ndarray
    axis: np.ndarray
    num_shards: np.ndarray
    shard_index: np.ndarray
    is_ps: np.ndarray
    server: np.ndarray
    local_replication: np.ndarray
    group: np.ndarray
    algorithm: np.ndarray
    compressor: np.ndarray
    rank: np.ndarray
    entry: np.ndarray | None = None  # (T,) the row's shard entry of the space's tables (sampler rows)
    ids: np.ndarray | None = None  # (N,) uint64 ``identity()``, when the sampler computed it while drawing

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def slice(self, lo: int, hi: int) -> ChoiceArrays:
        """Strategies lo..hi-1, as views (no copy)."""
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        return ChoiceArrays(
            offsets=self.offsets[lo : hi + 1] - a,
            entry=None if self.entry is None else self.entry[a:b],
            ids=None if self.ids is None else self.ids[lo:hi],
            **{k: getattr(self, k)[a:b] for k in COLUMNS},
        )

    def take(self, index: np.ndarray) -> ChoiceArrays:
        """Strategies ``index`` (in that order)."""
        index = np.asarray(index, dtype=np.int64)
        lo, hi = self.offsets[index], self.offsets[index + 1]
        counts = hi - lo
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        rows = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(lo - offsets[:-1], counts)
        return ChoiceArrays(
            offsets=offsets,
            entry=None if self.entry is None else self.entry[rows],
            ids=None if self.ids is None else self.ids[index],
            **{k: getattr(self, k)[rows] for k in COLUMNS},
        )

    @staticmethod
    def concat(parts: list[ChoiceArrays]) -> ChoiceArrays:
        if len(parts) == 1:
            return parts[0]
        offs = [parts[0].offsets]
        for p in parts[1:]:
            offs.append(p.offsets[1:] + offs[-1][-1])
        entries = [p.entry for p in parts]
        ids = [p.ids for p in parts]
        return ChoiceArrays(
            offsets=np.concatenate(offs),
            entry=None if any(e is None for e in entries) else np.concatenate(entries),  # type: ignore[arg-type]
            ids=None if any(i is None for i in ids) else np.concatenate(ids),  # type: ignore[arg-type]
            **{k: np.concatenate([getattr(p, k) for p in parts]) for k in COLUMNS},
        )

    @staticmethod
    def of_batch(batch: StrategyBatch) -> ChoiceArrays:
        """The choice arrays of an encoded StrategyBatch (staleness is dropped: samplers draw 0)."""
        return ChoiceArrays(batch.offsets, *(getattr(batch, k) for k in COLUMNS))

    def identity(self) -> np.ndarray:
        """(N,) uint64 content hash per strategy: equal choices, equal hash (strategy_key's meaning,
        for strategies without staleness or plan); different ones differ up to a 64-bit collision.
        The sampler's arrays carry it (``ids``, hashed while each strategy's rows were in cache)."""
        from search.samplers.kernels import identity_rows

        if self.ids is not None:
            return self.ids
        if self.size == 0:
            return np.zeros(0, dtype=np.uint64)
        return identity_rows(self.offsets, *(np.asarray(getattr(self, k)) for k in COLUMNS))

    def strategy(self, space: Space, i: int, name: str = "") -> Strategy:
        """Strategy ``i`` as an object (shared frozen synchronisers, as ``partial.assemble``)."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        cols = {k: getattr(self, k)[lo:hi].tolist() for k in COLUMNS}
        servers = space.servers
        variables = []
        r = 0
        n = hi - lo
        while r < n:
            vi, k = cols["variable"][r], cols["num_shards"][r]
            syncs: list[Synchronizer] = []
            for q in range(r, r + k):
                if cols["is_ps"][q]:
                    syncs.append(_ps(servers[cols["server"][q]], bool(cols["local_replication"][q])))
                else:
                    kind = COMPRESSORS[cols["compressor"][q]]
                    comp = _compressor(kind, cols["rank"][q] if kind == "powersgd" else None)
                    syncs.append(_collective(cols["group"][q], comp, ALGORITHMS[cols["algorithm"][q]]))
            variables.append(
                VariableStrategy.model_construct(
                    variable=space.variables[vi].name,
                    partition=_partition(cols["axis"][r], k),
                    shards=tuple(syncs),
                )
            )
            r += k
        return Strategy(
            name=name, model=space.model.name, cluster=space.cluster.name, variables=tuple(variables)
        )

    def batch(self, space: Space) -> StrategyBatch:
        """The analytical scorer's StrategyBatch of these strategies. Sampler rows (with their
        ``entry``) give ``make_sampled_batch``'s batch, whose shard sizes are looked up in the
        space's table on first use (compressed rows computed); others go through make_batch."""
        counts = np.diff(self.offsets)
        ma = model_arrays(space.model)
        if self.entry is None:
            return make_batch(
                ma,
                cluster_arrays(space.cluster),
                strategy=np.repeat(np.arange(self.size), counts),
                staleness=np.zeros(len(self.variable), dtype=np.int64),
                **{k: getattr(self, k) for k in COLUMNS},
            )
        return make_sampled_batch(
            ma,
            cluster_arrays(space.cluster),
            offsets=self.offsets,
            geo=self._geometry(space, ma),
            **{k: getattr(self, k) for k in COLUMNS},
        )

    def _geometry(self, space: Space, ma: ModelArrays) -> LazyGeometry:
        """The rows' ShardGeometry from the space's table, each field gathered on first use."""
        assert self.entry is not None
        table, entry = _tables(space).geo, self.entry
        squeezed = np.flatnonzero(self.compressor != 0)
        part: list[ShardGeometry] = []

        def field(k: str) -> np.ndarray:
            out = getattr(table, k)[entry]
            if squeezed.size:
                if not part:
                    part.append(
                        shard_geometry(ma, *(np.asarray(getattr(self, c))[squeezed] for c in _GEO_CHOICES))
                    )
                out[squeezed] = getattr(part[0], k)
            return out

        return LazyGeometry({k: partial(field, k) for k in _GEO_FIELDS})


class _Columns:
    """The columns a ``sample_arrays`` call fills: allocated once, written by ``kernels.draw_rows``.

    Why: every row is written once, straight into memory that is kept (a 10,000-strategy
    BERT-large draw holds ~10 M rows, ~170 MB; concatenating chunks, or copying them in, wrote
    and paged in each row twice). The columns are sized from the first chunk's rows per strategy
    with a margin (pages never written are never touched) and grow by half when a draw runs over.
    A previous call's left-over strategies (``carry``) are copied in first.
    """

    def __init__(
        self, want: int, chunk: int, dtypes: dict[str, np.dtype], carry: ChoiceArrays | None
    ) -> None:
        extra = 0 if carry is None else carry.size
        self.want = max(want, 1)
        self.dtypes = dtypes
        self.carry = carry
        self.n = 0  # strategies so far
        self.t = 0  # rows so far
        self.cols: dict[str, np.ndarray] = {}
        self.offsets = np.zeros(self.want + chunk + extra + 1, dtype=np.int64)
        self.ids = np.zeros(self.want + chunk + extra, dtype=np.uint64)

    def room(self, rows: int, strategies: int) -> None:
        """Make room for ``rows`` more rows of ``strategies`` more strategies."""
        if not self.cols:
            carry = self.carry
            held = 0 if carry is None else int(carry.offsets[-1])
            cap = int(1.5 * rows / max(strategies, 1) * self.want) + rows + held
            self.cols = {k: np.empty(cap, dtype=dt) for k, dt in self.dtypes.items()}
            if carry is not None and carry.size:
                for k, a in self.cols.items():
                    a[:held] = getattr(carry, k)
                self.offsets[1 : carry.size + 1] = carry.offsets[1:]
                self.ids[: carry.size] = carry.identity()
                self.n, self.t = carry.size, held
        end = self.t + rows
        cap = len(self.cols["variable"])
        if end > cap:
            grown = max(end, cap + cap // 2)
            for k, a in self.cols.items():
                self.cols[k] = np.empty(grown, dtype=a.dtype)
                self.cols[k][: self.t] = a[: self.t]

    def result(self) -> ChoiceArrays | None:
        if self.n == 0:
            return None
        return ChoiceArrays(
            offsets=self.offsets[: self.n + 1],
            ids=self.ids[: self.n],
            **{k: a[: self.t] for k, a in self.cols.items()},
        )


class _Scratch:
    """Buffers a ``sample_arrays`` call reuses chunk after chunk (the uniforms, the layouts): the
    same memory each time, instead of fresh pages to fault in per chunk."""

    def __init__(self) -> None:
        self.bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: int | tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
        size = math.prod(shape) if isinstance(shape, tuple) else shape
        buf = self.bufs.get(name)
        if buf is None or len(buf) < size:
            buf = self.bufs[name] = np.empty(size + size // 4, dtype=dtype)
        return buf[:size].reshape(shape)


class ArraySampler:
    """Draws strategies of ``space`` in chunks, as arrays (module docstring: distribution, seeds).

    ``kind`` 'constrained' uses ``constraints`` (c_lb, c_am, temperature); 'random' draws servers
    and groups uniformly. With a ``memory`` model, strategies that do not fit are dropped (the
    same rule as ``MemoryModel.check``, on arrays) and counted in ``rejected``.
    """

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        memory: MemoryModel | None = None,
        kind: Literal["constrained", "random"] = "constrained",
        constraints: Constraints | None = None,
        prior: Prior = "hierarchical",
        max_rejections_per_strategy: int = 50,
        chunk: int = CHUNK,
    ) -> None:
        if chunk < 1:
            raise ValueError(f"chunk: must be >= 1, got {chunk}")
        if kind not in ("constrained", "random"):
            raise ValueError(f"kind: unknown sampler {kind!r}; expected 'random' or 'constrained'")
        if kind == "random" and constraints is not None:
            raise ValueError("constraints: the random sampler has none")
        if prior not in ("flat", "hierarchical"):
            raise ValueError(f"prior: unknown {prior!r}; expected 'flat' or 'hierarchical'")
        self.space = space
        self.seed = seed
        self.memory = memory
        self.kind = kind
        self.name = kind
        self.constraints = constraints or Constraints()
        self.prior: Prior = prior
        self.max_rejections_per_strategy = max_rejections_per_strategy
        self.chunk = chunk
        self.rejected = 0
        self._chunks = 0
        self._buffer: ChoiceArrays | None = None
        self._t = _tables(space)
        self._algorithms = np.array([ALGORITHMS.index(a) for a in space.config.algorithms], dtype=np.int64)
        self._ranks = np.array(space.config.powersgd_ranks, dtype=np.int64)
        bw = np.asarray(space.server_bandwidth, dtype=np.float64)
        self._share = bw / bw.sum()
        # Narrow column types (a 10,000-strategy BERT-large draw keeps ~10 M rows: each byte per
        # row is ~10 MB to write, page in and read back), the same for every ordinary space so
        # that the compiled kernel has one signature (``search.samplers.warm`` compiles it once
        # for the service's forked jobs); a wider type only where a value would not fit.
        cfg = space.config
        self._dtypes: dict[str, np.dtype] = {
            "variable": np.dtype(np.int16 if len(space.variables) < 2**15 else np.int32),
            "axis": np.dtype(np.int8),
            "num_shards": _int_type(int(self._t.lay_k.max())),
            "shard_index": _int_type(int(self._t.lay_k.max())),
            "is_ps": np.dtype(np.bool_),
            "server": _int_type(len(space.servers)),
            "local_replication": np.dtype(np.bool_),
            "group": _int_type(cfg.max_groups),
            "algorithm": np.dtype(np.int8),
            "compressor": np.dtype(np.int8),
            "rank": _int_type(max(cfg.powersgd_ranks, default=0)),
            "entry": np.dtype(np.uint16 if len(self._t.msg) <= 2**16 else np.int32),
        }

    # ------------------------------------------------------------------ public
    def sample_arrays(self, n: int) -> ChoiceArrays:
        """The next ``n`` strategies (feasible ones when a memory model is set), as arrays."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        carry = self._buffer
        if carry is not None and carry.size >= n:
            self._buffer = carry.slice(n, carry.size) if carry.size > n else None
            return carry.slice(0, n) if carry.size > n else carry
        out = _Columns(n, self.chunk, self._dtypes, carry)
        scratch = _Scratch()
        drawn = 0
        while out.n < n:
            rejected = self._draw_chunk(np.random.default_rng([self.seed, self._chunks, 0x5A]), out, scratch)
            self._chunks += 1
            drawn += self.chunk
            if self.memory is not None:
                self.rejected += rejected
                if out.n < n and drawn > self.max_rejections_per_strategy * max(n, 1) + self.chunk:
                    raise InfeasibleSpaceError(f"{drawn - out.n} infeasible draws for {out.n}/{n} strategies")
        every = out.result()
        if every is None or every.size == 0:
            self._buffer = None
            return ChoiceArrays(np.zeros(1, dtype=np.int64), *(np.zeros(0, dtype=np.int64) for _ in COLUMNS))
        self._buffer = every.slice(n, every.size) if every.size > n else None
        return every.slice(0, n) if every.size > n else every

    def sample(self, n: int) -> list[Strategy]:
        """The next ``n`` strategies as Strategy objects (decoded from the arrays)."""
        arrays = self.sample_arrays(n)
        return [arrays.strategy(self.space, i) for i in range(arrays.size)]

    # ------------------------------------------------------------------ drawing
    def _draw_chunk(self, rng: np.random.Generator, out: _Columns, scratch: _Scratch) -> int:
        """One chunk of strategies, appended to ``out`` (those that fit, with a memory model);
        returns how many did not fit.

        The uniforms are drawn with numpy, in a fixed order and shape (the stream), into
        ``scratch``'s buffers; the rules that turn them into choices run compiled
        (``search.samplers.kernels``): the layouts, a pass for the chunk's PS count (Algorithm 1's
        uniforms) and Algorithm 2's running bytes, then ``draw_rows``, strategy by strategy, into
        ``out``.
        """
        from search.samplers import kernels  # numba: imported on first use

        t, cfg = self._t, self.space.config
        b, v = self.chunk, len(t.whole)
        kinds = cfg.compressors
        if self.prior == "hierarchical":
            p = rng.random((3, b), dtype=np.float32)
            kw = rng.standard_exponential((b, len(kinds)))
            aw = rng.standard_exponential((b, len(cfg.algorithms)))
        else:
            p = np.full((3, b), 0.5, dtype=np.float32)
            kw = np.ones((b, len(kinds)))
            aw = np.ones((b, len(cfg.algorithms)))
        u_groups = rng.random(b)
        uv = rng.random(dtype=np.float32, out=scratch.get("uv", (3, b, v), np.float32))
        lay = scratch.get("lay", b * v, np.int64)
        offsets = kernels.layouts(
            p[0], uv, t.n_axes, t.n_axes_f, t.last_axis, t.kmax_tab, t.base, t.whole, t.lay_k, lay
        )
        rows_total = int(offsets[-1])

        def uniforms(name: str, dtype: type[np.floating] = np.float32, size: int = rows_total) -> np.ndarray:
            return rng.random(dtype=dtype, out=scratch.get(name, size, dtype))

        u_ps = uniforms("u_ps")
        u_lr = uniforms("u_lr")
        no_u = np.zeros(0, dtype=np.float32)
        # compressor: a kind among those the shard accepts (weights restricted to them), then a
        # PowerSGD rank uniformly among those allowed (``partial._pick``)
        squeeze = len(kinds) > 1
        u_kind = uniforms("u_kind") if squeeze else no_u
        u_rank = uniforms("u_rank") if squeeze else no_u
        kind_col = np.array([kinds.index(k) if k in kinds else -1 for k in COMPRESSORS], dtype=np.int64)
        # algorithm by weight (``partial._choose``: the first whose cumulative weight exceeds u)
        if len(cfg.algorithms) > 1:
            frac = (np.cumsum(aw, axis=1) / aw.sum(axis=1, keepdims=True))[:, :-1].astype(np.float32)
            u_alg = uniforms("u_alg")
        else:
            frac, u_alg = np.zeros((b, 0), dtype=np.float32), no_u
        constrained = self.kind == "constrained"
        balance = constrained and self.constraints.load_balance
        merge = constrained and self.constraints.adjacent_merge
        # the chunk's PS rows, and Algorithm 2's running bytes where each strategy starts
        merge_start = scratch.get("merge_start", b, np.float64)
        n_ps = kernels.prepass(lay, offsets, v, t.lay_k, t.lay_start, p[1], u_ps, t.msg, merge_start)
        # Algorithm 1: one uniform per PS row, used strategy after strategy in size order;
        # random placement: one per row
        u_server = uniforms("u_server", np.float64, n_ps if balance else rows_total)
        u_group = no_u if merge else uniforms("u_group", np.float64)
        mm = self.memory
        if mm is not None:
            nodes = self.space.cluster.nodes
            cap = np.array([mm.host_capacity_of(node.name) for node in nodes], dtype=np.float64)
            memory = (float(mm.state_factor), float(mm.headroom()), cap)
        else:
            memory = (0.0, 0.0, np.zeros(len(self._share)))
        out.room(rows_total, b)
        cols = tuple(out.cols[k] for k in (*COLUMNS, "entry"))
        out.n, out.t, rejected = kernels.draw_rows(
            lay,
            offsets,
            v,
            t.lay_axis,
            t.lay_k,
            t.lay_start,
            p[1],
            p[2],
            u_ps,
            u_lr,
            kind_col,
            kw,
            u_kind,
            u_rank,
            t.fp16,
            t.min_side,
            self._ranks,
            self._algorithms,
            frac,
            u_alg,
            u_groups,
            cfg.max_groups,
            balance,
            u_server,
            self._share,
            float(self.constraints.temperature),
            t.msg,
            t.brank,
            merge,
            merge_start,
            u_group,
            mm is not None,
            t.param,
            t.model_bytes,
            *memory,
            t.heads,
            cols,
            out.offsets,
            out.ids,
            out.n,
            out.t,
        )
        return int(rejected)

    def _load_balance(
        self,
        rng: np.random.Generator,
        offsets: np.ndarray,
        is_ps: np.ndarray,
        entry: np.ndarray,
    ) -> np.ndarray:
        """Algorithm 1 for every strategy of given rows (``kernels.load_balance_rows``: the sizes'
        order and the placement ``draw_rows`` runs): one uniform per PS row, used strategy after
        strategy in (size descending, row) order; ``entry`` is each row's shard in the tables."""
        from search.samplers.kernels import load_balance_rows  # numba: imported on first use

        u = rng.random(int(np.count_nonzero(is_ps)))
        t = self._t
        return load_balance_rows(
            np.asarray(offsets, dtype=np.int64),
            np.asarray(is_ps, dtype=bool),
            np.asarray(entry, dtype=np.int64),
            t.msg,
            t.brank,
            u,
            self._share,
            float(self.constraints.temperature),
        )

    def _fits_rows(
        self,
        offsets: np.ndarray,
        entry: np.ndarray,
        is_ps: np.ndarray,
        server: np.ndarray,
        compressor: np.ndarray,
    ) -> np.ndarray:
        """Per strategy: fits in device and PS-host memory (``MemoryModel.check``'s rule):
        optimizer state of collective shards and PowerSGD buffers within the device headroom, and
        per PS server its shards x (2 + state factor) within its usable host memory
        (``kernels.fits_rows``; every strategy holds each variable's bytes once, so its
        collective bytes are the model's parameter bytes less its PS bytes)."""
        from search.samplers.kernels import fits_rows

        mm = self.memory
        assert mm is not None
        nodes = self.space.cluster.nodes
        cap = np.array([mm.host_capacity_of(node.name) for node in nodes], dtype=np.float64)
        return fits_rows(
            offsets,
            entry,
            np.asarray(is_ps, dtype=bool),
            server,
            compressor,
            self._t.param,
            self._t.model_bytes,
            float(mm.state_factor),
            float(mm.headroom()),
            cap,
        )

    def _fits(self, chunk: ChoiceArrays) -> np.ndarray:
        """Per strategy: fits in device and PS-host memory (``MemoryModel.check``'s rule)."""
        t = self._t
        entry = _layout_entry(t, chunk.variable, chunk.axis, chunk.num_shards) + chunk.shard_index
        return self._fits_rows(
            chunk.offsets, entry, chunk.is_ps, chunk.server.astype(np.int16), chunk.compressor.astype(np.int8)
        )


def _int_type(top: int) -> np.dtype:
    """The narrowest signed integer type holding -1..top."""
    return np.dtype(np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32)


def _layout_entry(t: _Tables, variable: np.ndarray, axis: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Shard-table index of shard 0 of each row's layout."""
    a_i = np.argmax(t.axis_tab[variable] == axis[:, None], axis=1)
    lay = np.where(k > 1, t.base[variable, a_i] + k - 2, t.whole[variable])
    return t.lay_start[lay]


def _adjacent_merge(offsets: np.ndarray, cc: np.ndarray, msg: np.ndarray, n_groups: np.ndarray) -> np.ndarray:
    """Algorithm 2 for every strategy (``kernels.adjacent_merge_rows``, compiled): collective
    shards in back-propagation order (the reverse of row order), a group closes at the first shard
    where its bytes so far reach total / N. -1 on PS rows."""
    from search.samplers.kernels import adjacent_merge_rows

    return adjacent_merge_rows(
        np.asarray(offsets, dtype=np.int64),
        np.asarray(cc, dtype=bool),
        np.asarray(msg, dtype=np.float64),
        np.asarray(n_groups, dtype=np.int64),
    )
