"""Memory feasibility: does a strategy fit in every GPU's memory and every PS server's host memory?

The rule and its assumptions are ``simulator.memory``'s (the runtime measures with the same one).
Applied to a data-parallel strategy, every GPU holds a full replica, and bytes needed per GPU =
    parameters                       sum of variable bytes
  + gradients                        sum of gradient bytes (density-scaled for sparse variables)
  + optimizer state of collective shards   state_factor x shard bytes
                                     (a PS shard's optimizer state lives on its server's host)
  + PowerSGD error-feedback buffers  shard bytes for each PowerSGD-compressed shard
  + activations                      activation_bytes per sample x per-GPU batch x activation_factor
and must not exceed ``device_usable`` x the device's memory. The smallest device of the cluster's
GPU nodes decides.

Per PS server node, bytes needed = sum over hosted shards of shard bytes x (1 parameter copy
+ 1 gradient accumulator + state_factor), against ``host_usable`` x its host memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.memory import (
    GB,
    MemoryConfig,
    StageMemory,
    boundary_bytes,
    stage_memory,
    usable_bytes,
    usable_host_bytes,
)
from simulator.spec import (
    DTYPE_BYTES,
    ClusterSpec,
    CollectiveSync,
    ModelSpec,
    Partition,
    PSSync,
    Strategy,
    Variable,
)

__all__ = ["GB", "Feasibility", "MemoryConfig", "MemoryModel", "StageMemory"]


@dataclass(frozen=True)
class Feasibility:
    """The verdict of the memory check: per-GPU and per-server bytes, and every reason it fails."""

    ok: bool
    device_bytes: float
    device_capacity: float
    host_bytes: dict[str, float]
    reasons: tuple[str, ...]


class MemoryModel:
    """Checks strategies of ``model`` on ``cluster`` against device and host memory."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, config: MemoryConfig | None = None) -> None:
        self.model = model
        self.cluster = cluster
        self.config = config or MemoryConfig()
        c = self.config
        batch = c.batch_size or model.batch_size
        self.state_factor = c.state_factor
        self._params = float(model.param_bytes)
        self._grads = float(sum(v.grad_bytes for v in model.variables))
        self._activations = model.activation_bytes * batch * c.activation_factor
        gpu_nodes = [n for n in cluster.nodes if n.gpus > 0]
        smallest = min(gpu_nodes, key=lambda n: cluster.device_type(n.name).memory_gb)
        self._device_name = cluster.device_type(smallest.name).name
        self.device_capacity = usable_bytes(cluster.device_type(smallest.name), c.device_usable)
        self._bytes: dict[tuple[str, int, int], list[int]] = {}

    def check(self, strategy: Strategy) -> Feasibility:
        """Bytes needed per GPU and per server, and why it does not fit (empty reasons: it fits)."""
        optimizer = 0.0
        powersgd = 0.0
        hosted: dict[str, float] = {}
        by_variable = strategy.by_variable
        for var in self.model.variables:
            vs = by_variable[var.name]
            for nbytes, sync in zip(self._shard_bytes(var, vs.partition), vs.shards, strict=True):
                if isinstance(sync, PSSync):
                    hosted[sync.server] = hosted.get(sync.server, 0.0) + nbytes
                elif isinstance(sync, CollectiveSync):
                    optimizer += self.state_factor * nbytes
                    if sync.compressor.kind == "powersgd":
                        powersgd += nbytes
        device = self._params + self._grads + optimizer + powersgd + self._activations
        reasons = []
        if device > self.device_capacity:
            reasons.append(
                f"device memory: {device / GB:.2f} GB per GPU > {self.device_capacity / GB:.2f} GB usable "
                f"on {self._device_name} (params {self._params / GB:.2f}, grads {self._grads / GB:.2f}, "
                f"optimizer {optimizer / GB:.2f}, powersgd {powersgd / GB:.2f}, "
                f"activations {self._activations / GB:.2f})"
            )
        host_bytes = {}
        for server, shard_bytes in sorted(hosted.items()):
            need = shard_bytes * (2.0 + self.state_factor)
            host_bytes[server] = need
            cap = self.host_capacity_of(server)
            if need > cap:
                reasons.append(
                    f"host memory of PS server {server}: {need / GB:.2f} GB > {cap / GB:.2f} GB usable "
                    f"({shard_bytes / GB:.2f} GB of shards x {2.0 + self.state_factor:g})"
                )
        return Feasibility(
            ok=not reasons,
            device_bytes=device,
            device_capacity=self.device_capacity,
            host_bytes=host_bytes,
            reasons=tuple(reasons),
        )

    def _shard_bytes(self, var: Variable, partition: Partition) -> list[int]:
        key = (var.name, partition.axis, partition.shards)
        if key not in self._bytes:
            per_element = DTYPE_BYTES[var.dtype]
            self._bytes[key] = [math.prod(s) * per_element for s in partition.shard_shapes(var.shape)]
        return self._bytes[key]

    def stage_bytes(self, first: int, last: int, stashed_samples: int, buffer_samples: int) -> StageMemory:
        """Device bytes of a pipeline stage holding layers [first, last) (issue 17, Ada-Grouper §5.1).

        The same rules as ``check``, restricted to the stage's layers: parameters + gradients +
        optimizer state (the stage's replicas all-reduce, so the state lives on the device) +
        activations stashed for backward (activation bytes of the stage's layers x
        ``stashed_samples`` x activation_factor) + point-to-point buffers (the stage's input and
        output activation per sample x ``buffer_samples``).
        """
        return stage_memory(
            self.model,
            first,
            last,
            stashed_samples=stashed_samples,
            buffer_samples=buffer_samples,
            state_factor=self.state_factor,
            activation_factor=self.config.activation_factor,
        )

    def boundary_bytes(self, first: int, last: int) -> float:
        """Point-to-point buffer bytes per sample of a stage holding layers [first, last): its output
        activation and, unless it is the first stage, its input (the previous layer's output)."""
        return boundary_bytes(self.model, first, last)

    def device_capacity_of(self, node: str) -> float:
        """Usable bytes of one GPU of ``node``."""
        return usable_bytes(self.cluster.device_type(node), self.config.device_usable)

    def host_capacity_of(self, node: str) -> float:
        """Usable bytes of ``node``'s host memory for the PS shards it serves."""
        return usable_host_bytes(self.cluster.node(node), self.config.host_usable)

    def headroom(self) -> float:
        """Device bytes left when every variable is PS-synchronised (the strategy-free floor)."""
        return self.device_capacity - (self._params + self._grads + self._activations)
