"""Shard sizes and message bytes (m_i, c_i(m_i)) of every row of a batch, from its partition choices."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from simulator.analytical import formulas as f
from simulator.analytical.arrays import ModelArrays
from simulator.spec import comm

#: Rows per chunk of ``shard_geometry``.
CHUNK = 1 << 16


@dataclass(frozen=True, eq=False)
class ShardGeometry:
    """Per-row sizes derived from the partition and compressor choices.

    Shapes: T rows, all float64 (T,): numel; rows, cols of the shard as a matrix
    (rows = shape[0], cols = prod(shape[1:])); values_bytes (the shard's parameter bytes);
    message_bytes (m_i: density-scaled values plus int64 row indices for sparse gradients);
    sent_bytes (c_i(m_i), ``formulas.compressed_bytes``); lowrank (bool: PowerSGD compresses
    the shard, so its unit issues PowerSGD's two all-reduces; ``simulator.spec.comm``).
    """

    numel: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    values_bytes: np.ndarray
    message_bytes: np.ndarray
    sent_bytes: np.ndarray
    lowrank: np.ndarray


def shard_geometry(
    ma: ModelArrays,
    variable: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    shard_index: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
) -> ShardGeometry:
    """Sizes of each row's shard (``Partition.shard_shapes``: near-equal parts, the first ones larger).

    Whole variables are looked up; only partitioned rows and compressed rows are computed. Long
    batches are processed in chunks of ``CHUNK`` rows, which keeps the temporaries in cache
    (about twice as fast as one pass over millions of rows).
    """
    if len(variable) > CHUNK:
        parts = [
            _geometry(
                ma, *(a[i : i + CHUNK] for a in (variable, axis, num_shards, shard_index, compressor, rank))
            )
            for i in range(0, len(variable), CHUNK)
        ]
        # fields(), not astuple(): astuple deep-copies every array before they are concatenated
        names = [f.name for f in fields(ShardGeometry)]
        return ShardGeometry(*(np.concatenate([getattr(p, n) for p in parts]) for n in names))
    return _geometry(ma, variable, axis, num_shards, shard_index, compressor, rank)


def _geometry(
    ma: ModelArrays,
    variable: np.ndarray,
    axis: np.ndarray,
    num_shards: np.ndarray,
    shard_index: np.ndarray,
    compressor: np.ndarray,
    rank: np.ndarray,
) -> ShardGeometry:
    v = variable
    numel = ma.numel[v]
    rows = ma.rows[v]
    part = np.flatnonzero(num_shards > 1)
    if part.size:
        vp, ap, kp = v[part], axis[part], num_shards[part]
        d = ma.dims[vp, ap]
        size = d // kp + (shard_index[part] < d % kp)
        numel[part] = ma.numel[vp] / d * size
        rows[part] = np.where(ap == 0, size, ma.dims[vp, 0])
    values = numel * ma.dtype_bytes_f[v]
    message = numel * ma.message_per_element[v] + rows * ma.index_per_row[v]
    sent = message.copy()
    lowrank = np.zeros(len(v), dtype=bool)
    squeezed = np.flatnonzero(compressor != 0)
    if squeezed.size:
        vs, cs = v[squeezed], compressor[squeezed]
        index = rows[squeezed] * ma.index_per_row[vs]
        fp16 = (message[squeezed] - index) * np.minimum(1.0, 2.0 / ma.dtype_bytes_f[vs]) + index
        cols_s = numel[squeezed] / rows[squeezed]
        eff = comm.powersgd_rank(rows[squeezed], cols_s, rank[squeezed])  # 0: sent uncompressed
        psgd = np.where(eff > 0, eff * (rows[squeezed] + cols_s) * ma.dtype_bytes_f[vs], message[squeezed])
        sent[squeezed] = np.where(cs == 1, fp16, psgd)
        lowrank[squeezed] = (cs == 2) & (eff > 0)
    assert f.INDEX_BYTES > 0  # index_per_row in ModelArrays is density * INDEX_BYTES
    return ShardGeometry(numel, rows, numel / rows, values, message, sent, lowrank)
