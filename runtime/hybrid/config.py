"""HybridConfig: how a HybridPlan is executed and measured (the executor's settings plus its own)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from runtime.executor.config import ComputeMode, ExecutorConfig
from simulator.analytical.params import CostParams
from simulator.hybrid.buckets import BUCKET_BYTES
from simulator.spec.profile import Profile


@dataclass(frozen=True)
class HybridConfig:
    """Options of one hybrid run; every process gets a copy (as JSON).

    ``executor`` is the executor's own ``ExecutorConfig``: one definition and validation of the
    compute mode, warm-up/iterations, lr, seed, timeouts, ``backend``, bytes ``scale``, time
    ``dilation`` (replayed compute D times longer, links shaped to ``link_scale``, every reported
    time divided by D), ``efficiency`` and ``check_memory``, so a hybrid trial is measured with the
    protocol of every other trial. The run's deadline is ``timeout_s + startup_timeout_s``. Fields
    that mean nothing here are not used: ``batch_size`` (the plan has its batch), ``probe_repeats``,
    ``param_dump_dir``, ``teacher_seed``, ``crash_rank``. With ``backend='nccl'`` every collective
    and bridge message runs on NCCL with CUDA tensors (worker on cuda:<local GPU index>); that path
    cannot be exercised on the CPU-only machines this was written on.
    """

    executor: ExecutorConfig = field(default_factory=lambda: ExecutorConfig(compute="replay"))
    # Element type of parameters and activations in real mode ('float64' for exact comparisons).
    dtype: Literal["float32", "float64"] = "float32"
    # Real mode: heads of every attention layer (its width must divide by it; split TaskGraphs cut heads).
    attention_heads: int = 2
    # Fraction of a device's memory a run may use (the rest: CUDA context, allocator slack).
    memory_fraction: float = 1.0
    # Optimizer state bytes per parameter byte on the device (SGD 0, momentum 1, Adam 2).
    optimizer_state_factor: float = 0.0
    # Multiplier on the per-sample activation bytes stashed for backward (MemoryConfig.activation_factor).
    activation_factor: float = 1.0
    # Real mode: every rank returns every step's gradients (tests compare them with the reference).
    record_grads: bool = False
    # Replay: the compute dtype whose peak the roofline uses (CostParams.compute_dtype: 'float16'
    # is mixed precision on tensor cores where the GPU type has them); None: the model's own.
    compute_dtype: Literal["float32", "tf32", "float16", "bfloat16"] | None = None
    # Data-parallel gradients all-reduced in buckets (``simulator.hybrid.buckets.grad_buckets``,
    # DDP's rule) started during backward as each bucket's gradients are ready (True), or one
    # fused all-reduce per TaskGraph after the whole backward (False, the runtime before issue 19's
    # overlap change). The cost model's ``predict(overlap=..., bucket_bytes=...)`` is the same switch.
    overlap_sync: bool = True
    # Bucket cap in real-cluster bytes (DDP's bucket_cap_mb = 25 MiB by default).
    bucket_bytes: float = BUCKET_BYTES
    # Replay: use the profile store's measured profiles of this model (``simulator.profile``), as
    # the executor's replay does, so a stored (model, device, dtype, batch) profile replaces the
    # roofline exactly where the cost model's ``CostParams.with_profiles`` would.
    use_profiles: bool = True
    # Replay: the measured profiles to use instead of the store's (the ones the search ranked the
    # plan with, carried by the trial document; issue 15); None: the store's, as above.
    profiles: tuple[Profile, ...] | None = None

    def __post_init__(self) -> None:
        checks = [
            (isinstance(self.executor, ExecutorConfig), "executor", "must be an ExecutorConfig"),
            (
                self.dtype in ("float32", "float64"),
                "dtype",
                f"must be 'float32' or 'float64', got {self.dtype!r}",
            ),
            (self.attention_heads >= 1, "attention_heads", "must be >= 1"),
            (0 < self.memory_fraction <= 1, "memory_fraction", "must be in (0, 1]"),
            (self.optimizer_state_factor >= 0, "optimizer_state_factor", "must be >= 0"),
            (self.activation_factor > 0, "activation_factor", "must be > 0"),
            (self.bucket_bytes > 0, "bucket_bytes", f"must be > 0, got {self.bucket_bytes}"),
            (
                self.compute_dtype in (None, "float32", "tf32", "float16", "bfloat16"),
                "compute_dtype",
                f"must be float32, tf32, float16, bfloat16 or None, got {self.compute_dtype!r}",
            ),
        ]
        for ok, name, reason in checks:
            if not ok:
                raise ValueError(f"HybridConfig.{name}: {reason}")

    # The executor's settings, read through.
    @property
    def compute(self) -> ComputeMode:
        return self.executor.compute

    @property
    def warmup(self) -> int:
        return self.executor.warmup

    @property
    def iterations(self) -> int:
        return self.executor.iterations

    @property
    def lr(self) -> float:
        return self.executor.lr

    @property
    def seed(self) -> int:
        return self.executor.seed

    @property
    def backend(self) -> Literal["gloo", "nccl"]:
        return self.executor.backend

    @property
    def scale(self) -> float:
        return self.executor.scale

    @property
    def dilation(self) -> float:
        return self.executor.dilation

    @property
    def efficiency(self) -> float:
        return self.executor.efficiency

    @property
    def check_memory(self) -> bool:
        return self.executor.check_memory

    @property
    def deadline_s(self) -> float:
        return self.executor.timeout_s + self.executor.startup_timeout_s

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.profiles is not None:
            out["profiles"] = [p.model_dump(mode="json") for p in self.profiles]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HybridConfig:
        raw = data.get("profiles")
        profiles = None if raw is None else tuple(Profile.model_validate(p) for p in raw)
        return cls(**{**data, "executor": ExecutorConfig(**data["executor"]), "profiles": profiles})


def replay_cost_params(cfg: HybridConfig, model_name: str) -> CostParams:
    """The CostParams the replay times compute with, and the ones a prediction of it should use.

    ``efficiency`` and ``compute_dtype`` from ``cfg``; when ``cfg.use_profiles``, ``cfg.profiles``
    (the ones the search ranked the plan with), else the profile store's profiles of this model
    (``simulator.profile.store.model_profiles``, the executor session's default). Op efficiencies and per-type corrections are ``CostParams``' defaults, as in the
    executor's replay (``runtime.executor.worker.layer_seconds``).
    """
    from simulator.profile.store import model_profiles

    params = CostParams(efficiency=cfg.efficiency, compute_dtype=cfg.compute_dtype)
    if cfg.use_profiles:
        profiles = cfg.profiles
        if profiles is None:
            profiles = model_profiles(model_name)
        params = params.with_profiles(profiles)
    return params
