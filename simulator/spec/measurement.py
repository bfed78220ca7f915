"""Measurement: what one trial of a strategy on a (real or emulated) cluster measured."""

from __future__ import annotations

import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Measurement(BaseModel):
    """The result of running one strategy: per-iteration times, or the reason it failed.

    A failed run (out of memory, crash, timeout, invalid on this cluster) is a Measurement with
    ``failure`` set and no times, never an exception that loses the trial. Times are wall-clock
    seconds of the emulated (scaled) cluster; ``scale`` is the factor bytes and bandwidth were
    divided by (times are *not* rescaled: the communication/compute ratio is preserved, and
    ``compute`` in replay mode is the real device time).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    iteration_times: tuple[float, ...] = Field((), description="Measured seconds per iteration.")
    compute_times: tuple[float, ...] = Field((), description="Per iteration: seconds in compute.")
    sync_wait_times: tuple[float, ...] = Field(
        (), description="Per iteration: seconds waiting on synchronisation after compute ended."
    )
    warmup: int = Field(0, ge=0, description="Iterations run before measuring.")
    failure: str | None = Field(None, description="Why the run failed; None if it succeeded.")
    scale: float = Field(1.0, gt=0, description="Bytes and bandwidth were divided by this.")
    compute_mode: str = Field("replay", description="'real' or 'replay'.")
    backend: str = Field("gloo", description="torch.distributed backend used.")
    environment: dict[str, Any] = Field(default_factory=dict, description="Host, versions, testbed.")

    @property
    def ok(self) -> bool:
        return self.failure is None and len(self.iteration_times) > 0

    @property
    def median(self) -> float:
        """Median iteration time, seconds (the number strategies are ranked by)."""
        if not self.iteration_times:
            raise ValueError(f"no iteration times (failure: {self.failure})")
        return statistics.median(self.iteration_times)

    @property
    def spread(self) -> float:
        """Inter-quartile range of the iteration times relative to the median."""
        ts = sorted(self.iteration_times)
        if len(ts) < 2:
            return 0.0
        q = statistics.quantiles(ts, n=4)
        return (q[2] - q[0]) / statistics.median(ts)
