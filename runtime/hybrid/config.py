"""HybridConfig: how a HybridPlan is executed and measured (compute mode, steps, scale, dilation)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class HybridConfig:
    """Options of one hybrid run; every process gets a copy (as JSON)."""

    # 'real' runs the layers' true maths on CPU tensors (correctness, small models); 'replay'
    # sleeps each device's compute time from its own GPU type (the testbed, any model size).
    compute: Literal["real", "replay"] = "replay"
    # Steps run before measuring (not reported), then steps measured.
    warmup: int = 1
    iterations: int = 5
    # SGD learning rate.
    lr: float = 0.01
    # Seed of the parameters (per variable) and of every step's synthetic global batch.
    seed: int = 0
    # Element type of parameters and activations in real mode ('float64' for exact comparisons).
    dtype: Literal["float32", "float64"] = "float32"
    # Seconds the whole run may take (start-up included) before it is a failure.
    timeout_s: float = 120.0
    # Backend of every collective and bridge message: 'gloo' (CPU tensors) or 'nccl' (CUDA tensors,
    # worker r on cuda:<its local GPU index>). Only gloo is exercised here (no GPU).
    backend: Literal["gloo", "nccl"] = "gloo"
    # Replay: bytes communicated are divided by this (the testbed divides bandwidth by scale x dilation).
    scale: float = 1.0
    # Replay: time dilation D, as ExecutorConfig.dilation: replayed compute takes D times longer, the
    # testbed's links should be shaped to 1/(scale x D), and every reported time is divided by D.
    dilation: float = 1.0
    # Replay: correction of the roofline compute model (CostParams.efficiency; 1.0 = as the cost model).
    efficiency: float = 1.0
    # Real mode: heads of every attention layer (its width must divide by it; split TaskGraphs cut heads).
    attention_heads: int = 2
    # Fail the run as out of memory when a device's ledger passes its type's memory (both modes).
    check_memory: bool = True
    # Fraction of a device's memory a run may use (the rest: CUDA context, allocator slack).
    memory_fraction: float = 1.0
    # Optimizer state bytes per parameter byte on the device (SGD 0, momentum 1, Adam 2).
    optimizer_state_factor: float = 0.0
    # Real mode: every rank returns every step's gradients (tests compare them with the reference).
    record_grads: bool = False

    def __post_init__(self) -> None:
        checks = [
            (
                self.compute in ("real", "replay"),
                "compute",
                f"must be 'real' or 'replay', got {self.compute!r}",
            ),
            (self.warmup >= 0, "warmup", "must be >= 0"),
            (self.iterations >= 1, "iterations", "must be >= 1"),
            (self.lr > 0, "lr", "must be > 0"),
            (
                self.dtype in ("float32", "float64"),
                "dtype",
                f"must be 'float32' or 'float64', got {self.dtype!r}",
            ),
            (self.timeout_s > 0, "timeout_s", "must be > 0"),
            (self.backend in ("gloo", "nccl"), "backend", f"must be 'gloo' or 'nccl', got {self.backend!r}"),
            (self.scale >= 1, "scale", "must be >= 1"),
            (self.compute == "replay" or self.scale == 1, "scale", "must be 1 in real mode"),
            (self.dilation >= 1, "dilation", "must be >= 1"),
            (self.compute == "replay" or self.dilation == 1, "dilation", "must be 1 in real mode"),
            (0 < self.efficiency <= 1, "efficiency", "must be in (0, 1]"),
            (self.attention_heads >= 1, "attention_heads", "must be >= 1"),
            (0 < self.memory_fraction <= 1, "memory_fraction", "must be in (0, 1]"),
            (self.optimizer_state_factor >= 0, "optimizer_state_factor", "must be >= 0"),
        ]
        for ok, name, reason in checks:
            if not ok:
                raise ValueError(f"HybridConfig.{name}: {reason}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
