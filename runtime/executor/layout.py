"""RankLayout: which process is which in a session (workers per GPU, one server per node)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simulator.spec import ClusterSpec


@dataclass(frozen=True)
class RankLayout:
    """Ranks of one session's process group.

    Workers are ranks ``0 .. G-1`` in ``ClusterSpec.devices`` order; then one PS server per node,
    rank ``G + node`` (every node gets one, so any strategy can place shards anywhere without a
    restart; an idle server only waits). The coordinator (TCPStore master and the driver's
    contact) is the lowest rank on node 0, because the launcher's ``master_addr`` is on node 0.
    ``servers=False`` (``runtime.apply`` in a user's job): workers only, no PS server ranks.
    """

    cluster: ClusterSpec
    servers: bool = True

    @property
    def num_workers(self) -> int:
        return self.cluster.num_gpus

    @property
    def num_nodes(self) -> int:
        return len(self.cluster.nodes)

    @property
    def world(self) -> int:
        return self.num_workers + (self.num_nodes if self.servers else 0)

    def server_rank(self, node: int) -> int:
        if not self.servers:
            raise ValueError("this layout has no PS server ranks")
        return self.num_workers + node

    def node_of(self, rank: int) -> int:
        if rank < self.num_workers:
            return self.cluster.devices[rank].node
        return rank - self.num_workers

    def local_index(self, rank: int) -> int:
        """The GPU index on its node (workers), or -1 (servers)."""
        return self.cluster.devices[rank].local if rank < self.num_workers else -1

    def is_worker(self, rank: int) -> bool:
        return rank < self.num_workers

    @cached_property
    def node_workers(self) -> tuple[tuple[int, ...], ...]:
        """Worker ranks of every node (empty for a CPU-only node)."""
        out: list[list[int]] = [[] for _ in self.cluster.nodes]
        for r, d in enumerate(self.cluster.devices):
            out[d.node].append(r)
        return tuple(tuple(ws) for ws in out)

    def leader(self, node: int) -> int:
        """The first worker of ``node`` (it speaks for the node in hierarchical schemes)."""
        return self.node_workers[node][0]

    @cached_property
    def leaders(self) -> tuple[int, ...]:
        return tuple(ws[0] for ws in self.node_workers if ws)

    @property
    def coordinator(self) -> int:
        return self.node_workers[0][0] if self.node_workers[0] else self.server_rank(0)
