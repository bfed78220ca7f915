"""The cost model's shard ops are the executor's (one rule for both, until the executor imports it)."""

from __future__ import annotations

import pytest

from simulator import zoo
from simulator.hybrid import shard_ops


@pytest.mark.parametrize("name", ["BERT-3L", "NCF-dense"])
def test_shard_ops_agree_with_the_executor(name: str) -> None:
    layout = pytest.importorskip("runtime.hybrid.layout")
    model = zoo.model(name)
    n = len(model.layers)
    for first, last in [(0, n), (0, n // 2), (n // 3, n), (1, 2)]:
        ours = [(o.layer, o.kind, o.gather_after) for o in shard_ops(model, first, last)]
        theirs = [(o.layer, o.kind, o.gather_after) for o in layout.shard_ops(model, first, last)]
        assert ours == theirs
