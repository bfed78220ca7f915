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

Algorithm 1 is sequential within a strategy; it runs in lockstep over the chunk's strategies
(step t places every strategy's t-th largest PS shard). Algorithm 2 jumps from group start to
group start with one searchsorted per group over the chunk. Both give the same result as the
scalar functions on the same shards and uniforms (tests/search/test_round_arrays.py), up to float
rounding at exact ties of non-integer byte counts.

Reproducibility: chunk c of a sampler seeded s uses ``np.random.default_rng([s, c, 0x5A])``
(``chunk`` strategies per chunk, whatever n is asked), so the same seed and chunk size give the
same strategies, and ``sample_arrays(a)`` then ``sample_arrays(b)`` equals ``sample_arrays(a + b)``
of a fresh sampler. A round uses chunk = min(CHUNK, M), so a small round draws little more than M. The stream differs from the object samplers' (they draw strategy by strategy): the
round's object path (the reference) decodes this sampler's draws, so both paths see the same M.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from search.feasibility import GB, MemoryModel
from search.samplers.base import InfeasibleSpaceError
from search.samplers.constrained import Constraints
from search.samplers.partial import Prior, _collective, _partition, _ps
from search.space import Space
from simulator.analytical import StrategyBatch, cluster_arrays, model_arrays
from simulator.analytical.arrays import ALGORITHMS, COMPRESSORS
from simulator.analytical.batch import make_batch
from simulator.spec import DTYPE_BYTES, Compressor, Strategy, Synchronizer, VariableStrategy

#: Strategies drawn per chunk (one generator per chunk).
CHUNK = 2048
#: The per-row choice columns a ChoiceArrays holds (``make_batch``'s, less strategy and staleness).
COLUMNS = (
    "variable",
    "axis",
    "num_shards",
    "shard_index",
    "is_ps",
    "server",
    "local_replication",
    "group",
    "algorithm",
    "compressor",
    "rank",
)


#: Multipliers of the identity hash's column mix (odd 64-bit constants).
_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)


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
    return _Tables(
        n_axes=n_axes,
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

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def take(self, index: np.ndarray) -> ChoiceArrays:
        """Strategies ``index`` (in that order)."""
        index = np.asarray(index, dtype=np.int64)
        lo, hi = self.offsets[index], self.offsets[index + 1]
        counts = hi - lo
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        rows = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(lo - offsets[:-1], counts)
        return ChoiceArrays(offsets, *(getattr(self, k)[rows] for k in COLUMNS))

    @staticmethod
    def concat(parts: list[ChoiceArrays]) -> ChoiceArrays:
        if len(parts) == 1:
            return parts[0]
        offs = [parts[0].offsets]
        for p in parts[1:]:
            offs.append(p.offsets[1:] + offs[-1][-1])
        return ChoiceArrays(
            np.concatenate(offs), *(np.concatenate([getattr(p, k) for p in parts]) for k in COLUMNS)
        )

    @staticmethod
    def of_batch(batch: StrategyBatch) -> ChoiceArrays:
        """The choice arrays of an encoded StrategyBatch (staleness is dropped: samplers draw 0)."""
        return ChoiceArrays(batch.offsets, *(getattr(batch, k) for k in COLUMNS))

    def identity(self) -> np.ndarray:
        """(N,) uint64 content hash per strategy: equal choices, equal hash (strategy_key's meaning,
        for strategies without staleness or plan); different ones differ up to a 64-bit collision."""
        if self.size == 0:
            return np.zeros(0, dtype=np.uint64)
        x = np.zeros(len(self.variable), dtype=np.uint64)
        for i, k in enumerate(COLUMNS):
            x = x * np.uint64(_MIX[i % len(_MIX)]) + (
                np.asarray(getattr(self, k), dtype=np.int64) + 2
            ).astype(np.uint64)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
        return np.add.reduceat(x, self.offsets[:-1])

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
        """The analytical scorer's StrategyBatch of these strategies."""
        counts = np.diff(self.offsets)
        return make_batch(
            model_arrays(space.model),
            cluster_arrays(space.cluster),
            strategy=np.repeat(np.arange(self.size), counts),
            staleness=np.zeros(len(self.variable), dtype=np.int64),
            **{k: getattr(self, k) for k in COLUMNS},
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

    # ------------------------------------------------------------------ public
    def sample_arrays(self, n: int) -> ChoiceArrays:
        """The next ``n`` strategies (feasible ones when a memory model is set), as arrays."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        parts = [] if self._buffer is None else [self._buffer]
        have = 0 if self._buffer is None else self._buffer.size
        drawn = 0
        while have < n:
            chunk = self._draw_chunk(np.random.default_rng([self.seed, self._chunks, 0x5A]))
            self._chunks += 1
            drawn += self.chunk
            if self.memory is not None:
                ok = self._fits(chunk)
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
            parts.append(chunk)
            have += chunk.size
        every = ChoiceArrays.concat(parts) if parts else None
        if every is None or every.size == 0:
            self._buffer = None
            return ChoiceArrays(np.zeros(1, dtype=np.int64), *(np.zeros(0, dtype=np.int64) for _ in COLUMNS))
        self._buffer = every.take(np.arange(n, every.size)) if every.size > n else None
        return every.take(np.arange(n)) if every.size > n else every

    def sample(self, n: int) -> list[Strategy]:
        """The next ``n`` strategies as Strategy objects (decoded from the arrays)."""
        arrays = self.sample_arrays(n)
        return [arrays.strategy(self.space, i) for i in range(arrays.size)]

    # ------------------------------------------------------------------ drawing
    def _draw_chunk(self, rng: np.random.Generator) -> ChoiceArrays:
        t, cfg = self._t, self.space.config
        b, v = self.chunk, len(t.whole)
        kinds = cfg.compressors
        if self.prior == "hierarchical":
            p = rng.random((b, 3))
            kw = rng.standard_exponential((b, len(kinds)))
            aw = rng.standard_exponential((b, len(cfg.algorithms)))
        else:
            p = np.full((b, 3), 0.5)
            kw = np.ones((b, len(kinds)))
            aw = np.ones((b, len(cfg.algorithms)))
        u_groups = rng.random(b)
        uv = rng.random((b, v, 3), dtype=np.float32)
        split = (t.n_axes > 0)[None, :] & (uv[..., 0] < p[:, 0:1])
        a_i = np.minimum((uv[..., 1] * np.maximum(t.n_axes, 1)).astype(np.int64), np.maximum(t.n_axes - 1, 0))
        vidx = np.arange(v)[None, :]
        kmax = t.kmax_tab[vidx, a_i]
        k = 2 + np.minimum((uv[..., 2] * (kmax - 1)).astype(np.int64), kmax - 2)
        lay = np.where(split, t.base[vidx, a_i] + k - 2, t.whole[None, :]).ravel()
        counts = t.lay_k[lay]
        rows_total = int(counts.sum())
        seg = np.repeat(np.arange(b * v, dtype=np.int64), counts)
        seg_start = np.cumsum(counts) - counts
        shard_index = np.arange(rows_total, dtype=np.int64) - seg_start[seg]
        entry = t.lay_start[lay][seg] + shard_index
        row_draw = seg // v
        variable = seg - row_draw * v
        ur = rng.random((rows_total, 4), dtype=np.float32)
        is_ps = ur[:, 0] < p[row_draw, 1]
        lr = is_ps & (ur[:, 1] < p[row_draw, 2])
        cc = ~is_ps
        # compressor: a kind among those the shard accepts, then an option of that kind
        compressor = np.zeros(rows_total, dtype=np.int64)
        rank = np.zeros(rows_total, dtype=np.int64)
        if len(kinds) > 1:
            compressor, rank = self._compressors(kinds, kw, entry, row_draw, ur, cc)
        # algorithm by weight
        if len(cfg.algorithms) > 1:
            cum = np.cumsum(aw, axis=1)
            target = ur[:, 2] * cum[row_draw, -1]
            alg_i = (target[:, None] >= cum[row_draw]).sum(axis=1)
            algorithm = self._algorithms[np.minimum(alg_i, len(cfg.algorithms) - 1)]
        else:
            algorithm = np.full(rows_total, self._algorithms[0])
        algorithm = np.where(cc, algorithm, 0)
        offsets = np.concatenate(([0], np.cumsum(counts.reshape(b, v).sum(axis=1)))).astype(np.int64)
        n_cc = np.bincount(row_draw, weights=cc, minlength=b).astype(np.int64)
        n_groups = 1 + (u_groups * np.maximum(1, np.minimum(cfg.max_groups, n_cc))).astype(np.int64)
        if self.kind == "constrained" and self.constraints.load_balance:
            server = self._load_balance(rng, offsets, is_ps, t.msg[entry], t.brank[entry])
        else:
            server = (rng.random(rows_total) * len(self.space.servers)).astype(np.int64)
        server = np.where(is_ps, server, -1)
        if self.kind == "constrained" and self.constraints.adjacent_merge:
            group = _adjacent_merge(offsets, cc, t.msg[entry], n_groups)
        else:
            group = np.minimum(
                (rng.random(rows_total) * n_groups[row_draw]).astype(np.int64), n_groups[row_draw] - 1
            )
        group = np.where(cc, group, -1)
        return ChoiceArrays(
            offsets=offsets,
            variable=variable.astype(np.int32),
            axis=t.lay_axis[lay][seg].astype(np.int8),
            num_shards=t.lay_k[lay][seg].astype(np.int16),
            shard_index=shard_index.astype(np.int16),
            is_ps=is_ps,
            server=server.astype(np.int16),
            local_replication=lr,
            group=group.astype(np.int16),
            algorithm=algorithm.astype(np.int8),
            compressor=compressor.astype(np.int8),
            rank=rank.astype(np.int16),
        )

    def _compressors(
        self,
        kinds: tuple[str, ...],
        kw: np.ndarray,
        entry: np.ndarray,
        row_draw: np.ndarray,
        ur: np.ndarray,
        cc: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Compressor code and PowerSGD rank per row (``partial._pick`` then a uniform option)."""
        t, cfg = self._t, self.space.config
        n = len(entry)
        weight = {k: kw[row_draw, i] for i, k in enumerate(kinds)}
        zero = np.zeros(n)
        w_none = weight.get("none", zero)
        fp_ok = t.fp16[entry]
        ranks = np.array(cfg.powersgd_ranks, dtype=np.int64)
        allowed = ranks[None, :] < t.min_side[entry][:, None]  # (T, R), config order
        n_ranks = allowed.sum(axis=1)
        ps_ok = n_ranks > 0
        w_fp = np.where(fp_ok, weight.get("fp16", zero), 0.0)
        w_ps = np.where(ps_ok, weight.get("powersgd", zero), 0.0)
        target = ur[:, 1] * (w_none + w_fp + w_ps)
        last = np.where(ps_ok, 2, np.where(fp_ok, 1, 0))  # _pick's fallback: the last kind on offer
        kind = np.where(
            target < w_none, 0, np.where(fp_ok & (target < w_none + w_fp), 1, np.where(ps_ok, 2, last))
        )
        kind = np.where(cc, kind, 0)
        pick = np.minimum((ur[:, 3] * n_ranks).astype(np.int64), np.maximum(n_ranks - 1, 0))
        pos = np.argmax(np.cumsum(allowed, axis=1) > pick[:, None], axis=1)
        rank = np.where(kind == 2, ranks[pos], 0)
        return kind, rank

    def _load_balance(
        self,
        rng: np.random.Generator,
        offsets: np.ndarray,
        is_ps: np.ndarray,
        msg: np.ndarray,
        brank: np.ndarray,
    ) -> np.ndarray:
        """Algorithm 1 for every strategy of the chunk, in lockstep (step t: each t-th largest shard)."""
        b = len(offsets) - 1
        ps_rows = np.flatnonzero(is_ps)
        draw_of = np.searchsorted(offsets, ps_rows, side="right") - 1
        # sort PS rows by (strategy, size descending, row): two stable radix passes
        by_size = np.argsort(brank[ps_rows], kind="stable")
        order = by_size[
            np.argsort(draw_of[by_size].astype(np.int16 if b < 2**15 else np.int64), kind="stable")
        ]
        rows = ps_rows[order]
        sizes = msg[rows]
        n_ps = np.bincount(draw_of, minlength=b)
        start = np.concatenate(([0], np.cumsum(n_ps)[:-1]))
        u = rng.random(len(rows))
        bw = np.asarray(self.space.server_bandwidth, dtype=np.float64)
        share = bw / bw.sum()
        j = len(share)
        temp = self.constraints.temperature
        mean = np.bincount(draw_of, weights=msg[ps_rows], minlength=b) / np.maximum(n_ps, 1)
        # strategies by PS count, descending: the active ones at step t are a prefix
        d_order = np.argsort(-n_ps, kind="stable")
        n_sorted = n_ps[d_order]
        start_s = start[d_order]
        unit_s = mean[d_order] * temp
        loads = np.zeros((b, j))
        total = np.zeros(b)
        out = np.empty(len(rows), dtype=np.int64)
        steps = int(n_sorted[0]) if b else 0
        active = b
        for step in range(steps):
            while active and n_sorted[active - 1] <= step:
                active -= 1
            pos = start_s[:active] + step
            s = sizes[pos]
            ld = loads[:active]
            tot = total[:active]
            lag = tot[:, None] * share[None, :] - ld
            top = lag.max(axis=1, keepdims=True)
            if temp > 0:
                w = np.exp((lag - top) / unit_s[:active, None])
            else:
                w = (lag >= top - 1e-9 * np.maximum(1.0, np.abs(top))).astype(np.float64)
            cum = np.cumsum(w, axis=1)
            target = u[pos] * cum[:, -1]
            pick = np.minimum((cum <= target[:, None]).sum(axis=1), j - 1)
            out[pos] = pick
            ld[np.arange(active), pick] += s
            tot += s
        server = np.full(len(is_ps), -1, dtype=np.int64)
        server[rows] = out
        return server

    def _fits(self, chunk: ChoiceArrays) -> np.ndarray:
        """Per strategy: fits in device and PS-host memory (``MemoryModel.check``'s rule)."""
        mm = self.memory
        assert mm is not None
        n, jn = chunk.size, len(self.space.servers)
        counts = np.diff(chunk.offsets)
        draw = np.repeat(np.arange(n), counts)
        t = self._t
        lay_base = _layout_entry(t, chunk.variable, chunk.axis, chunk.num_shards)
        nbytes = t.param[lay_base + chunk.shard_index]
        cc = ~chunk.is_ps
        device_extra = mm.state_factor * nbytes * cc + nbytes * (cc & (chunk.compressor == 2))
        extra = np.bincount(draw, weights=device_extra, minlength=n)
        ok = extra <= mm.headroom()
        if chunk.is_ps.any():
            ps = chunk.is_ps
            hosted = np.bincount(
                draw[ps] * jn + chunk.server[ps], weights=nbytes[ps], minlength=n * jn
            ).reshape(n, jn)
            cap = np.array(
                [node.host_memory_gb * GB * mm.config.host_usable for node in self.space.cluster.nodes]
            )
            ok &= np.all(hosted * (2.0 + mm.state_factor) <= cap[None, :], axis=1)
        return ok


def _layout_entry(t: _Tables, variable: np.ndarray, axis: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Shard-table index of shard 0 of each row's layout."""
    a_i = np.argmax(t.axis_tab[variable] == axis[:, None], axis=1)
    lay = np.where(k > 1, t.base[variable, a_i] + k - 2, t.whole[variable])
    return t.lay_start[lay]


def _adjacent_merge(offsets: np.ndarray, cc: np.ndarray, msg: np.ndarray, n_groups: np.ndarray) -> np.ndarray:
    """Algorithm 2 for every strategy: collective shards in back-propagation order (the reverse of
    row order), a group closes at the first shard where its bytes so far reach total / N.

    Jumps group start to group start: one searchsorted over the chunk's cumulative bytes per group.
    """
    b = len(offsets) - 1
    cc_rows = np.flatnonzero(cc)[::-1]  # every strategy's collective shards in backprop order
    out = np.full(len(cc), -1, dtype=np.int64)
    if cc_rows.size == 0:
        return out
    draw = np.searchsorted(offsets, cc_rows, side="right") - 1  # non-increasing
    sizes = msg[cc_rows]
    cum = np.concatenate(([0.0], np.cumsum(sizes)))
    # segment of strategy d in the reversed array
    n_cc = np.bincount(draw, minlength=b)
    seg_start = np.zeros(b, dtype=np.int64)
    order = np.arange(b)[::-1]
    seg_start[order] = np.concatenate(([0], np.cumsum(n_cc[order])[:-1]))
    seg_end = seg_start + n_cc
    has = n_cc > 0
    avg = np.where(has, (cum[seg_end] - cum[seg_start]) / np.maximum(n_groups, 1), 0.0)
    mark = np.zeros(len(cc_rows), dtype=np.int64)
    cur = seg_start.copy()
    live = np.flatnonzero(has & (n_groups > 1))
    step = 0
    while live.size:  # boundary number step + 1 of every strategy that may still open a group
        target = cum[cur[live]] + avg[live]
        nxt = np.maximum(np.searchsorted(cum, target, side="left"), cur[live] + 1)
        ok = nxt < seg_end[live]
        live, nxt = live[ok], nxt[ok]
        mark[nxt] = 1
        cur[live] = nxt
        step += 1
        live = live[n_groups[live] - 1 > step]
    before = np.cumsum(mark)  # boundaries at positions <= p (none sits on a segment's start)
    out[cc_rows] = before - before[seg_start[draw]]
    return out
