"""3D-parallel plans for transformer training: tensor x pipeline x data parallel, ZeRO, recompute.

The vocabulary Megatron-LM / DeepSpeed users configure, as one frozen dataclass (additive: the
Whale ``HybridPlan`` keeps its meaning). Nesting as Whale writes it: ``split`` (tensor parallel,
Megatron's column-then-row pattern, Shoeybi et al. 2019 §3) over ``tp`` GPUs inside each of ``pp``
pipeline stages on disjoint GPUs, and ``replicate`` (data parallel) over the whole ``dp`` times:
tp · pp · dp GPUs. ZeRO (Rajbhandari et al. 2020) stage 0-3 = FSDP's no-shard / (optimizer
only) / shard-grad-op / full-shard. Recompute (Korthikanti et al. 2022): none, selective (the
attention core), full (every layer's forward, keeping the layer input).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "gpipe"]


@dataclass(frozen=True)
class GPTConfig:
    """A GPT (decoder-only transformer) as Megatron builds it."""

    # Hidden size h.
    hidden: int
    # Attention heads a.
    heads: int
    # Transformer layers L.
    layers: int
    # Sequence length s (tokens per sample).
    seq: int = 1024
    # Vocabulary size before padding (GPT-2's BPE: 50257).
    vocab: int = 50257
    # Feed-forward width as a multiple of h (GPT: 4).
    ffn_mult: int = 4
    # Megatron pads the vocabulary to a multiple of this x the TP degree (--make-vocab-size-divisible-by).
    vocab_divisible_by: int = 128

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "layers", "seq", "vocab", "ffn_mult", "vocab_divisible_by"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"heads: must divide hidden={self.hidden}, got {self.heads}")

    def padded_vocab(self, tp: int) -> int:
        """Megatron's padded vocabulary: the next multiple of vocab_divisible_by · tp."""
        m = self.vocab_divisible_by * tp
        return -(-self.vocab // m) * m

    def layer_params(self) -> int:
        """Parameters of one transformer layer: 12h² + 13h (QKV, proj, 2 MLP linears, biases, 2 LNs)."""
        h, f = self.hidden, self.ffn_mult * self.hidden
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h

    def embedding_params(self, tp: int = 1) -> int:
        """Word (padded vocabulary) and position embeddings."""
        return self.padded_vocab(tp) * self.hidden + self.seq * self.hidden

    def params(self) -> int:
        """All parameters (output layer tied to the word embedding; final layer norm included)."""
        return self.layers * self.layer_params() + self.embedding_params() + 2 * self.hidden


@dataclass(frozen=True)
class ThreeDPlan:
    """One 3D-parallel training configuration; tp · pp · dp GPUs, global batch = micro · num_micro · dp."""

    # Tensor-parallel degree inside a stage (Megatron column/row-parallel attention and MLP).
    tp: int = 1
    # Pipeline stages (disjoint GPUs; layers split evenly).
    pp: int = 1
    # Data-parallel replicas of the whole pipeline.
    dp: int = 1
    # Samples per micro-batch.
    micro_batch: int = 1
    # Micro-batches per iteration and replica (gradient accumulation steps).
    num_micro_batches: int = 1
    # ZeRO stage: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters sharded over dp.
    zero_stage: int = 0
    # Activation recompute.
    recompute: Recompute = "none"
    # Megatron sequence parallelism (norms and dropouts split over tp; all-gather/reduce-scatter).
    sequence_parallel: bool = False
    # Fused IO-aware attention (FlashAttention) instead of Megatron's bmm + fused softmax + bmm.
    fused_attention: bool = False
    # Pipeline schedule.
    schedule: Schedule = "1f1b"
    # Gradients all-reduced in buckets overlapped with backward (DDP); False: after the backward.
    overlap_grad_sync: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch", "num_micro_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage: must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.recompute not in ("none", "selective", "full"):
            raise ValueError(f"recompute: must be none, selective or full, got {self.recompute!r}")
        if self.schedule not in ("1f1b", "gpipe"):
            raise ValueError(f"schedule: must be 1f1b or gpipe, got {self.schedule!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.num_micro_batches * self.dp

    def check(self, cfg: GPTConfig) -> None:
        """ValueError naming the field when the plan cannot shard ``cfg``."""
        if cfg.heads % self.tp:
            raise ValueError(f"tp: must divide heads={cfg.heads}, got {self.tp}")
        if cfg.layers % self.pp:
            raise ValueError(f"pp: must divide layers={cfg.layers}, got {self.pp}")
        if self.sequence_parallel and cfg.seq % self.tp:
            raise ValueError(f"sequence_parallel: tp={self.tp} must divide seq={cfg.seq}")
