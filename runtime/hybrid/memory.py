"""An emulated GPU's memory: every tensor the device holds is allocated against its type's capacity.

A CPU process cannot be given a GPU's memory limit, so each emulated device keeps a ledger:
``allocate(what, nbytes)`` adds the bytes a real device would hold (at full, unscaled size) and
raises ``DeviceOutOfMemory`` the moment the total would pass ``capacity_bytes``, as a CUDA
allocator would; in replay mode it also allocates a host buffer of ``nbytes / scale`` so the
testbed holds the scaled footprint for real. The worker turns the exception into an explicit
``oom`` result (``runtime.hybrid.run.HybridRun.status``), not a crash.
"""

from __future__ import annotations

import math

import torch

GB = 1e9


class DeviceOutOfMemory(Exception):
    """An allocation that does not fit the emulated device; the message says what and how much."""


class DeviceMemory:
    """The ledger of one emulated device (not thread-safe: the worker's main thread owns it)."""

    def __init__(self, device: str, type_name: str, capacity_bytes: float, scale: float = 0.0) -> None:
        self.device, self.type_name, self.capacity = device, type_name, capacity_bytes
        self.scale = scale  # > 0: back every allocation by a host buffer of nbytes / scale
        self.used = 0.0
        self.peak = 0.0
        self.items: dict[str, float] = {}
        self._buffers: dict[str, torch.Tensor] = {}

    def allocate(self, what: str, nbytes: float) -> None:
        if self.used + nbytes > self.capacity:
            held = ", ".join(f"{k} {v / GB:.2f}" for k, v in self.items.items()) or "nothing"
            raise DeviceOutOfMemory(
                f"out of memory on {self.device} ({self.type_name}): allocating {what} "
                f"{nbytes / GB:.2f} GB with {self.used / GB:.2f} GB in use > {self.capacity / GB:.2f} GB "
                f"(holding: {held})"
            )
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        self.items[what] = self.items.get(what, 0.0) + nbytes
        if self.scale > 0 and nbytes > 0:
            self._buffers[what] = torch.empty(max(1, math.ceil(nbytes / 4 / self.scale)), dtype=torch.float32)

    def free(self, what: str) -> None:
        self.used -= self.items.pop(what, 0.0)
        self._buffers.pop(what, None)
