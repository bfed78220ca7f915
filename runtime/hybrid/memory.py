"""An emulated GPU's memory: every tensor the device holds is allocated against its type's capacity.

A CPU process cannot be given a GPU's memory limit, so each emulated device keeps a ledger:
``allocate(what, nbytes)`` adds the bytes a real device would hold (at full, unscaled size: the
parameters, gradients, optimizer state and stashed activations the worker's TaskGraphs hold, see
``layout.Layout.memory_items``) and raises ``DeviceOutOfMemory`` the moment the total would pass
``capacity_bytes``, as a CUDA allocator would (the bytes are counted by ``simulator.memory``'s
rule, the planner's); ``free`` returns them (activations after each
backward). The ledger counts bytes; it does not reserve host memory (the replayed tensors are
scaled down and the sum over sixteen emulated GPUs would not fit this host). The worker turns the
exception into an explicit ``oom`` result (``runtime.hybrid.run.HybridRun.status``), not a crash.
"""

from __future__ import annotations

from simulator.memory import GB

__all__ = ["GB", "DeviceMemory", "DeviceOutOfMemory"]


class DeviceOutOfMemory(Exception):
    """An allocation that does not fit the emulated device; the message says what and how much."""


class DeviceMemory:
    """The ledger of one emulated device (not thread-safe: the worker's main thread owns it)."""

    def __init__(self, device: str, type_name: str, capacity_bytes: float) -> None:
        self.device, self.type_name, self.capacity = device, type_name, capacity_bytes
        self.used = 0.0
        self.peak = 0.0
        self.items: dict[str, float] = {}

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

    def free(self, what: str) -> None:
        self.used -= self.items.pop(what, 0.0)
