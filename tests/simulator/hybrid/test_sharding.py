"""One rule for shard ops: the executor uses the cost model's (simulator.hybrid.sharding)."""

from __future__ import annotations

from runtime.hybrid import layout, net, worker
from simulator.hybrid import sharding


def test_the_executor_has_no_shard_rule_of_its_own() -> None:
    assert layout.shard_ops is sharding.shard_ops
    assert net.shard_ops is sharding.shard_ops and worker.shard_ops is sharding.shard_ops
    assert net.is_linear is sharding.is_linear and net.is_attention is sharding.is_attention
