"""Peak device memory of a 3D-parallel GPT plan, per pipeline stage: does the plan run out of memory?

One TP rank of stage i (of p), N_i parameters (``cost.stage_params``), d data-parallel replicas:
    model states (mixed-precision Adam, Rajbhandari et al. 2020 §3: 2 + 2 + 12 bytes/param)
        fp16 parameters  2·N_i        (÷ d under ZeRO-3)
        fp16 gradients   2·N_i        (÷ d under ZeRO ≥ 2)
        fp32 master, m, v 12·N_i      (÷ d under ZeRO ≥ 1)
    activations per transformer layer and micro-batch (Korthikanti et al. 2022, arXiv 2205.05198,
    Table 2; bytes, fp16, s = seq, b = micro-batch, h = hidden, a = heads, t = tp):
        none          sbh·(10 + 24/t + 5as/(ht))      sequence parallel: sbh/t·(34 + 5as/h)
        selective     sbh·(10 + 24/t)                 sequence parallel: sbh/t·34
        full          2sbh (the layer input)          sequence parallel: 2sbh/t
      with fused attention (FlashAttention) the 5as/h term (the stored a·s² scores, softmax
      output and dropout mask) is replaced by the per-row softmax statistics, 4·a·s·b/t bytes;
      full recompute also holds one layer's whole activations during its backward;
      in flight: 1F1B stage i stashes min(p − i, m) micro-batches (Narayanan et al. 2021), GPipe m;
    first stage: the embedding's dropout mask, m·s·b·h bytes per micro-batch in flight;
    last stage: the final norm's input and output, 2e·sbh, and the loss's logits,
      ``loss_bytes_per_logit`` · s·b·V/t (Megatron: fp16 logits + fp32 softmax, 6);
    pipeline buffers: a sent and a received b·s·h fp16 tensor when p > 1;
  × ``MemoryConfig.fragmentation`` (the caching allocator's reserved / allocated), plus outside
    the allocator: NCCL's buffers per communicator the rank is in (TP, DP, the pipeline's
    neighbours) and the CUDA context.
Fits when every stage's total <= memory_gb · 1e9 (GB read as 1e9 bytes, as ``simulator.memory``).

Shapes: bytes; ``stages`` has one entry per pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import DeviceType
from simulator.threed.cost import stage_params
from simulator.threed.layers import E
from simulator.threed.plan import GPTConfig, ThreeDPlan


@dataclass(frozen=True)
class MemoryConfig:
    """Assumptions of the 3D memory model."""

    # Bytes per parameter of the fp16 weights, the gradients and the optimizer state (mixed-precision
    # Adam: fp32 master copy, momentum and variance).
    param_bytes: float = 2.0
    grad_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    # Caching allocator's reserved / allocated at the peak (PyTorch's block rounding and splitting).
    fragmentation: float = 1.10
    # Bytes per activation element (fp16/bf16: 2; fp32: 4).
    elem_bytes: int = 2
    # Bytes per dropout-mask element: 1 for the fused CUDA kernel's bool mask; ATen's CPU dropout
    # multiplies by a noise tensor of the input's dtype (``_dropout_impl``), so elem_bytes there.
    mask_bytes: int = 1
    # Bytes per logit alive at the end of the forward (Megatron's vocab-parallel cross-entropy:
    # fp16 logits + fp32 softmax = 6; PyTorch's fp32 cross_entropy: logits + log-softmax = 8).
    loss_bytes_per_logit: float = 6.0
    # Gradients stay allocated through the step (Megatron / DDP gradient buffers); False:
    # ``zero_grad(set_to_none=True)`` frees them, so the peak is the larger of the start of the
    # backward (activations, no gradients) and its end (gradients, no activations).
    grads_persist: bool = True
    # NCCL buffers per communicator: 2 directions x NCCL_BUFFSIZE (4 MiB) x 8 channels.
    nccl_bytes_per_comm: float = 2 * 4 * 2**20 * 8
    # CUDA context and cuBLAS / cuDNN workspaces (outside the allocator's count).
    context_bytes: float = 0.6e9


@dataclass(frozen=True)
class StageMemory:
    """Peak bytes of one GPU of a stage, by part."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    nccl: float
    context: float
    fragmentation: float

    @property
    def allocated(self) -> float:
        """What the caching allocator hands out at the peak."""
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    @property
    def total(self) -> float:
        return self.allocated * self.fragmentation + self.nccl + self.context


@dataclass(frozen=True)
class ThreeDMemory:
    stages: tuple[StageMemory, ...]
    capacity: float

    @property
    def peak(self) -> float:
        return max(s.total for s in self.stages)

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity


def layer_activation_bytes(
    cfg: GPTConfig, plan: ThreeDPlan, elem_bytes: int = 2, mask_bytes: int = 1
) -> float:
    """Bytes one transformer layer keeps for its backward, per micro-batch (Korthikanti Table 2).

    For e-byte elements and m-byte dropout masks the paper's terms are: replicated across TP
    sbh(4e + 2m) (the two norms' inputs, the QKV and fc1 inputs, two masks; 10 sbh at e = 2,
    m = 1), split over t: 12e·sbh/t (Q, K, V, proj input, GELU input, fc2 input; 24 sbh/t), the
    scores (2e + m)·a·s²·b/t (softmax output, its dropout mask and output; 5as/h per sbh).
    e = 2, m = 1 give the published sbh(10 + 24/t + 5as/(ht)).
    """
    e, m = elem_bytes, mask_bytes
    s, b, h, a, t = cfg.seq, plan.micro_batch, cfg.hidden, cfg.heads, plan.tp
    sbh = s * b * h
    scores = (2 * e + m) * a * s / h  # the attention core's a·s² terms, per sbh
    if plan.fused_attention:
        scores = 4.0 * a / h  # softmax statistics: 4·a·s·b bytes (fp32 row max and sum) per sbh
    if plan.recompute == "full":
        return e * sbh / (t if plan.sequence_parallel else 1)
    core = 0.0 if plan.recompute == "selective" else scores
    if plan.sequence_parallel:
        return sbh / t * (16 * e + 2 * m + core)
    return sbh * (4 * e + 2 * m + 12 * e / t + core / t)


def whole_layer_bytes(cfg: GPTConfig, plan: ThreeDPlan, elem_bytes: int = 2, mask_bytes: int = 1) -> float:
    """One layer's activations without recompute (held while a fully recomputed layer runs backward)."""
    plain = ThreeDPlan(
        tp=plan.tp,
        micro_batch=plan.micro_batch,
        sequence_parallel=plan.sequence_parallel,
        fused_attention=plan.fused_attention,
    )
    return layer_activation_bytes(cfg, plain, elem_bytes, mask_bytes)


def in_flight(plan: ThreeDPlan, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` holds at its peak."""
    m = plan.num_micro_batches
    return m if plan.schedule == "gpipe" else min(plan.pp - stage, m)


def predict_memory(
    cfg: GPTConfig, plan: ThreeDPlan, device: DeviceType, config: MemoryConfig | None = None
) -> ThreeDMemory:
    """Peak bytes per stage of ``plan`` training ``cfg`` and whether it fits ``device`` (module doc)."""
    plan.check(cfg)
    c = config or MemoryConfig()
    p, d, t = plan.pp, plan.dp, plan.tp
    s, b, h = cfg.seq, plan.micro_batch, cfg.hidden
    comms = (t > 1) + (d > 1) + 2 * (p > 1)
    stages = []
    for i in range(p):
        n = stage_params(cfg, t, p, i)
        k = in_flight(plan, i)
        act = cfg.layers // p * layer_activation_bytes(cfg, plan, c.elem_bytes, c.mask_bytes) * k
        if plan.recompute == "full":
            act += whole_layer_bytes(cfg, plan, c.elem_bytes, c.mask_bytes)
        if i == 0:
            act += c.mask_bytes * s * b * h * k  # embedding dropout mask
        if i == p - 1:
            act += 2 * c.elem_bytes * s * b * h  # final norm's input and output (the logits' input)
            act += c.loss_bytes_per_logit * s * b * cfg.padded_vocab(t) / t
        grads = c.grad_bytes * n / (d if plan.zero_stage >= 2 else 1)
        if not c.grads_persist:  # the larger phase: start of the backward or its end
            act, grads = (act, 0.0) if act >= grads else (0.0, grads)
        stages.append(
            StageMemory(
                params=c.param_bytes * n / (d if plan.zero_stage >= 3 else 1),
                grads=grads,
                optimizer=c.optimizer_bytes * n / (d if plan.zero_stage >= 1 else 1),
                activations=act,
                buffers=2.0 * s * b * h * E if p > 1 else 0.0,
                nccl=comms * c.nccl_bytes_per_comm,
                context=c.context_bytes,
                fragmentation=c.fragmentation,
            )
        )
    return ThreeDMemory(tuple(stages), device.memory_gb * 1e9)
