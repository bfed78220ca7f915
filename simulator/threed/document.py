"""The ``hybrid_3d`` plan document: one 3D-parallel plan as a search stores it (candidate and trial JSON).

A hybrid search in the 3D space (``plan_options.space = "3d"``, ``service.plans.hybrid_threed``)
proposes these. The document carries what the plan is (the GPT it shards, the TP x PP x DP layout,
ZeRO stage, recompute, micro-batch size and count, fused attention) and what the models predicted
for it on the cluster's GPU: the iteration time with its parts (``simulator.threed.predict``) and
the peak memory per GPU with its parts and the fit verdict (``simulator.threed.predict_memory``;
the parts are those of the stage with the highest peak). Predictions are labelled as such: nothing
here is a measurement.

Shapes: seconds, bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.threed.cost import ThreeDCost
from simulator.threed.memory import ThreeDMemory
from simulator.threed.plan import GPTConfig, ThreeDPlan


class GPTShape(BaseModel):
    """The transformer the plan shards (``simulator.threed.GPTConfig``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    layers: int = Field(ge=1)
    seq: int = Field(ge=1)
    vocab: int = Field(ge=1)

    @classmethod
    def of(cls, cfg: GPTConfig) -> GPTShape:
        return cls(hidden=cfg.hidden, heads=cfg.heads, layers=cfg.layers, seq=cfg.seq, vocab=cfg.vocab)

    def config(self) -> GPTConfig:
        return GPTConfig(
            hidden=self.hidden, heads=self.heads, layers=self.layers, seq=self.seq, vocab=self.vocab
        )


class Layout(BaseModel):
    """Tensor x pipeline x data parallel degrees (tp · pp · dp GPUs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)


class PredictedTime(BaseModel):
    """``simulator.threed.ThreeDCost`` of one iteration: the total and its parts (seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seconds: float
    pipeline: float
    dp_sync: float
    tied_sync: float
    optimizer: float
    overhead: float
    bubble: float  # fraction of the pipeline the slowest stage idles


class PredictedMemory(BaseModel):
    """Peak bytes per GPU (the stage with the highest peak) by part, the GPU's bytes and the verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    peak_bytes: float
    capacity_bytes: float
    fits: bool
    peak_stage: int
    # parameters, gradients, optimizer state, activations, pipeline buffers, fragmentation margin
    # (the allocator's reserved beyond allocated), NCCL buffers, CUDA context: they sum to peak_bytes
    parts: dict[str, float]
    stage_peaks: tuple[float, ...]


class ThreeDDocument(BaseModel):
    """One 3D plan of a hybrid search (``"kind": "hybrid_3d"``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["hybrid_3d"] = "hybrid_3d"
    model: GPTShape
    layout: Layout
    micro_batch: int = Field(ge=1)
    num_micro_batches: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    zero_stage: int = Field(ge=0, le=3)
    recompute: Literal["none", "selective", "full"]
    fused_attention: bool = False
    sequence_parallel: bool = False
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    device: str
    predicted: PredictedTime
    memory: PredictedMemory
    # the ranking the plan came from: plans enumerated, and of them dropped as out of memory
    enumerated: int | None = None
    out_of_memory_dropped: int | None = None

    @classmethod
    def of(
        cls, cfg: GPTConfig, plan: ThreeDPlan, cost: ThreeDCost, memory: ThreeDMemory, device: str
    ) -> ThreeDDocument:
        worst = max(range(len(memory.stages)), key=lambda i: memory.stages[i].total)
        st = memory.stages[worst]
        parts = {
            "parameters": st.params,
            "gradients": st.grads,
            "optimizer state": st.optimizer,
            "activations": st.activations,
            "pipeline buffers": st.buffers,
            "fragmentation margin": st.allocated * (st.fragmentation - 1.0),
            "NCCL buffers": st.nccl,
            "CUDA context": st.context,
        }
        return cls(
            model=GPTShape.of(cfg),
            layout=Layout(tp=plan.tp, pp=plan.pp, dp=plan.dp),
            micro_batch=plan.micro_batch,
            num_micro_batches=plan.num_micro_batches,
            global_batch=plan.global_batch,
            zero_stage=plan.zero_stage,
            recompute=plan.recompute,
            fused_attention=plan.fused_attention,
            sequence_parallel=plan.sequence_parallel,
            schedule=plan.schedule,
            device=device,
            predicted=PredictedTime(
                seconds=cost.total,
                pipeline=cost.pipeline,
                dp_sync=cost.dp_sync,
                tied_sync=cost.tied_sync,
                optimizer=cost.optimizer,
                overhead=cost.overhead,
                bubble=cost.bubble,
            ),
            memory=PredictedMemory(
                peak_bytes=memory.peak,
                capacity_bytes=memory.capacity,
                fits=memory.fits,
                peak_stage=worst,
                parts=parts,
                stage_peaks=tuple(s.total for s in memory.stages),
            ),
        )

    def plan(self) -> ThreeDPlan:
        return ThreeDPlan(
            tp=self.layout.tp,
            pp=self.layout.pp,
            dp=self.layout.dp,
            micro_batch=self.micro_batch,
            num_micro_batches=self.num_micro_batches,
            zero_stage=self.zero_stage,
            recompute=self.recompute,
            sequence_parallel=self.sequence_parallel,
            fused_attention=self.fused_attention,
            schedule=self.schedule,
        )

    @property
    def layout_text(self) -> str:
        lay = self.layout
        return f"TP{lay.tp}×PP{lay.pp}×DP{lay.dp}"

    def summary(self) -> str:
        """One line: layout, ZeRO, recompute, micro-batches, attention."""
        attn = ", fused attention" if self.fused_attention else ""
        return (
            f"{self.layout_text}, ZeRO-{self.zero_stage}, recompute {self.recompute}, "
            f"{self.num_micro_batches} micro-batches of {self.micro_batch}{attn}"
        )

    def memory_line(self) -> str:
        """Predicted peak per GPU, its verdict and its largest parts, in GB (1e9 bytes)."""
        m = self.memory
        verdict = "fits" if m.fits else "out of memory"
        states = m.parts["parameters"] + m.parts["gradients"] + m.parts["optimizer state"]
        other = m.peak_bytes - states - m.parts["activations"]
        return (
            f"{m.peak_bytes / 1e9:.1f} of {m.capacity_bytes / 1e9:.0f} GB per GPU predicted, {verdict} "
            f"(model states {states / 1e9:.1f}, activations {m.parts['activations'] / 1e9:.1f}, "
            f"other {other / 1e9:.1f})"
        )
