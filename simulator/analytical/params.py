"""CostParams: the analytical model's fitted constants (φ, δ, compute efficiency) and their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal


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
    # Fraction of a device type's peak FP32 throughput that training reaches (MFU); the default
    # for every device type not listed in ``device_efficiency``.
    efficiency: float = 0.4
    # Per-device-type overrides of ``efficiency`` as (device type name, efficiency) pairs.
    device_efficiency: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    # How PS and collective time combine into T_sync: "sum" (they contend for the same worker
    # NICs and serialise) or "max" (they overlap perfectly). See ``simulator.analytical.vectorised``.
    combine: Literal["sum", "max"] = "sum"

    def __post_init__(self) -> None:
        if self.phi < 0 or self.delta < 0:
            raise ValueError(f"phi and delta must be >= 0, got phi={self.phi}, delta={self.delta}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        for name, eff in self.device_efficiency:
            if not 0 < eff <= 1:
                raise ValueError(f"device_efficiency[{name!r}] must be in (0, 1], got {eff}")
        if self.combine not in ("sum", "max"):
            raise ValueError(f"combine must be 'sum' or 'max', got {self.combine!r}")

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
