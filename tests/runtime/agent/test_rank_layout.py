"""The torchrun → executor-layout rank mapping of ``runtime.agent.rank_main`` and the torchrun
command line of ``runtime.agent.torchrun`` (issue 41)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.agent.rank_main import layout_rank, nproc
from runtime.agent.torchrun import NodeLaunch, torchrun_argv
from runtime.executor.layout import RankLayout
from runtime.executor.reference import GPU, two_by_two
from simulator.spec import ClusterSpec, Node


def test_every_layout_rank_is_started_exactly_once() -> None:
    nodes = (Node(name="a", device=GPU.name, gpus=2, nic_gbps=10.0), Node(name="b", device=GPU.name, gpus=0,
             nic_gbps=10.0), Node(name="c", device=GPU.name, gpus=3, nic_gbps=10.0))  # fmt: skip
    layout = RankLayout(ClusterSpec(name="uneven", device_types=(GPU,), nodes=nodes, intra_node_gbps=100.0))
    ranks = [layout_rank(layout, n, local) for n in range(3) for local in range(nproc(layout, n))]
    assert sorted(ranks) == list(range(layout.world))
    assert [nproc(layout, n) for n in range(3)] == [3, 1, 4]
    assert layout_rank(layout, 1, 0) == layout.server_rank(1) and layout_rank(layout, 2, 0) == 2
    with pytest.raises(ValueError, match="node 1 runs 1 processes, not local rank 1"):
        layout_rank(layout, 1, 1)


def test_torchrun_command_line() -> None:
    n = NodeLaunch(2, nproc(RankLayout(two_by_two()), 1), 1, "198.18.0.1:29400", "trial7-2", "198.18.0.2",
                   Path("/tmp/job.json"), 20)  # fmt: skip
    argv = torchrun_argv(n)
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--nnodes"] == "2" and flags["--nproc-per-node"] == "3" and flags["--node-rank"] == "1"
    assert flags["--rdzv-backend"] == "c10d" and flags["--rdzv-endpoint"] == "198.18.0.1:29400"
    assert flags["--rdzv-id"] == "trial7-2" and flags["--max-restarts"] == "0"
    assert flags["--rdzv-conf"] == "join_timeout=20,is_host=false" and flags["--local-addr"] == "198.18.0.2"
    assert argv[-6:-4] == ["-m", "runtime.agent.rank_main"]
