"""How a strategy's collective shards become calls: the one description the executor and the cost model read.

Before this module the executor (runtime/executor) and the analytical cost model
(simulator/analytical) each derived a strategy's collective calls on their own, and they
disagreed: the executor fused shards by (merge group, algorithm, compressor) while the cost model
fused by (merge group, op), the executor ran PowerSGD as two all-reduces (P and Q) and sent a
matrix uncompressed when compression would not shrink it, while the cost model counted one call
and always compressed. Both now read the rules below (runtime/executor/plan.py and shards.py, and
simulator/analytical batch.py, geometry.py, reference.py); ``tests/runtime/test_comm_agreement.py``
counts the calls the executor really issues and compares them with these rules.

The rules, per collective *unit* (one fused buffer of the executor, one "call" of the cost model):

- **Fusion key**: shards of one strategy fuse into one unit when they share merge group,
  all-reduce algorithm, compressor kind and PowerSGD rank (``unit_key``). Dense and sparse
  shards of one unit are sent by different primitives, so the cost model keys its calls by the
  unit key plus whether the shards are sparse.
- **Primitive calls** (``primitive_calls``): the dense, uncompressed part of a unit is one
  all-reduce over all workers (ring) or three calls (hierarchical: reduce to the node leader,
  all-reduce among leaders, broadcast in the node); PowerSGD's compressed part is two such
  all-reduces (P, then Q, as torch's powerSGD_hook); the sparse part is three all-gathers
  (row counts, indices, rows) whatever the algorithm.
- **PS round trips** (``ps_rounds``): a dense PS shard is one message each way (push, then pull).
  A sparse one is (row count, indices, rows) each way, and the receiver must have the count
  before it can post the receives of indices and rows (runtime/executor/ps.py), so each
  direction is two dependent phases: two rounds of the probe's 1-element PS round. Across three
  collected domains the α-calibrated model's residual per sparse PS shard was 1-3.5 ms above a
  dense one's before this rule (benchmarks/host_saturation.py residuals; the closing note of
  issue 13).
- **PowerSGD compression** (``powersgd_rank``): a shard is viewed as a ``rows x cols`` matrix
  (torch's ``tensor.view(shape[0], -1)``); the effective rank is ``min(rows, cols, rank)`` and
  the shard is compressed only when ``(rows + cols) x rank < rows x cols`` (torch's
  ``_should_compress`` with ``min_compression_rate`` 1); otherwise it travels uncompressed with
  the unit's plain all-reduce. Sparse and 1-D shards are never compressed. The functions work on
  Python scalars and, elementwise, on NumPy arrays (the vectorised scorer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:
    from simulator.spec.strategy import CollectiveSync

#: All-gathers a sparse part of a unit issues: row counts, indices, rows.
SPARSE_ALLGATHERS = 3
#: Dependent round trips of one PS shard (push then pull): dense 1; sparse 2 (count first).
PS_ROUNDS_DENSE, PS_ROUNDS_SPARSE = 1, 2
#: Collectives inside each node that local replication (I_p) adds to a PS shard
#: (``runtime.executor.ps``): dense, a reduce to the node's leader and a broadcast of the pulled
#: value; sparse, an all-gather of row counts and gathers of indices and rows, then broadcasts of
#: the pulled count, indices and rows.
LOCAL_CALLS_DENSE, LOCAL_CALLS_SPARSE = 2, 6
#: All-reduces PowerSGD issues for the compressed part of a unit: P, then Q.
POWERSGD_ALLREDUCES = 2


def unit_key(sync: CollectiveSync) -> tuple[int, str, str, int | None]:
    """What shards must share to be fused into one collective unit."""
    return (sync.group, sync.algorithm, sync.compressor.kind, sync.compressor.rank)


def calls_per_allreduce(algorithm: str) -> int:
    """Backend calls of one all-reduce: one (ring) or reduce + leaders' all-reduce + broadcast."""
    return 3 if algorithm == "hierarchical" else 1


def primitive_calls(algorithm: str, plain: bool, lowrank: bool, sparse: bool) -> dict[str, int]:
    """Backend calls one unit issues, by primitive, given which parts it has.

    ``plain``: dense shards sent uncompressed (or fp16); ``lowrank``: PowerSGD-compressed shards;
    ``sparse``: row-sparse shards. Hierarchical all-reduces count their reduce and broadcast as
    calls of the all-reduce's price (each is one pass over the node's processes).
    """
    per = calls_per_allreduce(algorithm)
    out = {"allreduce": per * (int(plain) + POWERSGD_ALLREDUCES * int(lowrank))}
    out["allgather"] = SPARSE_ALLGATHERS * int(sparse)
    return {k: v for k, v in out.items() if v}


def _by_sparsity(sparse: Any, if_sparse: int, if_dense: int) -> Any:
    """``if_sparse`` where ``sparse`` holds, else ``if_dense`` (scalar, or elementwise on an array)."""
    return np.where(sparse, if_sparse, if_dense) if np.ndim(sparse) else (if_sparse if sparse else if_dense)


def ps_rounds(sparse: Any) -> Any:
    """Round trips of a PS shard (scalar or, elementwise, a NumPy bool array)."""
    return _by_sparsity(sparse, PS_ROUNDS_SPARSE, PS_ROUNDS_DENSE)


def local_replication_calls(sparse: Any) -> Any:
    """Collectives inside a node that local replication adds to a PS shard (scalar or array)."""
    return _by_sparsity(sparse, LOCAL_CALLS_SPARSE, LOCAL_CALLS_DENSE)


@overload
def powersgd_rank(rows: int, cols: int, rank: int) -> int | None: ...
@overload
def powersgd_rank(rows: np.ndarray, cols: np.ndarray, rank: np.ndarray) -> np.ndarray: ...
def powersgd_rank(rows: Any, cols: Any, rank: Any) -> Any:
    """PowerSGD's effective rank of a ``rows x cols`` matrix, or None (arrays: 0) if not compressed."""
    eff = np.minimum(np.minimum(rows, cols), rank)
    compress = (np.asarray(rows) + cols) * eff < np.asarray(rows) * cols
    if np.ndim(compress) == 0:
        return int(eff) if bool(compress) and rows > 1 and cols > 1 else None
    return np.where(compress & (np.asarray(rows) > 1) & (np.asarray(cols) > 1), eff, 0)
