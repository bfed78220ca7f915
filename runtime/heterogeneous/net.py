"""A multi-homed emulated cluster: namespaces on three bridges, each interface shaped on its own.

HeterPS's cost model charges three kinds of traffic at three rates (``simulator.analytical.
heterogeneous``): activations between stages over the units' NICs, sparse rows over a GPU's host
link (PCIe) and dense-weight synchronisation over the servers' full NICs. The issue-5 ``Testbed``
gives each node one shaped NIC, so this module builds its own topology from the same helpers
(``runtime.testbed.netns`` for namespaces and veths, ``runtime.testbed.shaping.tc_commands`` for
the shapers, its naming so ``runtime.testbed.cleanup_stale`` removes leftovers):

- one switch namespace ``stb-<pid>-<id>-sw`` holding bridges ``bdata``, ``bsync`` and
  ``bhost`` ('brd' would read as `ip link`'s broadcast keyword);
- one namespace ``stb-<pid>-<id>-n<i>`` per process, with an interface on each network it uses
  (``eth0`` data, ``eth1`` sync, ``eth2`` host), each in its own /24 of 198.18.0.0/15, so the
  kernel routes each kind of traffic through its own interface;
- an interface with a rate is shaped both ways (its egress in the node, its bridge port's egress
  in the switch), as the issue-5 testbed does; an interface without a rate is not shaped.

``LoopbackNet`` is the fallback without namespaces: every process on 127.0.0.1 with its own port,
nothing shaped (tests of the logic; its figures are not measurements of a cluster).

Not thread-safe to build or close; ``close`` is idempotent and also runs at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from runtime.testbed import netns
from runtime.testbed.shaping import Shape, limit_bytes, tc_commands
from runtime.testbed.testbed import PREFIX, TestbedUnavailable, cleanup_stale

NETWORKS = ("data", "sync", "host")
_IF = {"data": "eth0", "sync": "eth1", "host": "eth2"}
_BR = {"data": "bdata", "sync": "bsync", "host": "bhost"}
_PORT = {"data": "d", "sync": "s", "host": "h"}
PORT = 7000  # every process listens here on all its interfaces (one port space per namespace)


@dataclass(frozen=True)
class NodeSpec:
    """One process's namespace: the networks it joins and each interface's rate (Mbit/s; None: unshaped)."""

    name: str
    rates: Mapping[str, float | None] = field(default_factory=dict)


class NamespaceNet:
    """The namespaces, bridges and shaped interfaces of ``nodes``; a context manager."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        data_queue_bytes: int | None = None,
        *,
        ack_priority: bool = False,
    ) -> None:
        """``data_queue_bytes``: the tbf queue limit of the data network's links (None: the testbed's
        default, max(50 ms of traffic, 256 KiB)); a diagnostic of the reverse traffic's effect.
        ``ack_priority``: pure TCP ACKs skip the data queued on a shaped link (see ``_ack_band``)."""
        if len(nodes) > 250:
            raise ValueError(f"nodes: at most 250 fit a /24, got {len(nodes)}")
        for n in nodes:
            bad = set(n.rates) - set(NETWORKS)
            if bad:
                raise ValueError(f"nodes.{n.name}.rates: unknown networks {sorted(bad)}")
        self.nodes = tuple(nodes)
        self.data_queue_bytes = data_queue_bytes
        self.ack_priority = ack_priority
        self.id = secrets.token_hex(3)
        base = int(self.id, 16) % 170 * 3  # three consecutive /24s of the 512 in 198.18.0.0/15
        self._subnet = {
            net: f"198.{18 + (base + k) // 256}.{(base + k) % 256}" for k, net in enumerate(NETWORKS)
        }
        self._base = f"{PREFIX}-{os.getpid()}-{self.id}"
        self.switch_ns = f"{self._base}-sw"
        self.node_ns = [f"{self._base}-n{i}" for i in range(len(nodes))]
        self._created: list[str] = []
        self._built = False
        self._procs: list[subprocess.Popen[bytes]] = []
        self._old_sigterm: Any = None

    def address(self, node: int, net: str) -> tuple[str, int]:
        if net not in self.nodes[node].rates:
            raise ValueError(f"node {self.nodes[node].name!r} is not on the {net} network")
        return (f"{self._subnet[net]}.{node + 1}", PORT)

    def listen(self, node: int) -> tuple[str, int]:
        return ("0.0.0.0", PORT)

    @property
    def environment(self) -> dict[str, object]:
        return {
            "testbed": "netns",
            "shaped": True,
            "testbed_id": self.id,
            "rates_mbit": {n.name: dict(n.rates) for n in self.nodes},
        }

    def __enter__(self) -> NamespaceNet:
        reason = netns.namespaces_usable()
        if reason is not None:
            raise TestbedUnavailable(f"cannot build the emulated cluster: {reason}")
        cleanup_stale()
        atexit.register(self.close)
        self._old_sigterm = netns.sigterm_as_exit()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self._built = True
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _build(self) -> None:
        self._created.append(self.switch_ns)  # recorded first: a failure while adding still deletes it
        netns.add_namespace(self.switch_ns)
        used = {net for n in self.nodes for net in n.rates}
        for net in NETWORKS:
            if net in used:
                netns.add_bridge(self.switch_ns, _BR[net])
        for i, node in enumerate(self.nodes):
            ns = self.node_ns[i]
            self._created.append(ns)
            netns.add_namespace(ns)
            for net, rate in node.rates.items():
                dev, port = _IF[net], f"{_PORT[net]}{i}"
                netns.add_veth(ns, dev, self.switch_ns, port)
                netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "master", _BR[net]])
                netns.run(["ip", "-n", self.switch_ns, "link", "set", port, "up"])
                netns.run(["ip", "-n", ns, "addr", "add", f"{self.address(i, net)[0]}/24", "dev", dev])
                netns.run(["ip", "-n", ns, "link", "set", dev, "up"])
                if rate is not None:
                    for where, d in ((ns, dev), (self.switch_ns, port)):
                        for cmd in self._shaper(net, d, rate):
                            netns.run(netns.in_ns(where, cmd))

    def _shaper(self, net: str, dev: str, rate: float) -> list[list[str]]:
        cmds = [self._queue(net, cmd) for cmd in tc_commands(dev, Shape(rate), netem=False)]
        if self.ack_priority:
            cmds += _ack_band(dev, self._limit(net, rate))
        return cmds

    def _limit(self, net: str, rate: float) -> int:
        if net == "data" and self.data_queue_bytes is not None:
            return self.data_queue_bytes
        return limit_bytes(rate)

    def _queue(self, net: str, cmd: list[str]) -> list[str]:
        """The tc command with the data network's queue limit replaced, when one is set."""
        if net != "data" or self.data_queue_bytes is None or "limit" not in cmd:
            return cmd
        i = cmd.index("limit")
        return [*cmd[: i + 1], str(self.data_queue_bytes), *cmd[i + 2 :]]

    def spawn(self, node: int, argv: Sequence[str], **kw: object) -> subprocess.Popen[bytes]:
        if not self._built:
            raise RuntimeError("NamespaceNet.spawn: not built (use it as a context manager)")
        proc = subprocess.Popen(netns.in_ns(self.node_ns[node], argv), **kw)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        """Kill every process started here and in the namespaces, delete the namespaces (idempotent)."""
        _kill(self._procs)
        for ns in reversed(self._created):
            netns.destroy_namespace(ns)
        self._created.clear()
        self._built = False
        atexit.unregister(self.close)
        netns.restore_sigterm(self._old_sigterm)
        self._old_sigterm = None


class LoopbackNet:
    """Every node on 127.0.0.1 with its own port; nothing shaped (the fallback, not a testbed)."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.nodes = tuple(nodes)
        self.ports = [_free_port() for _ in nodes]  # the kernel's free ports (a short race until bound)
        self._procs: list[subprocess.Popen[bytes]] = []

    def address(self, node: int, net: str) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[node])

    def listen(self, node: int) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[node])

    @property
    def environment(self) -> dict[str, object]:
        return {"testbed": "loopback", "shaped": False}

    def __enter__(self) -> LoopbackNet:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def spawn(self, node: int, argv: Sequence[str], **kw: object) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv), **kw)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        _kill(self._procs)


def _ack_band(dev: str, limit: int) -> list[list[str]]:
    """Under the tbf of ``tc_commands`` (handle 10:, its class 10:1), an ``htb`` used only as a
    strict-priority scheduler (both classes' rates far above the tbf's, so both stay within their
    rate and htb serves the lower ``prio`` first): class 20:1 takes pure TCP ACKs (IPv4 without
    options, total length < 128 bytes, flags exactly ACK), class 20:2 everything else; each a byte
    fifo of ``limit``. The ACKs still spend the tbf's tokens (they are bytes on the wire)."""
    fast = "100gbit"
    return [
        ["tc", "qdisc", "add", "dev", dev, "parent", "10:1", "handle", "20:", "htb", "default", "2"],
        ["tc", "class", "add", "dev", dev, "parent", "20:", "classid", "20:1", "htb",
         "rate", fast, "ceil", fast, "prio", "0"],
        ["tc", "class", "add", "dev", dev, "parent", "20:", "classid", "20:2", "htb",
         "rate", fast, "ceil", fast, "prio", "1"],
        ["tc", "qdisc", "add", "dev", dev, "parent", "20:1", "handle", "21:", "bfifo", "limit", str(limit)],
        ["tc", "qdisc", "add", "dev", dev, "parent", "20:2", "handle", "22:", "bfifo", "limit", str(limit)],
        ["tc", "filter", "add", "dev", dev, "parent", "20:", "protocol", "ip", "prio", "1", "u32",
         "match", "ip", "protocol", "6", "0xff",
         "match", "u8", "0x05", "0x0f", "at", "0",
         "match", "u16", "0x0000", "0xff80", "at", "2",
         "match", "u8", "0x10", "0xff", "at", "33",
         "flowid", "20:1"],
    ]  # fmt: skip


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)
    procs.clear()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
