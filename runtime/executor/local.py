"""LocalLauncher: every node of the cluster on loopback 127.0.0.1 (no namespaces, no shaping)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any


class LocalLauncher:
    """Runs every "node" as plain local processes talking over 127.0.0.1.

    Used by the correctness tests and wherever network namespaces are not allowed. Links are not
    shaped, so times measured with it say nothing about the cluster's network.
    """

    # Every node is this host: with NCCL, worker r uses GPU r (not its index on its node).
    single_host = True

    @property
    def master_addr(self) -> str:
        return "127.0.0.1"

    def address(self, node: int) -> str:
        return "127.0.0.1"

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **popen_kwargs: Any
    ) -> subprocess.Popen[bytes]:
        full_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", **env}
        return subprocess.Popen(list(argv), env=full_env, **popen_kwargs)
