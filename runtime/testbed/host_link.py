"""The host's own port on a testbed's switch: processes in the node namespaces reach a service
(the API) running on the host, as the nodes of a real cluster reach the API server (issue 41).

One veth pair: the host end ``st<id>h`` in the root namespace with ``<net>.254/24``, the other end
on the switch's bridge. Unshaped: the API's traffic is not the trial's. Deleting the switch
namespace (``Testbed.close``) removes the peer and with it the host end.
"""

from __future__ import annotations

from runtime.testbed import netns
from runtime.testbed.testbed import BRIDGE, Testbed


def attach_host(bed: Testbed) -> str:
    """Give the host an address on ``bed``'s switch; returns it (nodes reach the host there)."""
    host_if, port = f"st{bed.id}h", f"st{bed.id}s"
    addr = bed.address(0).rsplit(".", 1)[0] + ".254"
    netns.run(["ip", "link", "add", "name", host_if, "type", "veth", "peer", "name", port,
               "netns", bed.switch_ns])  # fmt: skip
    netns.run(["ip", "-n", bed.switch_ns, "link", "set", port, "master", BRIDGE])
    netns.run(["ip", "-n", bed.switch_ns, "link", "set", port, "up"])
    netns.run(["ip", "addr", "add", f"{addr}/24", "dev", host_if])
    netns.run(["ip", "link", "set", host_if, "up"])
    return addr
