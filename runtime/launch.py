"""Launchers start the processes of a trial: on loopback, or inside the emulated cluster's nodes."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import Protocol


class Launcher(Protocol):
    """Starts a process "on" a node of a cluster.

    Contract: ``master_addr`` is an address every node's processes can reach and bind on node 0;
    ``address(node)`` is the address of that node as seen by the others; ``spawn`` starts ``argv``
    on ``node`` with ``env`` added to the environment (the launcher adds the variables its network
    needs, e.g. GLOO_SOCKET_IFNAME) and returns the running process; the caller owns the process
    and must wait for or kill it.
    """

    @property
    def master_addr(self) -> str: ...

    def address(self, node: int) -> str: ...

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **popen_kwargs: object
    ) -> subprocess.Popen[bytes]: ...
