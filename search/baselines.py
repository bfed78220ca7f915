"""Baseline families tuned by measurement (issue 14): which baseline strategies a search measures.

A baseline *family* is what a user would try first, with the knob its users tune; its *members*
are that knob on a small grid. Every member is measured as a trial of the search, and the family's
*tuned* baseline is its fastest measured member, so tuned is never slower than untuned (the
family's default member is one of the members; ``search.speedup`` asserts it). Replacing the
analytical TPE tuning of ``simulator.analytical.baselines`` with measurement matters: on the
measured domains the analytically tuned PS was slower than naive PS in 5 of 6.

Lossless families (always):

    horovod        all-reduce (sparse: all-gather) in Horovod's fusion buckets, back-prop order;
                   fusion threshold on {1, 4, 16, 64} MiB; untuned = 64 MiB, Horovod's default
                   (HOROVOD_FUSION_THRESHOLD). Horovod's cycle time does not apply here: the
                   executor launches a bucket as soon as its gradients are ready, not on a timer.
    ps             ps-naive (every variable whole on the first node's server: untuned), and
                   ``simulator.analytical.baselines.ps`` at three partition thresholds: none
                   (whole variables, bandwidth-balanced placement), 4 MiB and 256 KiB (larger
                   variables split into one shard per node); local replication on multi-GPU nodes.

Lossy families (only when the search opted into that compression):

    horovod-fp16   the horovod family with every bucket sent in fp16 (Horovod's
                   ``Compression.fp16``); same fusion grid, untuned = 64 MiB.
    ddp-powersgd   DDP's buckets (25 MiB, DDP's ``bucket_cap_mb`` default) with torch's PowerSGD
                   hook over every dense matrix (vectors and sparse rows uncompressed, as the hook
                   leaves what it cannot shrink); rank on {1, 2, 4}, untuned = 1 (the hook's
                   default ``matrix_approximation_rank``).

Member names (stored on the trial) are ``<family>@<knob>`` (``horovod@16MiB``, ``ps@part-4MiB``,
``ddp-powersgd@r2``) and ``ps-naive``; the older single-baseline names ``horovod`` and ``ps``
still name their families.

Interleaving: members are spread over the search's rounds (:func:`baseline_schedule`), the
untuned ones in round 1, so baselines and candidates are measured side by side over the same
stretch of time (a drifting machine hits both), not all baselines first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from search.space import Compression, compressor_kinds
from simulator.analytical.baselines import horovod, ps, ps_naive
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    ModelSpec,
    Strategy,
    Variable,
    VariableStrategy,
)

MIB = 1 << 20
#: Horovod fusion thresholds measured, MiB (the last is Horovod's default).
FUSION_MIB = (1, 4, 16, 64)
#: PS partition thresholds measured (None: never partition, balanced placement only).
PS_PARTITION = (None, 4 * MIB, 256 * 1024)
#: PowerSGD ranks measured for the DDP + PowerSGD hook baseline (the first is the hook's default).
POWERSGD_RANKS = (1, 2, 4)
#: DDP's default bucket size.
DDP_BUCKET_MIB = 25


@dataclass(frozen=True)
class BaselineFamily:
    """One family: its name, whether it is lossy, its member names (untuned member first)."""

    name: str
    lossy: bool
    members: tuple[str, ...]

    @property
    def untuned(self) -> str:
        return self.members[0]


def baseline_families(compression: Compression = "none") -> tuple[BaselineFamily, ...]:
    """The families a search with ``compression`` measures (lossy ones only if opted in)."""
    kinds = compressor_kinds(compression)
    fusion = tuple(f"@{m}MiB" for m in reversed(FUSION_MIB))  # 64 MiB (Horovod's default) first
    out = [
        BaselineFamily("horovod", False, tuple("horovod" + f for f in fusion)),
        BaselineFamily("ps", False, ("ps-naive", *(f"ps@{_ps_label(t)}" for t in PS_PARTITION))),
    ]
    if "fp16" in kinds:
        out.append(BaselineFamily("horovod-fp16", True, tuple("horovod-fp16" + f for f in fusion)))
    if "powersgd" in kinds:
        out.append(BaselineFamily("ddp-powersgd", True, tuple(f"ddp-powersgd@r{r}" for r in POWERSGD_RANKS)))
    return tuple(out)


def baseline_names(compression: Compression = "none") -> tuple[str, ...]:
    """Every member of every family of a search with ``compression``, untuned members first."""
    fams = baseline_families(compression)
    return tuple(f.untuned for f in fams) + tuple(m for f in fams for m in f.members[1:])


def family_of(name: str) -> str:
    """The family of a member name (``ps-naive`` → ``ps``; ``horovod@4MiB`` → ``horovod``)."""
    if name == "ps-naive":
        return "ps"
    return name.split("@", 1)[0]


def is_lossy_baseline(name: str) -> bool:
    return family_of(name) in ("horovod-fp16", "ddp-powersgd")


def baseline_schedule(names: Sequence[str], rounds: int) -> dict[str, int]:
    """The round (1-based) in which each member is queued: spread evenly, in the given order."""
    rounds = max(1, rounds)
    n = max(1, len(names))
    return {name: 1 + (i * rounds) // n for i, name in enumerate(names)}


def baseline_strategy(name: str, model: ModelSpec, cluster: ClusterSpec) -> Strategy:
    """The strategy of member ``name`` (ValueError naming the member if unknown)."""
    family, _, knob = name.partition("@")
    try:
        if name == "ps-naive":
            return ps_naive(model, cluster).model_copy(update={"name": name})
        if family in ("horovod", "horovod-fp16") and knob.endswith("MiB"):
            s = horovod(model, cluster, threshold=float(knob[:-3]) * MIB)
            if family == "horovod-fp16":
                s = _compress(
                    s, model, lambda v: Compressor(kind="fp16") if v.dtype == "float32" else Compressor()
                )
            return s.model_copy(update={"name": name})
        if family == "ps" and knob:
            threshold = (
                math.inf if knob == "balanced" else float(knob.removeprefix("part-")[:-3]) * _unit(knob)
            )
            return ps(model, cluster, threshold=threshold).model_copy(update={"name": name})
        if family == "ddp-powersgd" and knob.startswith("r"):
            return ddp_powersgd(model, cluster, int(knob[1:])).model_copy(update={"name": name})
    except ValueError:
        pass
    raise ValueError(f"baseline: unknown member {name!r}")


def ddp_powersgd(model: ModelSpec, cluster: ClusterSpec, rank: int) -> Strategy:
    """DDP's 25 MiB buckets, PowerSGD of ``rank`` on every dense matrix whose sides exceed the rank."""
    base = horovod(model, cluster, threshold=DDP_BUCKET_MIB * MIB)

    def comp(v: Variable) -> Compressor:
        ok = not v.sparse and len(v.shape) >= 2 and rank < min(v.shape[0], math.prod(v.shape[1:]))
        return Compressor(kind="powersgd", rank=rank) if ok else Compressor()

    return _compress(base, model, comp)


def _compress(s: Strategy, model: ModelSpec, comp: Callable[[Variable], Compressor]) -> Strategy:
    """``s`` with every collective shard of a variable ``v`` given compressor ``comp(v)``."""
    by_name = {v.name: v for v in model.variables}
    subs = []
    for vs in s.variables:
        var = by_name[vs.variable]
        c = comp(var)
        shards = tuple(
            CollectiveSync(group=x.group, algorithm=x.algorithm, compressor=c)
            if isinstance(x, CollectiveSync)
            else x
            for x in vs.shards
        )
        subs.append(VariableStrategy(variable=vs.variable, partition=vs.partition, shards=shards))
    return s.model_copy(update={"variables": tuple(subs)})


def _ps_label(threshold: int | None) -> str:
    if threshold is None:
        return "balanced"
    return f"part-{threshold // MIB}MiB" if threshold >= MIB else f"part-{threshold // 1024}KiB"


def _unit(knob: str) -> int:
    if knob.endswith("MiB"):
        return MIB
    if knob.endswith("KiB"):
        return 1024
    raise ValueError(knob)
