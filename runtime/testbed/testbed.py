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
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

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


class Namespaces:
    """What every emulated network shares: a switch namespace and one namespace per node, named
    for ``cleanup_stale``; built on entry (refused with TestbedUnavailable where namespaces cannot
    be used), torn down by ``close`` (also run by ``__exit__``, atexit and SIGTERM): it kills the
    processes left in the namespaces and deletes them; idempotent. Subclasses build the links
    (``_build``) and say what a process of a node needs in its environment (``_node_env``).

    Implements ``runtime.launch.Launcher`` with the subclass's ``address``. Not thread-safe to
    build or tear down; ``spawn`` may be called from any thread once built.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, nodes: int, *, clean_stale: bool = True) -> None:
        self.clean_stale = clean_stale
        self.id = secrets.token_hex(3)
        self._base = f"{PREFIX}-{os.getpid()}-{self.id}"
        self.switch_ns = f"{self._base}-sw"
        self.node_ns = [f"{self._base}-n{i}" for i in range(nodes)]
        self._created: list[str] = []
        self._built = False
        self._old_sigterm: Any = None

    def address(self, node: int) -> str:
        raise NotImplementedError

    @property
    def master_addr(self) -> str:
        return self.address(0)

    def _node_env(self, node: int) -> dict[str, str]:
        return {}

    def _build(self) -> None:
        raise NotImplementedError

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen_kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside node ``node``'s namespace with ``env`` added to the environment."""
        if not self._built:
            raise RuntimeError(f"{type(self).__name__}.spawn: not built (use it as a context manager)")
        if not 0 <= node < len(self.node_ns):
            raise IndexError(f"node: {node} is not in 0..{len(self.node_ns) - 1}")
        full = {**os.environ, **(env or {}), **self._node_env(node)}
        return subprocess.Popen(netns.in_ns(self.node_ns[node], argv), env=full, **popen_kwargs)

    def __enter__(self) -> Self:
        self.build()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def build(self) -> None:
        """Create the namespaces and links; tear down if any step fails."""
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
            # Recorded before it exists: a SIGTERM during `ip netns add` still has it deleted by close().
            self._created.append(self.switch_ns)
            netns.add_namespace(self.switch_ns)
            self._build()
        except BaseException:
            self.close()
            raise
        self._built = True

    def _add_node(self, node: int) -> str:
        """Create node ``node``'s namespace (recorded first, as the switch's); its name."""
        ns = self.node_ns[node]
        self._created.append(ns)
        netns.add_namespace(ns)
        return ns

    def _link(self, node: int, dev: str, port: str, bridge: str, cidr: str) -> None:
        """A veth from node ``node`` (``dev``, address ``cidr``) to ``bridge``'s port ``port``, up."""
        ns = self.node_ns[node]
        netns.add_veth(ns, dev, self.switch_ns, port)
        netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "master", bridge])
        netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "up"])
        netns.run(["ip", "-n", ns, "addr", "add", cidr, "dev", dev])
        netns.run(["ip", "-n", ns, "link", "set", dev, "up"])

    def _shape(self, node: int, dev: str, port: str, cmds: Callable[[str], list[list[str]]]) -> None:
        """Run ``cmds(device)`` for both directions: the node's ``dev`` and its bridge ``port``."""
        for ns, d in ((self.node_ns[node], dev), (self.switch_ns, port)):
            for cmd in cmds(d):
                netns.run(netns.in_ns(ns, cmd))

    def close(self) -> None:
        """Kill what still runs in the namespaces and delete them (idempotent)."""
        for ns in reversed(self._created):
            netns.destroy_namespace(ns)
        self._created.clear()
        self._built = False
        atexit.unregister(self.close)
        netns.restore_sigterm(self._old_sigterm)
        self._old_sigterm = None


class Testbed(Namespaces):
    """An emulated ``cluster`` whose NIC rates are divided by ``scale``, one shaped NIC per node;
    a context manager (see ``Namespaces``)."""

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
        super().__init__(len(cluster.nodes), clean_stale=clean_stale)
        self.cluster = cluster
        self.scale = scale
        self.emulate_latency = emulate_latency
        self.flow_cap = flow_cap
        subnet = int(self.id, 16) % 512
        self._net = f"198.{18 + subnet // 256}.{subnet % 256}"
        self._latency_emulated = False

    def address(self, node: int) -> str:
        if not 0 <= node < len(self.cluster.nodes):
            raise IndexError(f"node: {node} is not in 0..{len(self.cluster.nodes) - 1}")
        return f"{self._net}.{node + 1}"

    def _node_env(self, node: int) -> dict[str, str]:
        """gloo (and tensorpipe) bound to the node's one interface."""
        return {"GLOO_SOCKET_IFNAME": NODE_IF, "TP_SOCKET_IFNAME": NODE_IF}

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

    def _build(self) -> None:
        netns.add_bridge(self.switch_ns, BRIDGE)
        has_netem = self.emulate_latency and any(n.latency_us > 0 for n in self.cluster.nodes)
        has_netem = has_netem and netns.qdisc_available("netem")
        self._latency_emulated = has_netem or not any(n.latency_us > 0 for n in self.cluster.nodes)
        cap = self.flow_cap_mbit()
        n = len(self.cluster.nodes)
        for i, node in enumerate(self.cluster.nodes):
            self._add_node(i)
            port = f"p{i}"
            self._link(i, NODE_IF, port, BRIDGE, f"{self.address(i)}/24")
            rate, delay = self.rate_mbit(i), node.latency_us / 2
            caps = {self.address(j): cap for j in range(n) if j != i} if cap is not None else {}
            # the node's egress bounds what it sends (with the per-destination caps), the bridge
            # port's what it receives
            for dev, shape in ((NODE_IF, Shape(rate, delay, caps)), (port, Shape(rate, delay))):
                where = self.node_ns[i] if dev == NODE_IF else self.switch_ns
                for cmd in tc_commands(dev, shape, netem=has_netem):
                    netns.run(netns.in_ns(where, cmd))
