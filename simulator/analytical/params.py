"""CostParams: the analytical model's constants (φ, δ, compute model options) and their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from simulator.analytical.compute import OpEfficiency
from simulator.spec.profile import Profile


@dataclass(frozen=True)
class CostParams:
    """Constants of AutoSync's predefined cost model (supplementary §1-§3).

    The defaults are order-of-magnitude figures for TCP/NCCL on GPU clusters; ``fit`` (in
    ``simulator.analytical.fit``) replaces them with least-squares estimates from measured runs.
    """

    # φ, Eq. 2 and 3: network overhead per message (latency, RPC/handshake cost), seconds.
    phi: float = 50e-6
    # δ, Eq. 2 and 3: GPU kernel + device-host memcpy latency per synchronised unit, seconds.
    delta: float = 20e-6
    # Per-device correction of the roofline compute model (``simulator.analytical.compute``):
    # layer times are divided by it. 1.0 is the roofline as is; ``fit`` estimates it per device
    # type from measured runtimes. The default for every type not in ``device_efficiency``.
    efficiency: float = 1.0
    # Per-device-type overrides of ``efficiency`` as (device type name, efficiency) pairs.
    device_efficiency: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    # Fraction of the roofline ceilings each op class reaches (gemm, conv, attention, vector, memory).
    op_efficiency: OpEfficiency = field(default_factory=OpEfficiency)
    # Mixed precision as a strategy option: run every layer in this dtype ('float16', 'bfloat16',
    # 'tf32', 'float32'); None keeps the model's own (ModelSpec.compute_dtype or its parameters').
    compute_dtype: Literal["float32", "tf32", "float16", "bfloat16"] | None = None
    # Measured per-layer profiles; one matching (model, device, dtype, batch) replaces the roofline.
    profiles: tuple[Profile, ...] = field(default_factory=tuple)
    # How PS and collective time combine into T_sync: "sum" (they contend for the same worker
    # NICs and serialise) or "max" (they overlap perfectly). See ``simulator.analytical.vectorised``.
    combine: Literal["sum", "max"] = "sum"
    # How synchronisation overlaps back-propagation: "bucket" (a merge group or PS shard starts
    # when its gradients are ready, channels run units one after another; Horovod/DDP and the
    # executor) or "full" (the paper's Eq. 1, T = max(T_comp, T_sync)). See ``overlap``.
    overlap: Literal["bucket", "full"] = "bucket"
    # Measured per-call costs α of the cluster the strategies run on (seconds), e.g. the testbed's
    # probe (``per_call_overhead_s`` of every runtime record: a 1-element all-reduce over the
    # workers and a 1-element PS push+pull round). When set, a collective call costs
    # ``call_alphas()[op]`` instead of Eq. 3's w·φ + δ, and a PS shard costs
    # ``ps_round_s`` per round trip (``simulator.spec.comm.ps_rounds``: a sparse shard takes two)
    # instead of Eq. 2's messages·φ + δ: a calibration of α from the cluster, not a
    # fit to iteration times. None keeps φ and δ. A locally replicated shard adds
    # ``comm.local_replication_calls`` collectives inside its node, each at ``call_overhead_s``
    # (with ``ps_round_s`` and no ``call_overhead_s`` they are not priced).
    call_overhead_s: float | None = None
    ps_round_s: float | None = None
    # Measured α of one all-gather call (the probe's ``allgather``); None: ``call_overhead_s``.
    # Gloo's all-gather is not an all-reduce's price on a crowded host, and a sparse unit is three.
    allgather_call_s: float | None = None
    # Measured cost of issuing one collective unit beyond its backend calls (the probe's
    # ``collective_unit`` minus ``collective``: the executor hands a unit to a sync channel's thread,
    # which wakes, flattens and averages; on a crowded host that is ~0.5 ms dilated, as much as
    # the call itself). Charged once per collective call of ``StrategyBatch`` (a unit's dense and
    # sparse parts are two there, one hand-off in the executor: a unit mixing both pays it twice).
    # Only with a measured α; None or 0: nothing. A real NCCL cluster's launch path is in α.
    unit_overhead_s: float | None = None

    def __post_init__(self) -> None:
        if self.phi < 0 or self.delta < 0:
            raise ValueError(f"phi and delta must be >= 0, got phi={self.phi}, delta={self.delta}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        for name, eff in self.device_efficiency:
            if not 0 < eff <= 1:
                raise ValueError(f"device_efficiency[{name!r}] must be in (0, 1], got {eff}")
        if self.compute_dtype not in (None, "float32", "tf32", "float16", "bfloat16"):
            raise ValueError(
                f"compute_dtype must be float32, tf32, float16 or bfloat16, got {self.compute_dtype!r}"
            )
        if self.combine not in ("sum", "max"):
            raise ValueError(f"combine must be 'sum' or 'max', got {self.combine!r}")
        for name in ("call_overhead_s", "ps_round_s", "allgather_call_s", "unit_overhead_s"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 10:
                raise ValueError(f"{name} must be in [0, 10) seconds, got {v}")
        if self.overlap not in ("bucket", "full"):
            raise ValueError(f"overlap must be 'bucket' or 'full', got {self.overlap!r}")

    def call_alphas(self) -> tuple[float, float, float] | None:
        """Measured seconds per collective op, in ``arrays.OP_NAMES`` order, or None (Eq. 3's φ, δ).

        The executor's calls per op (runtime/executor/collective.py): a ring all-reduce is one
        all-reduce; a hierarchical one is reduce + leaders' all-reduce + broadcast (three calls of
        about an all-reduce's price); a sparse all-gather gathers counts, indices and rows (three
        all-gathers).
        """
        if self.call_overhead_s is None:
            return None
        ag = self.allgather_call_s if self.allgather_call_s is not None else self.call_overhead_s
        return (self.call_overhead_s, 3.0 * self.call_overhead_s, 3.0 * ag)

    def efficiency_of(self, device_type: str) -> float:
        """The compute efficiency of one device type (its override, else the default)."""
        for name, eff in self.device_efficiency:
            if name == device_type:
                return eff
        return self.efficiency

    def with_efficiency(self, device_type: str, eff: float) -> CostParams:
        """A copy with ``device_type``'s efficiency set to ``eff``."""
        rest = tuple((n, e) for n, e in self.device_efficiency if n != device_type)
        return replace(self, device_efficiency=(*rest, (device_type, eff)))

    def profile_for(self, model: str, device: str, dtype: str, batch: int) -> Profile | None:
        """The profile keyed (model, device, dtype, batch), or None (the last one given wins)."""
        key = (model, device, dtype, batch)
        for p in reversed(self.profiles):
            if p.key == key:
                return p
        return None

    def with_profiles(self, profiles: tuple[Profile, ...] | list[Profile]) -> CostParams:
        """A copy that also uses ``profiles`` (after its own; later ones win on the same key)."""
        return replace(self, profiles=(*self.profiles, *profiles))
