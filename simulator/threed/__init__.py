"""3D-parallel transformer plans (tensor x pipeline x data, ZeRO, recompute): plans, cost, memory.

Public API:
    GPTConfig, ThreeDPlan                      the model and the plan vocabulary
    predict(cfg, plan, device, comms) -> ThreeDCost   one iteration's seconds and parts
    Collectives, BusBwCurve, NcclTable, read_luts, fit_curve, A100_NVSWITCH   NCCL figures
    stage_spec                                 one TP rank's layers of a stage, for layer_times
"""

from simulator.threed.cost import FrameworkParams, ThreeDCost, predict, stage_params, tp_comm_seconds
from simulator.threed.layers import flash_bytes, stage_spec
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
    "NcclTable",
    "Recompute",
    "ThreeDCost",
    "ThreeDPlan",
    "fit_curve",
    "flash_bytes",
    "predict",
    "read_lut",
    "read_luts",
    "stage_params",
    "stage_spec",
    "tp_comm_seconds",
]
