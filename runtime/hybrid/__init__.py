"""Executing Whale hybrid plans: replicate with uneven shares, split (tensor sharding), bridges, OOM."""

from runtime.hybrid.config import HybridConfig
from runtime.hybrid.memory import DeviceMemory, DeviceOutOfMemory
from runtime.hybrid.run import HybridRun, run_hybrid

__all__ = ["DeviceMemory", "DeviceOutOfMemory", "HybridConfig", "HybridRun", "run_hybrid"]
