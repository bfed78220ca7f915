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
stream); the rules above turn them into rows in compiled loops (``search.samplers.kernels``,
numba): the layouts, one pass over the rows for the per-shard choices, Algorithm 1 strategy by
strategy (it is sequential within a strategy: each shard's server depends on the loads the larger
ones left), Algorithm 2 and the memory check. Shard sizes in Algorithm 1 are pre-divided by the
softmax unit (temperature x the strategy's mean PS shard) so that the logits need no division;
Algorithm 2's boundaries come from one cumulative sum over the chunk's collective rows in reverse
row order. Both give the same result as the scalar functions on the same shards and uniforms
(tests/search/test_round.py), up to float rounding: a draw can differ only where its uniform
falls within rounding of a cumulative-weight boundary, or at exact ties of non-integer byte
counts. The compiled loops replaced numpy versions (a lockstep over the chunk's strategies for
Algorithm 1) draw for draw: every column of the same seeds' draws is equal (issue 16).

Each row keeps its ``entry`` in the space's shard table, so the scorer's shard sizes are table
lookups (``ChoiceArrays.batch``) and the memory check sums PS bytes only (a strategy's collective
bytes are the model's bytes less its PS bytes).

Reproducibility: chunk c of a sampler seeded s uses ``np.random.default_rng([s, c, 0x5A])``
(``chunk`` strategies per chunk, whatever n is asked), so the same seed and chunk size give the
same strategies, and ``sample_arrays(a)`` then ``sample_arrays(b)`` equals ``sample_arrays(a + b)``
of a fresh sampler. A round uses chunk = min(CHUNK, M), so a small round draws little more than M. The stream differs from the object samplers' (they draw strategy by strategy): the
round's object path (the reference) decodes this sampler's draws, so both paths see the same M.
"""

from __future__ import annotations

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
    model_bytes: float  # parameter bytes of the whole model (every strategy's shards sum to it)


@lru_cache(maxsize=16)
def _tables(space: Space) -> _Tables:
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
        model_bytes=float(param[start[whole]].sum()),
    )


@dataclass(frozen=True, eq=False)
class ChoiceArrays:
    """N strategies as per-shard choice rows (grouped by strategy, variables in forward order).

    ``offsets`` (N+1,) int64; every column of ``COLUMNS`` (T,), small integer types or bool
    (a 10,000-strategy BERT-large round holds ~10 M rows); ``server`` is a node index (-1 for
    collective rows), ``group`` -1 for PS rows. ``batch()`` is the scorer's StrategyBatch of
    them, ``strategy(space, i)`` one Strategy object, ``identity()`` a content hash per strategy.
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

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def slice(self, lo: int, hi: int) -> ChoiceArrays:
        """Strategies lo..hi-1, as views (no copy)."""
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        return ChoiceArrays(
            offsets=self.offsets[lo : hi + 1] - a,
            entry=None if self.entry is None else self.entry[a:b],
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
        return ChoiceArrays(
            offsets=np.concatenate(offs),
            entry=None if any(e is None for e in entries) else np.concatenate(entries),  # type: ignore[arg-type]
            **{k: np.concatenate([getattr(p, k) for p in parts]) for k in COLUMNS},
        )

    @staticmethod
    def of_batch(batch: StrategyBatch) -> ChoiceArrays:
        """The choice arrays of an encoded StrategyBatch (staleness is dropped: samplers draw 0)."""
        return ChoiceArrays(batch.offsets, *(getattr(batch, k) for k in COLUMNS))

    def identity(self) -> np.ndarray:
        """(N,) uint64 content hash per strategy: equal choices, equal hash (strategy_key's meaning,
        for strategies without staleness or plan); different ones differ up to a 64-bit collision."""
        from search.samplers.kernels import identity_rows

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


class _Appended:
    """ChoiceArrays parts copied, as they come, into columns allocated once (``sample_arrays``).

    Why: concatenating the chunks at the end writes every row twice, into fresh memory each time
    (a 10,000-strategy BERT-large draw holds ~10 M rows, ~230 MB: the copy and its page faults
    took ~0.3 s of CPU). Here each row is copied once, into memory that is kept; the columns are
    sized from the first part's rows per strategy with a margin (pages never written are never
    touched) and grow by half when a draw runs over.
    """

    def __init__(self, strategies: int, dtypes: dict[str, type[np.signedinteger]] | None = None) -> None:
        self.want = max(strategies, 1)
        self.dtypes = dtypes or {}  # narrower column types than the parts' (values must fit)
        self.n = 0  # strategies so far
        self.t = 0  # rows so far
        self.cols: dict[str, np.ndarray] = {}
        self.entry = True  # every part so far carries its entries
        self.offsets = np.zeros(self.want + 1, dtype=np.int64)

    def add(self, part: ChoiceArrays) -> None:
        if part.size == 0:
            return
        rows = int(part.offsets[-1])
        self.entry &= part.entry is not None
        if not self.cols:
            cap = int(1.5 * rows / part.size * max(self.want, part.size)) + rows
            names = (*COLUMNS, "entry") if part.entry is not None else COLUMNS
            self.cols = {k: np.empty(cap, dtype=self.dtypes.get(k, getattr(part, k).dtype)) for k in names}
        end = self.t + rows
        cap = len(self.cols["variable"])
        if end > cap:
            grown = max(end, cap + cap // 2)
            for k, a in self.cols.items():
                self.cols[k] = np.empty(grown, dtype=a.dtype)
                self.cols[k][: self.t] = a[: self.t]
        for k, a in self.cols.items():
            value = getattr(part, k)
            if value is not None:
                a[self.t : end] = value
        if self.n + part.size + 1 > len(self.offsets):
            self.offsets = np.concatenate((self.offsets, np.zeros(self.n + part.size + 1, dtype=np.int64)))
        self.offsets[self.n + 1 : self.n + part.size + 1] = part.offsets[1:] + self.t
        self.n += part.size
        self.t = end

    def result(self) -> ChoiceArrays | None:
        if self.n == 0:
            return None
        entry = self.cols.get("entry")
        return ChoiceArrays(
            offsets=self.offsets[: self.n + 1],
            entry=entry[: self.t] if entry is not None and self.entry else None,
            **{k: self.cols[k][: self.t] for k in COLUMNS},
        )


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
        # The narrowest signed type of the kept columns (a 10,000-strategy BERT-large draw keeps
        # ~10 M rows: each byte per row is ~10 MB to write, page in and read back). Only the kept
        # copy is narrowed (``_Appended``): the draws' own temporaries keep their types, whose
        # sizes glibc's allocator reuses well (narrowing them too doubled the page faults).
        cfg = space.config
        self._dtypes: dict[str, type[np.signedinteger]] = {
            "variable": _int_type(len(space.variables)),
            "num_shards": _int_type(int(self._t.lay_k.max())),
            "shard_index": _int_type(int(self._t.lay_k.max())),
            "server": _int_type(len(space.servers)),
            "group": _int_type(cfg.max_groups),
            "rank": _int_type(max(cfg.powersgd_ranks, default=0)),
        }

    # ------------------------------------------------------------------ public
    def sample_arrays(self, n: int) -> ChoiceArrays:
        """The next ``n`` strategies (feasible ones when a memory model is set), as arrays."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        parts = _Appended(n, self._dtypes)
        if self._buffer is not None:
            parts.add(self._buffer)
        have = 0 if self._buffer is None else self._buffer.size
        drawn = 0
        while have < n:
            chunk, ok = self._draw_chunk(np.random.default_rng([self.seed, self._chunks, 0x5A]))
            self._chunks += 1
            drawn += self.chunk
            if ok is not None:
                self.rejected += int((~ok).sum())
                if not ok.all():
                    chunk = chunk.take(np.flatnonzero(ok))
                if (
                    have + chunk.size < n
                    and drawn > self.max_rejections_per_strategy * max(n, 1) + self.chunk
                ):
                    raise InfeasibleSpaceError(
                        f"{drawn - have - chunk.size} infeasible draws for {have + chunk.size}/{n} strategies"
                    )
            parts.add(chunk)
            have += chunk.size
        every = parts.result()
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
    def _draw_chunk(self, rng: np.random.Generator) -> tuple[ChoiceArrays, np.ndarray | None]:
        """One chunk of strategies, and (with a memory model) whether each fits.

        The uniforms are drawn with numpy, in a fixed order and shape (the stream); the rules that
        turn them into choices run compiled (``search.samplers.kernels``), one pass over the rows.
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
        uv = rng.random((3, b, v), dtype=np.float32)
        lay, offsets = kernels.layouts(
            p[0], uv, t.n_axes, t.n_axes_f, t.last_axis, t.kmax_tab, t.base, t.whole, t.lay_k
        )
        rows_total = int(offsets[-1])
        u_ps = rng.random(rows_total, dtype=np.float32)
        u_lr = rng.random(rows_total, dtype=np.float32)
        no_u = np.zeros(0, dtype=np.float32)
        # compressor: a kind among those the shard accepts (weights restricted to them), then a
        # PowerSGD rank uniformly among those allowed (``partial._pick``)
        squeeze = len(kinds) > 1
        u_kind = rng.random(rows_total, dtype=np.float32) if squeeze else no_u
        u_rank = rng.random(rows_total, dtype=np.float32) if squeeze else no_u
        kind_col = np.array([kinds.index(k) if k in kinds else -1 for k in COMPRESSORS], dtype=np.int64)
        # algorithm by weight (``partial._choose``: the first whose cumulative weight exceeds u)
        if len(cfg.algorithms) > 1:
            frac = (np.cumsum(aw, axis=1) / aw.sum(axis=1, keepdims=True))[:, :-1].astype(np.float32)
            u_alg = rng.random(rows_total, dtype=np.float32)
        else:
            frac, u_alg = np.zeros((b, 0), dtype=np.float32), no_u
        (
            row_draw,
            variable,
            axis,
            num_shards,
            shard_index,
            entry,
            is_ps,
            lr,
            compressor,
            rank,
            algorithm,
            n_cc,
        ) = kernels.choice_rows(
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
        )
        n_groups = 1 + (u_groups * np.maximum(1, np.minimum(cfg.max_groups, n_cc))).astype(np.int64)
        if self.kind == "constrained" and self.constraints.load_balance:
            server = self._load_balance(rng, row_draw, is_ps, entry)  # -1: collective
        else:
            server = (rng.random(rows_total) * len(self.space.servers)).astype(np.int16)
            server[~is_ps] = -1
        if self.kind == "constrained" and self.constraints.adjacent_merge:
            group = _adjacent_merge(offsets, ~is_ps, t.msg[entry], n_groups)  # -1: PS
        else:
            ng = np.repeat(n_groups, np.diff(offsets))
            group = np.minimum((rng.random(rows_total) * ng).astype(np.int64), ng - 1).astype(np.int16)
            group[is_ps] = -1
        fits = None
        if self.memory is not None:
            fits = self._fits_rows(offsets, entry, is_ps, server, compressor)
        arrays = ChoiceArrays(
            offsets=offsets,
            variable=variable,
            axis=axis,
            num_shards=num_shards,
            shard_index=shard_index,
            is_ps=is_ps,
            server=server,
            local_replication=lr,
            group=group,
            algorithm=algorithm,
            compressor=compressor,
            rank=rank,
            entry=entry,
        )
        return arrays, fits

    def _load_balance(
        self,
        rng: np.random.Generator,
        row_draw: np.ndarray,
        is_ps: np.ndarray,
        entry: np.ndarray,
    ) -> np.ndarray:
        """Algorithm 1 for every strategy of the chunk (``kernels.load_balance_rows``, compiled):
        one uniform per PS row, used per strategy in (size descending, row) order. Rows are
        grouped by strategy (``row_draw``); ``entry`` is each row's shard in the space's tables."""
        from search.samplers.kernels import load_balance_rows  # numba: imported on first use

        u = rng.random(int(np.count_nonzero(is_ps)))
        bw = np.asarray(self.space.server_bandwidth, dtype=np.float64)
        t = self._t
        return load_balance_rows(
            row_draw, is_ps, entry, t.msg, t.brank, u, bw / bw.sum(), float(self.constraints.temperature)
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


def _int_type(top: int) -> type[np.signedinteger]:
    """The narrowest signed integer type holding -1..top."""
    return np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32


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
