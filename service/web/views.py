"""What the dashboard shows, computed from domain objects: pure functions, no HTTP and no database.

Kept apart from the page routes so each number a page shows can be tested without a browser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from service import domain as d
from simulator.spec import DTYPE_BYTES, ClusterSpec, CollectiveSync, ModelSpec, PSSync, Strategy
from simulator.spec.strategy import Synchronizer


@dataclass(frozen=True)
class ShardRow:
    """One shard of a variable as the strategy page lists it."""

    index: int
    shape: tuple[int, ...]
    bytes: int
    synchronizer: str  # 'PS' or 'all-reduce' / 'all-gather'
    placement: str  # PS server node, or '' for a collective
    local_replication: bool
    group: int | None
    compressor: str
    algorithm: str


@dataclass(frozen=True)
class VariableRow:
    """A variable with its partition and shards, and how it differs from each baseline."""

    name: str
    shape: tuple[int, ...]
    bytes: int
    sparse: bool
    partition: str  # e.g. 'axis 0 × 4' or 'whole'
    shards: tuple[ShardRow, ...]
    differs_from: tuple[str, ...]  # names of the baselines whose sub-strategy is different


@dataclass(frozen=True)
class LayerRows:
    """The variables of one layer, in forward order."""

    index: int
    name: str
    kind: str
    variables: tuple[VariableRow, ...]


def describe_sync(sync: Synchronizer, sparse: bool) -> tuple[str, str, bool, int | None, str, str]:
    """(synchroniser, placement, local replication, group, compressor, algorithm) of one shard."""
    if isinstance(sync, PSSync):
        return "PS", sync.server, sync.local_replication, None, "none", ""
    comp = (
        sync.compressor.kind
        if sync.compressor.kind != "powersgd"
        else f"powersgd (rank {sync.compressor.rank})"
    )
    return ("all-gather" if sparse else "all-reduce"), "", False, sync.group, comp, sync.algorithm


def _sync_key(sync: Synchronizer) -> tuple[object, ...]:
    """What makes two shard synchronisers the same choice (merge-group ids are compared as given)."""
    if isinstance(sync, PSSync):
        return ("ps", sync.server, sync.local_replication, sync.staleness)
    assert isinstance(sync, CollectiveSync)
    return ("cc", sync.group, sync.compressor.kind, sync.compressor.rank, sync.algorithm)


def strategy_layers(model: ModelSpec, strategy: Strategy, baselines: dict[str, Strategy]) -> list[LayerRows]:
    """Per layer (forward order), per variable: partition, shards and the baselines it differs from."""
    layers: list[LayerRows] = []
    for li, layer in enumerate(model.layers):
        rows: list[VariableRow] = []
        for var in layer.variables:
            vs = strategy.by_variable[var.name]
            shards = []
            for si, (shape, sync) in enumerate(
                zip(vs.partition.shard_shapes(var.shape), vs.shards, strict=True)
            ):
                kind, place, local, group, comp, algo = describe_sync(sync, var.sparse)
                nbytes = math.prod(shape) * DTYPE_BYTES[var.dtype]
                shards.append(ShardRow(si, shape, nbytes, kind, place, local, group, comp, algo))
            mine = (vs.partition, tuple(_sync_key(s) for s in vs.shards))
            differs = tuple(
                name
                for name, base in baselines.items()
                if (
                    base.by_variable[var.name].partition,
                    tuple(_sync_key(s) for s in base.by_variable[var.name].shards),
                )
                != mine
            )
            part = (
                "whole" if vs.partition.shards == 1 else f"axis {vs.partition.axis} × {vs.partition.shards}"
            )
            rows.append(VariableRow(var.name, var.shape, var.bytes, var.sparse, part, tuple(shards), differs))
        if rows:
            layers.append(LayerRows(li, layer.name, layer.kind, tuple(rows)))
    return layers


@dataclass(frozen=True)
class StrategySummary:
    """Counts a person reads first: how much goes through PS vs collectives, how many groups/servers."""

    variables: int
    shards: int
    ps_bytes: int
    collective_bytes: int
    servers: tuple[str, ...]
    groups: int
    compressed_shards: int


def summarize(model: ModelSpec, strategy: Strategy) -> StrategySummary:
    ps_bytes = cc_bytes = compressed = 0
    servers: set[str] = set()
    groups: set[int] = set()
    shards = list(strategy.shards(model))
    for sh in shards:
        if isinstance(sh.sync, PSSync):
            ps_bytes += sh.bytes
            servers.add(sh.sync.server)
        else:
            cc_bytes += sh.bytes
            groups.add(sh.sync.group)
            compressed += sh.sync.compressor.kind != "none"
    return StrategySummary(
        len(model.variables), len(shards), ps_bytes, cc_bytes, tuple(sorted(servers)), len(groups), compressed
    )


def diff_counts(model: ModelSpec, layers: Sequence[LayerRows], baselines: Iterable[str]) -> dict[str, int]:
    """For each baseline, how many variables have a different sub-strategy."""
    out = {b: 0 for b in baselines}
    for layer in layers:
        for v in layer.variables:
            for b in v.differs_from:
                out[b] += 1
    return out


@dataclass(frozen=True)
class BestSoFar:
    """The search page's chart: best measured median over candidate trials, in finishing order."""

    trial_numbers: tuple[int, ...]  # 1, 2, ... over finished candidate trials
    trial_ids: tuple[int, ...]
    measured: tuple[float | None, ...]  # each trial's median (None when it failed)
    best: tuple[float | None, ...]  # running minimum of the medians so far
    baselines: dict[str, float]  # baseline name -> measured median


def best_so_far(trials: Sequence[d.Trial]) -> BestSoFar:
    """Running best over finished candidate trials (ordered by finish time, then id)."""
    done = [t for t in trials if t.baseline is None and t.state in ("succeeded", "failed")]
    done.sort(key=lambda t: (t.finished_at is None, t.finished_at, t.id))
    measured: list[float | None] = []
    best: list[float | None] = []
    cur: float | None = None
    for t in done:
        m = t.median_time if t.state == "succeeded" else None
        measured.append(m)
        if m is not None and (cur is None or m < cur):
            cur = m
        best.append(cur)
    from search.baselines import family_of

    # one line per baseline family: its tuned (fastest measured) member
    baselines: dict[str, float] = {}
    for t in trials:
        if t.baseline is not None and t.state == "succeeded" and t.median_time is not None:
            fam = family_of(t.baseline)
            baselines[fam] = min(baselines.get(fam, t.median_time), t.median_time)
    return BestSoFar(
        tuple(range(1, len(done) + 1)), tuple(t.id for t in done), tuple(measured), tuple(best), baselines
    )


def similarity_to_others(candidates: Sequence[d.Candidate]) -> dict[int, float]:
    """Each candidate's stored similarity to the other picks of its round (as the loop recorded it)."""
    return {c.id: c.similarity for c in candidates}


def cluster_summary(cluster: ClusterSpec) -> str:
    """'4 nodes, 16 GPUs (T4), 50 Gbps' style one-liner."""
    types = sorted({n.device for n in cluster.nodes if n.gpus})
    nics = sorted({n.nic_gbps for n in cluster.nodes})
    return (
        f"{len(cluster.nodes)} nodes, {cluster.num_gpus} GPUs ({', '.join(types)}), "
        f"{'/'.join(f'{b:g}' for b in nics)} Gbps"
    )


@dataclass(frozen=True)
class PredictedVsMeasured:
    """The search page's predicted-vs-measured plot: one point per trial with both, in seconds.

    ``ratio`` is the median over those trials of measured / predicted (1.0: the simulator is right
    on the median; 2.0: trials ran twice as long as predicted); None when no trial has both.
    """

    trial_ids: tuple[int, ...]
    labels: tuple[str, ...]  # 'candidate' or 'baseline <name>'
    predicted: tuple[float, ...]  # s per iteration
    measured: tuple[float, ...]  # median s per iteration
    ratio: float | None

    @property
    def empty(self) -> bool:
        return not self.trial_ids


def predicted_vs_measured(trials: Sequence[d.Trial]) -> PredictedVsMeasured:
    """Every succeeded trial with a prediction and a measured median (baselines included when predicted)."""
    both = [
        t
        for t in sorted(trials, key=lambda t: t.id)
        if t.state == "succeeded" and t.predicted_time and t.median_time is not None
    ]
    ratios = sorted((t.median_time or 0.0) / (t.predicted_time or 1.0) for t in both)
    mid = len(ratios) // 2
    ratio = None if not ratios else ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return PredictedVsMeasured(
        tuple(t.id for t in both),
        tuple(f"baseline {t.baseline}" if t.baseline else "candidate" for t in both),
        tuple(t.predicted_time or 0.0 for t in both),
        tuple(t.median_time or 0.0 for t in both),
        ratio,
    )
