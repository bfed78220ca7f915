"""Measurement: what one trial of a strategy on a (real or emulated) cluster measured."""

from __future__ import annotations

import re
import statistics
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simulator.spec.errors import Issue, SpecError
from simulator.spec.limits import LIMITS, Name, json_issues

#: Seconds of one iteration (or of its compute / its synchronisation wait): finite, bounded.
Seconds = Annotated[float, Field(ge=0.0, le=LIMITS.seconds)]


#: What no database or UTF-8 encoder takes: NUL and lone UTF-16 surrogates.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class Measurement(BaseModel):
    """The result of running one strategy: per-iteration times, or the reason it failed.

    A failed run (out of memory, crash, timeout, invalid on this cluster) is a Measurement with
    ``failure`` set and no times, never an exception that loses the trial. Times are wall-clock
    seconds of the emulated (scaled) cluster; ``scale`` is the factor bytes and bandwidth were
    divided by (times are *not* rescaled: the communication/compute ratio is preserved, and
    ``compute`` in replay mode is the real device time).

    Every number is finite and within `simulator.spec.limits` (the API refuses the rest with 422).
    ``failure`` is our own diagnostic text, so it is cleaned rather than refused: a NUL (which
    PostgreSQL cannot store) and a lone surrogate (which nothing encodes as UTF-8, e.g. a crashed
    process's output decoded with ``surrogateescape``) become U+FFFD and text past the limit is
    cut, so a failed trial is never lost over its message.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    iteration_times: tuple[Seconds, ...] = Field(
        (), max_length=LIMITS.iterations, fail_fast=True, description="Measured seconds per iteration."
    )
    compute_times: tuple[Seconds, ...] = Field(
        (), max_length=LIMITS.iterations, fail_fast=True, description="Per iteration: seconds in compute."
    )
    sync_wait_times: tuple[Seconds, ...] = Field(
        (),
        max_length=LIMITS.iterations,
        fail_fast=True,
        description="Per iteration: seconds waiting on synchronisation after compute ended.",
    )
    warmup: int = Field(0, ge=0, le=LIMITS.iterations, description="Iterations run before measuring.")
    failure: str | None = Field(None, description="Why the run failed; None if it succeeded.")
    scale: float = Field(1.0, gt=0, le=LIMITS.scale, description="Bytes and bandwidth were divided by this.")
    compute_mode: Name = Field("replay", description="'real' or 'replay'.")
    backend: Name = Field("gloo", description="torch.distributed backend used.")
    environment: dict[str, Any] = Field(default_factory=dict, description="Host, versions, testbed.")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="What a plan kind measured beyond the times (a pipeline's per-stage schedule and "
        "tuner switches, a hybrid plan's per-device busy time); empty for a sync strategy.",
    )

    @field_validator("failure")
    @classmethod
    def _clean_failure(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = _UNSTORABLE.sub("\ufffd", value)
        if len(value) > LIMITS.text_chars:
            value = value[: LIMITS.text_chars - 1] + "…"
        return value

    @field_validator("environment", "details")
    @classmethod
    def _finite_environment(cls, value: dict[str, Any]) -> dict[str, Any]:
        issues = [Issue(path, reason) for path, reason in json_issues(value)]
        if issues:
            raise SpecError(issues)
        return value

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


#: Where a runtime was measured: the emulated testbed (network namespaces or loopback on one
#: host) or a real cluster (an agent pool's nodes, or a gpu-pool host's GPUs).
Site = Literal["testbed", "cluster"]


class MeasuredOn(BaseModel):
    """Where one runtime was measured (``runtime_records.measured_on``, issue 41).

    The rule (:func:`measured_on`): a Measurement whose environment carries ``measured_on`` (an
    agent writes it: the site its operator declared with ``strategist agent --site``, its pool,
    the gang's GPU types, the torchrun run id) says so itself; otherwise an environment naming a
    ``testbed`` (the testbed worker's launcher: ``netns`` or ``loopback``) is the testbed, and a
    ``gpu`` pool worker's (``launcher: local``, ``pool: gpu``: the host's own GPUs) a real
    cluster. Anything else is unknown (None), never guessed: the learned simulators treat an
    unknown site as the testbed's (``service.loop.simulators.one_site``) and say so.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    site: Site
    pool: str | None = Field(None, max_length=200, description="The agent pool (or worker pool) name.")
    gpu_types: tuple[Annotated[str, Field(max_length=200)], ...] = Field(
        (), max_length=64, description="Device types of the nodes it ran on."
    )
    torchrun_run_id: str | None = Field(None, max_length=200, description="torchrun's rendezvous/run id.")


def measured_on(environment: dict[str, Any]) -> MeasuredOn | None:
    """Where the Measurement with this ``environment`` was measured (the rule in :class:`MeasuredOn`)."""
    given = environment.get("measured_on")
    if isinstance(given, dict):
        try:
            return MeasuredOn.model_validate(given)
        except ValueError:
            return None
    if environment.get("testbed"):
        return MeasuredOn(site="testbed", pool="testbed")
    if environment.get("pool") == "gpu":
        return MeasuredOn(site="cluster", pool="gpu")
    return None
