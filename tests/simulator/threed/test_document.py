"""The hybrid_3d plan document: its memory parts add up to the model's peak, its plan round-trips."""

from __future__ import annotations

import pytest

from simulator import zoo
from simulator.threed import A100_NVSWITCH, Collectives, GPTConfig, ThreeDPlan, predict, predict_memory
from simulator.threed.document import ThreeDDocument

CFG = GPTConfig(hidden=1024, heads=16, layers=24)


def test_document_carries_the_peak_stage_parts_and_round_trips_the_plan() -> None:
    device = zoo.cluster("A100-40GBx8").device_types[0]
    plan = ThreeDPlan(
        tp=2, pp=2, dp=2, micro_batch=4, num_micro_batches=8, zero_stage=1, recompute="selective"
    )
    mem = predict_memory(CFG, plan, device)
    doc = ThreeDDocument.of(
        CFG, plan, predict(CFG, plan, device, Collectives(A100_NVSWITCH)), mem, device.name
    )
    back = ThreeDDocument.model_validate(doc.model_dump(mode="json"))
    assert back == doc and back.plan() == plan and back.model.config() == CFG
    stage = mem.stages[doc.memory.peak_stage]
    assert doc.memory.peak_bytes == pytest.approx(stage.total) == pytest.approx(mem.peak)
    assert sum(doc.memory.parts.values()) == pytest.approx(mem.peak)
    # ZeRO-1 over dp = 2: 12 B/param of optimizer state halved, fp16 weights and gradients whole
    # 12 B/param / 2 = 6 B/param against 2 B/param of fp16 weights
    assert doc.memory.parts["optimizer state"] == pytest.approx(3.0 * doc.memory.parts["parameters"])
    assert doc.memory.parts["gradients"] == pytest.approx(doc.memory.parts["parameters"])
    assert doc.layout_text == "TP2×PP2×DP2" and doc.global_batch == 64
    assert "ZeRO-1, recompute selective, 8 micro-batches of 4" in doc.summary()
    assert doc.memory.fits and "fits" in doc.memory_line()
