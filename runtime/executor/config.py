"""ExecutorConfig: how a strategy is executed and measured (compute mode, iterations, backend, scale)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

ComputeMode = Literal["real", "replay"]


@dataclass(frozen=True)
class ExecutorConfig:
    """Options of one executor session; every process of the session gets a copy (as JSON)."""

    # 'real' runs torch layers built from the ModelSpec; 'replay' sleeps each layer's device time.
    compute: ComputeMode = "replay"
    # Iterations run before measuring (not reported), then iterations measured.
    warmup: int = 3
    iterations: int = 10
    # Seconds one trial may take end to end (after the processes are up) before it is a failure.
    timeout_s: float = 120.0
    # Seconds the processes may take to start and join the process group.
    startup_timeout_s: float = 120.0
    # Backend of the workers' collectives: 'gloo' (CPU) or 'nccl' (CUDA). PS traffic is always gloo.
    backend: Literal["gloo", "nccl"] = "gloo"
    # Bytes communicated are divided by this (the testbed divides bandwidth by scale × dilation).
    scale: float = 1.0
    # Time dilation D (replay only): every shaped link runs D times slower than ``scale`` alone
    # would make it and every replayed layer takes D times longer, so the emulated cluster runs
    # D times slower than the real one and every reported time is divided by D. Fixed per-call
    # software costs of this host (gloo, Python, wake-ups on shared cores) shrink by D relative to
    # the cluster's transfers and compute (runtime/testbed/README.md, "Time dilation").
    dilation: float = 1.0
    # Repetitions of the per-call overhead probe run before every trial (0: no probe): a
    # 1-element all-reduce over the workers and a 1-element PS round, medians stored per trial.
    probe_repeats: int = 10
    # SGD learning rate, applied by workers (collective shards) and servers (PS shards).
    lr: float = 0.01
    # Seed of parameter initialisation, synthetic data and PowerSGD's initial Q.
    seed: int = 0
    # Per-GPU batch size; None uses ModelSpec.batch_size.
    batch_size: int | None = None
    # Replay: correction of the roofline compute model (CostParams.efficiency; 1.0 = as the cost model).
    efficiency: float = 1.0
    # Replay: fail a trial as out of memory when params + grads + activations exceed the device.
    check_memory: bool = True
    # Write every worker's final parameters to this folder (tests compare replicas); real mode by
    # variable name, replay mode by shard ("shard<id>").
    param_dump_dir: str | None = None
    # Real mode: targets from a fixed teacher network seeded with this (a learnable task, for the
    # time-to-accuracy check); None: random targets (enough for sync correctness).
    teacher_seed: int | None = None
    # Tests only: this rank exits with an error in the first iteration of every trial.
    crash_rank: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (
                self.compute in ("real", "replay"),
                "compute",
                f"must be 'real' or 'replay', got {self.compute!r}",
            ),
            (self.warmup >= 0, "warmup", "must be >= 0"),
            (self.iterations >= 1, "iterations", "must be >= 1"),
            (self.timeout_s > 0, "timeout_s", "must be > 0"),
            (self.startup_timeout_s > 0, "startup_timeout_s", "must be > 0"),
            (self.backend in ("gloo", "nccl"), "backend", f"must be 'gloo' or 'nccl', got {self.backend!r}"),
            (self.scale >= 1.0, "scale", "must be >= 1"),
            (self.compute == "replay" or self.scale == 1.0, "scale", "must be 1 in real mode (real tensors)"),
            (self.dilation >= 1.0, "dilation", "must be >= 1"),
            (
                self.compute == "replay" or self.dilation == 1.0,
                "dilation",
                "must be 1 in real mode (real compute cannot be slowed down)",
            ),
            (self.probe_repeats >= 0, "probe_repeats", "must be >= 0"),
            (self.lr > 0, "lr", "must be > 0"),
            (self.batch_size is None or self.batch_size >= 1, "batch_size", "must be >= 1"),
            (0 < self.efficiency <= 1, "efficiency", "must be in (0, 1]"),
        ]
        for ok, name, reason in checks:
            if not ok:
                raise ValueError(f"ExecutorConfig.{name}: {reason}")

    @property
    def link_scale(self) -> float:
        """What the testbed divides every link's bandwidth by: ``scale × dilation``."""
        return self.scale * self.dilation

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ExecutorConfig:
        return cls(**json.loads(text))
