"""Traffic shaping of one direction of a node's link: the `tc` commands, built as argv lists.

A direction is shaped by, from the root down:

* ``netem delay`` (only when a delay is asked for and the kernel has netem; its child holds the
  rest), as docs/architecture.md ("The emulated-cluster testbed") prescribes: netem as the
  parent, the rate shaper as its child;
* a rate shaper: ``tbf`` at the link rate; or, when a per-flow cap (``ClusterSpec.single_flow_gbps``)
  is lower than the link rate, ``htb`` with one class at the link rate and under it one class per
  destination node, capped at the per-flow rate and selected by a ``u32`` match on the destination
  address. gloo opens one TCP connection per pair of ranks, so "one flow" is approximated by "the
  traffic towards one node"; this is exactly the pairwise bandwidth ``ClusterSpec.link_gbps``
  gives the analytical model (min of both NICs and the per-flow cap).

Buffer sizes (why these numbers): ``burst`` is the token bucket depth, the bytes that may leave
back-to-back at line speed. It must hold at least one full-size frame (veth MTU 1500; larger GSO
packets are segmented by tbf) and enough traffic to cover the scheduling delay of the shaper's
dequeue: on two busy shared cores softirqs run late, tokens beyond ``burst`` are lost, and the link
under-delivers. Measured with a 4-node gloo all-reduce at 200 Mbit/s: 2 ms of traffic gave 73-79%
of the rate, 5 ms 91%, 10 ms 94-96%, 20 ms 97%. A deeper bucket lets a message that starts after
an idle gap overshoot the rate by at most ``burst`` bytes, so it is kept at ``max(10 ms of
traffic, 32 KiB)``, small next to the MB-sized gradient messages of a step.

``limit`` (the queue) is ``max(50 ms of traffic, 256 KiB)``: deep
enough that several TCP senders converging on one port (a PS server's ingress) do not drop and
retransmit, and shallow enough that the queueing delay stays well below a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_BURST_BYTES = 32 * 1024
BURST_SECONDS = 0.010
MIN_LIMIT_BYTES = 256 * 1024
QUEUE_SECONDS = 0.050


@dataclass(frozen=True)
class Shape:
    """How one direction of one link is shaped."""

    rate_mbit: float  # the link rate, Mbit/s (already divided by the testbed's scale)
    delay_us: float = 0.0  # one-way delay added in this direction, microseconds
    # destination address -> per-flow cap in Mbit/s; empty: no per-flow cap below the link rate
    flow_caps: Mapping[str, float] = field(default_factory=dict)


def burst_bytes(rate_mbit: float) -> int:
    return max(MIN_BURST_BYTES, int(rate_mbit * 1e6 / 8 * BURST_SECONDS))


def limit_bytes(rate_mbit: float) -> int:
    return max(MIN_LIMIT_BYTES, int(rate_mbit * 1e6 / 8 * QUEUE_SECONDS))


def _rate(mbit: float) -> str:
    return f"{max(1, round(mbit * 1000))}kbit"


def tc_commands(dev: str, shape: Shape, *, netem: bool) -> list[list[str]]:
    """The `tc` argv lists (to run inside the device's namespace) that shape ``dev``'s egress.

    ``netem``: whether the kernel has the netem qdisc; without it a requested delay is dropped
    (the caller records that latency was not emulated).
    """
    if shape.rate_mbit <= 0:
        raise ValueError(f"rate_mbit: must be > 0, got {shape.rate_mbit}")
    cmds: list[list[str]] = []
    parent = ["root"]
    if netem and shape.delay_us > 0:
        packets = max(1000, limit_bytes(shape.rate_mbit) // 1500 * 2)
        cmds.append(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay",
                     f"{shape.delay_us:.0f}us", "limit", str(packets)])  # fmt: skip
        parent = ["parent", "1:1"]
    burst = str(burst_bytes(shape.rate_mbit))
    caps = {a: c for a, c in shape.flow_caps.items() if c < shape.rate_mbit}
    if not caps:
        cmds.append(["tc", "qdisc", "add", "dev", dev, *parent, "handle", "10:", "tbf",
                     "rate", _rate(shape.rate_mbit), "burst", burst,
                     "limit", str(limit_bytes(shape.rate_mbit))])  # fmt: skip
        return cmds
    link = _rate(shape.rate_mbit)
    cmds.append(["tc", "qdisc", "add", "dev", dev, *parent, "handle", "10:", "htb", "default", "ff"])
    cmds.append(["tc", "class", "add", "dev", dev, "parent", "10:", "classid", "10:1", "htb",
                 "rate", link, "ceil", link, "burst", burst, "cburst", burst])  # fmt: skip
    share = shape.rate_mbit / (len(caps) + 1)
    for i, (addr, cap) in enumerate(sorted(caps.items()), start=2):
        cls = f"10:{i:x}"
        cmds.append(["tc", "class", "add", "dev", dev, "parent", "10:1", "classid", cls, "htb",
                     "rate", _rate(min(share, cap)), "ceil", _rate(cap), "burst", burst,
                     "cburst", burst])  # fmt: skip
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", "10:", "protocol", "ip", "prio", "1",
                     "u32", "match", "ip", "dst", f"{addr}/32", "flowid", cls])  # fmt: skip
    # everything else (ARP, traffic to addresses without a cap) gets the whole link
    cmds.append(["tc", "class", "add", "dev", dev, "parent", "10:1", "classid", "10:ff", "htb",
                 "rate", _rate(share), "ceil", link, "burst", burst, "cburst", burst])  # fmt: skip
    return cmds
