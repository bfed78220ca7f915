"""Multi-homed emulated clusters: a node on several networks, each interface shaped on its own.

The single-homed ``Testbed`` gives each node one shaped NIC. HeterPS's cost model (``simulator.
analytical.heterogeneous``) charges three kinds of traffic at three rates: activations between
stages over the units' NICs, sparse rows over a GPU's host link (PCIe) and dense-weight
synchronisation over the servers' full NICs. ``MultiHomedTestbed`` builds that topology with the
same lifecycle, naming and helpers (``testbed.Namespaces``, ``shaping.tc_commands``):

- the switch namespace holds bridges ``bdata``, ``bsync`` and ``bhost`` ('brd' would read as
  `ip link`'s broadcast keyword), one per network some node uses;
- node ``i`` has an interface on each network it joins (``eth0`` data, ``eth1`` sync, ``eth2``
  host), each network its own /24 of 198.18.0.0/15, so the kernel routes each kind of traffic
  through its own interface;
- an interface with a rate is shaped both ways (its egress in the node, its bridge port's egress
  in the switch), as ``Testbed`` does; an interface without a rate is not shaped.

Every process listens on ``listen(node)`` and is reached at ``endpoint(node, network)``.
``MultiHomedLoopback`` is the fallback without namespaces: every node on 127.0.0.1 with its own
port, nothing shaped (tests of the logic; its figures are not measurements of a cluster).
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from runtime.launch import free_port
from runtime.testbed import netns
from runtime.testbed.shaping import Shape, limit_bytes, tc_commands
from runtime.testbed.testbed import Namespaces

NETWORKS = ("data", "sync", "host")
_IF = {"data": "eth0", "sync": "eth1", "host": "eth2"}
_BR = {"data": "bdata", "sync": "bsync", "host": "bhost"}
_PORT = {"data": "d", "sync": "s", "host": "h"}
PORT = 7000  # every process listens here on all its interfaces (one port space per namespace)


@dataclass(frozen=True)
class HomedNode:
    """One node: the networks it joins and each interface's rate (Mbit/s; None: unshaped)."""

    name: str
    rates: Mapping[str, float | None] = field(default_factory=dict)


def _check(nodes: Sequence[HomedNode]) -> tuple[HomedNode, ...]:
    if len(nodes) > 250:
        raise ValueError(f"nodes: at most 250 fit a /24, got {len(nodes)}")
    for n in nodes:
        bad = set(n.rates) - set(NETWORKS)
        if bad:
            raise ValueError(f"nodes.{n.name}.rates: unknown networks {sorted(bad)}")
        if not n.rates:
            raise ValueError(f"nodes.{n.name}.rates: a node needs at least one network")
    return tuple(nodes)


class MultiHomedTestbed(Namespaces):
    """The namespaces, bridges and shaped interfaces of ``nodes``; a context manager."""

    def __init__(
        self,
        nodes: Sequence[HomedNode],
        data_queue_bytes: int | None = None,
        *,
        ack_priority: bool = False,
        clean_stale: bool = True,
    ) -> None:
        """``data_queue_bytes``: the tbf queue limit of the data network's links (None: the testbed's
        default, max(50 ms of traffic, 256 KiB)); a diagnostic of the reverse traffic's effect.
        ``ack_priority``: pure TCP ACKs skip the data queued on a shaped link (see ``_ack_band``)."""
        self.nodes = _check(nodes)
        super().__init__(len(self.nodes), clean_stale=clean_stale)
        self.data_queue_bytes = data_queue_bytes
        self.ack_priority = ack_priority
        base = int(self.id, 16) % 170 * 3  # three consecutive /24s of the 512 in 198.18.0.0/15
        self._subnet = {
            net: f"198.{18 + (base + k) // 256}.{(base + k) % 256}" for k, net in enumerate(NETWORKS)
        }

    def endpoint(self, node: int, net: str) -> tuple[str, int]:
        """Where the others reach node ``node``'s process on network ``net``."""
        if net not in self.nodes[node].rates:
            raise ValueError(f"node {self.nodes[node].name!r} is not on the {net} network")
        return (f"{self._subnet[net]}.{node + 1}", PORT)

    def address(self, node: int) -> str:
        """The node's address on the first network it joins (the Launcher protocol's)."""
        return self.endpoint(node, next(iter(self.nodes[node].rates)))[0]

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

    def _build(self) -> None:
        used = {net for n in self.nodes for net in n.rates}
        for net in NETWORKS:
            if net in used:
                netns.add_bridge(self.switch_ns, _BR[net])
        for i, node in enumerate(self.nodes):
            self._add_node(i)
            for net, rate in node.rates.items():
                dev, port = _IF[net], f"{_PORT[net]}{i}"
                self._link(i, dev, port, _BR[net], f"{self.endpoint(i, net)[0]}/24")
                if rate is not None:
                    self._shape(i, dev, port, functools.partial(self._shaper, net, rate=rate))

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


class MultiHomedLoopback:
    """Every node on 127.0.0.1 with its own port; nothing shaped (the fallback, not a testbed)."""

    master_addr = "127.0.0.1"

    def __init__(self, nodes: Sequence[HomedNode]) -> None:
        self.nodes = _check(nodes)
        self.ports = [free_port() for _ in nodes]  # the kernel's free ports (a short race until bound)

    def endpoint(self, node: int, net: str) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[node])

    def address(self, node: int) -> str:
        return "127.0.0.1"

    def listen(self, node: int) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[node])

    @property
    def environment(self) -> dict[str, object]:
        return {"testbed": "loopback", "shaped": False}

    def __enter__(self) -> MultiHomedLoopback:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str] | None = None, **popen_kwargs: Any
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), env={**os.environ, **(env or {})}, **popen_kwargs)


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
