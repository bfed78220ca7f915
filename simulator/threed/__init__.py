"""3D-parallel transformer plans (tensor x pipeline x data, ZeRO, recompute): plans, cost, memory.

Public API:
    GPTConfig, ThreeDPlan                      the model and the plan vocabulary
    predict(cfg, plan, device, comms) -> ThreeDCost   one iteration's seconds and parts
    Collectives, BusBwCurve, NcclTable, read_luts, fit_curve, A100_NVSWITCH   NCCL figures
    stage_spec                                 one TP rank's layers of a stage, for layer_times
    predict_memory(cfg, plan, device) -> ThreeDMemory   peak bytes per stage, fits or OOM
"""

from simulator.threed.cost import FrameworkParams, ThreeDCost, predict, stage_params, tp_comm_seconds
from simulator.threed.layers import flash_bytes, stage_spec
from simulator.threed.memory import (
    MemoryConfig,
    StageMemory,
    ThreeDMemory,
    layer_activation_bytes,
    predict_memory,
)
from simulator.threed.nccl import (
    A100_NVSWITCH,
    BusBwCurve,
    Collectives,
    NcclTable,
    fit_curve,
    read_lut,
    read_luts,
)
from simulator.threed.plan import GPTConfig, Recompute, ThreeDPlan

__all__ = [
    "A100_NVSWITCH",
    "BusBwCurve",
    "Collectives",
    "FrameworkParams",
    "GPTConfig",
    "MemoryConfig",
    "NcclTable",
    "Recompute",
    "StageMemory",
    "ThreeDCost",
    "ThreeDMemory",
    "ThreeDPlan",
    "fit_curve",
    "flash_bytes",
    "layer_activation_bytes",
    "predict",
    "predict_memory",
    "read_lut",
    "read_luts",
    "stage_params",
    "stage_spec",
    "tp_comm_seconds",
]
