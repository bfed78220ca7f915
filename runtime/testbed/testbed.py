"""Testbed: an emulated cluster of network namespaces on a bridge, each node's link shaped with tc.

Topology (docs/architecture.md, "The emulated-cluster testbed"): one switch namespace holding a Linux bridge;
one namespace per node; a veth pair from each node (``eth0`` inside the node) to a bridge port
(``p<i>`` in the switch). Node ``i`` gets ``198.<18|19>.<id>.<i+1>/24``, where ``id`` is drawn per
testbed so that two testbeds never share a subnet. Both directions of a node's link are shaped to
``node.nic_gbps / scale``: the node's ``eth0`` egress bounds what it sends, the bridge port's egress
bounds what it receives (a NIC is full duplex and limited both ways; shaping only one side would
let N senders flood a single receiver N times faster than its NIC). The node's latency is split
half per direction, so two nodes of latency L see a one-way delay of L, as the spec's "one-way
latency of the node's link" reads. Processes of one node share its namespace and talk over
loopback, which is not shaped (intra-node GPU links are 10-100x faster than the NICs; the
executor's intra-node traffic is small next to the cross-node traffic we measure).

Names: namespaces are ``stb-<owner pid>-<hex id>-sw`` / ``-n<i>``; interfaces are created directly
inside the namespaces, so no name ever appears in the root namespace and all stay <= 15 characters.
``cleanup_stale`` removes namespaces whose owner pid is dead.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from runtime.testbed import netns
from runtime.testbed.shaping import Shape, tc_commands
from simulator.spec import ClusterSpec

PREFIX = "stb"
NODE_IF = "eth0"
BRIDGE = "br0"
# a testbed's namespaces, and the probe namespace of netns.namespaces_usable / qdisc_available
_NAME = re.compile(rf"^{PREFIX}(?:-(\d+)-[0-9a-f]+-(?:sw|n\d+)|probe-(\d+))$")


class TestbedUnavailable(netns.NetnsError):
    """Network namespaces cannot be used on this machine (not root, no iproute2, ...)."""

    __test__ = False  # not a pytest test class


def cleanup_stale() -> list[str]:
    """Remove testbed namespaces left behind by crashed runs (their owner pid is dead).

    Processes still inside such a namespace were started by that dead testbed and are killed.
    Returns the names removed. Namespaces of live testbeds (this process's or another's) are kept.
    """
    removed = []
    for name in netns.list_namespaces():
        m = _NAME.match(name)
        if m is None or netns.pid_alive(int(m.group(1) or m.group(2))):
            continue
        netns.destroy_namespace(name)
        removed.append(name)
    return removed


class Testbed:
    """An emulated ``cluster`` whose NIC rates are divided by ``scale``; a context manager.

    Implements ``runtime.launch.Launcher``. Not thread-safe to build or tear down; ``spawn`` may be
    called from any thread once built. Teardown (``close``, also run by ``__exit__``, atexit and
    SIGTERM) kills the processes left in its namespaces and deletes them; it is idempotent.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        cluster: ClusterSpec,
        scale: float = 1.0,
        *,
        emulate_latency: bool = True,  # add each node's latency_us with netem (if the kernel has it)
        flow_cap: bool = True,  # honour cluster.single_flow_gbps per destination node
        clean_stale: bool = True,  # run cleanup_stale() before building
    ) -> None:
        if scale <= 0:
            raise ValueError(f"scale: must be > 0, got {scale}")
        if len(cluster.nodes) > 253:
            raise ValueError(f"cluster.nodes: at most 253 nodes fit a /24, got {len(cluster.nodes)}")
        self.cluster = cluster
        self.scale = scale
        self.emulate_latency = emulate_latency
        self.flow_cap = flow_cap
        self.clean_stale = clean_stale
        self.id = secrets.token_hex(3)
        subnet = int(self.id, 16) % 512
        self._net = f"198.{18 + subnet // 256}.{subnet % 256}"
        self._base = f"{PREFIX}-{os.getpid()}-{self.id}"
        self.switch_ns = f"{self._base}-sw"
        self.node_ns = [f"{self._base}-n{i}" for i in range(len(cluster.nodes))]
        self._created: list[str] = []
        self._latency_emulated = False
        self._built = False
        self._old_sigterm: Any = None

    # ----------------------------------------------------------------- Launcher protocol
    @property
    def master_addr(self) -> str:
        return self.address(0)

    def address(self, node: int) -> str:
        if not 0 <= node < len(self.cluster.nodes):
            raise IndexError(f"node: {node} is not in 0..{len(self.cluster.nodes) - 1}")
        return f"{self._net}.{node + 1}"

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **popen_kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside node ``node``'s namespace, gloo bound to the node's interface."""
        if not self._built:
            raise RuntimeError("Testbed.spawn: the testbed is not built (use it as a context manager)")
        self.address(node)
        full = {**os.environ, **env, "GLOO_SOCKET_IFNAME": NODE_IF, "TP_SOCKET_IFNAME": NODE_IF}
        return subprocess.Popen(netns.in_ns(self.node_ns[node], argv), env=full, **popen_kwargs)

    # ----------------------------------------------------------------- description
    def rate_mbit(self, node: int) -> float:
        """The shaped rate of node ``node``'s link, each direction, Mbit/s."""
        return self.cluster.nodes[node].nic_gbps * 1000 / self.scale

    def flow_cap_mbit(self) -> float | None:
        """The per-destination cap (single_flow_gbps / scale), if one is applied."""
        sf = self.cluster.single_flow_gbps
        return sf * 1000 / self.scale if (sf is not None and self.flow_cap) else None

    @property
    def environment(self) -> dict[str, Any]:
        """What a Measurement's ``environment`` should say about the network it ran on."""
        return {
            "testbed": "netns",
            "shaped": True,
            "testbed_id": self.id,
            "scale": self.scale,
            "rates_mbit": [round(self.rate_mbit(i), 3) for i in range(len(self.cluster.nodes))],
            "flow_cap_mbit": self.flow_cap_mbit(),
            "latency_emulated": self._latency_emulated,
            "intra_node": "loopback, unshaped",
        }

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> Testbed:
        self.build()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def build(self) -> None:
        """Create the namespaces, bridge, veths, addresses and shapers; tear down if any step fails."""
        if self._built:
            return
        reason = netns.namespaces_usable()
        if reason is not None:
            raise TestbedUnavailable(f"cannot build the emulated cluster: {reason}")
        if self.clean_stale:
            cleanup_stale()
        atexit.register(self.close)
        self._old_sigterm = netns.sigterm_as_exit()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self._built = True

    def _build(self) -> None:
        # Recorded before it exists: a SIGTERM during `ip netns add` still has it deleted by close().
        self._created.append(self.switch_ns)
        netns.add_namespace(self.switch_ns)
        netns.add_bridge(self.switch_ns, BRIDGE)
        has_netem = self.emulate_latency and any(n.latency_us > 0 for n in self.cluster.nodes)
        has_netem = has_netem and netns.qdisc_available("netem")
        self._latency_emulated = has_netem or not any(n.latency_us > 0 for n in self.cluster.nodes)
        cap = self.flow_cap_mbit()
        for i, node in enumerate(self.cluster.nodes):
            ns, port = self.node_ns[i], f"p{i}"
            self._created.append(ns)
            netns.add_namespace(ns)
            netns.add_veth(ns, NODE_IF, self.switch_ns, port)
            netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "master", BRIDGE])
            netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "up"])
            netns.run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", NODE_IF])
            netns.run(["ip", "-n", ns, "link", "set", NODE_IF, "up"])
            rate, delay = self.rate_mbit(i), node.latency_us / 2
            caps = {}
            if cap is not None:
                caps = {self.address(j): cap for j in range(len(self.cluster.nodes)) if j != i}
            for cmd in tc_commands(NODE_IF, Shape(rate, delay, caps), netem=has_netem):
                netns.run(netns.in_ns(ns, cmd))
            for cmd in tc_commands(port, Shape(rate, delay), netem=has_netem):
                netns.run(netns.in_ns(self.switch_ns, cmd))

    def close(self) -> None:
        """Kill what still runs in the testbed's namespaces and delete them (idempotent)."""
        for ns in reversed(self._created):
            netns.destroy_namespace(ns)
        self._created.clear()
        self._built = False
        atexit.unregister(self.close)
        netns.restore_sigterm(self._old_sigterm)
        self._old_sigterm = None
