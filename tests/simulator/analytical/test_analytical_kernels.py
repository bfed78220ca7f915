"""The compiled scorer (simulator/analytical/kernels.py) equals the numpy scorer it replaced, bit for bit.

The oracle below is ``vectorised.score``'s and ``overlap.sync_end``'s numpy code as of 88251d4
(row seconds and bincounts per server and call; E from a (channel, ready level) table), kept
here only. The kernels promise the same sums in the same order, so the predictions are equal,
not close: on encoded random strategies (every CostParams branch, clusters of 1 to 11 nodes,
whose T_sync^PS share needs numpy's pairwise sum) and on the array sampler's own rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from search.samplers.arrays import ArraySampler
from search.space import Space, SpaceConfig
from simulator import zoo
from simulator.analytical import CostParams, cluster_arrays, encode, model_arrays, score
from simulator.analytical import formulas as f
from simulator.analytical.arrays import ClusterArrays, ModelArrays
from simulator.analytical.batch import StrategyBatch, sync_columns
from simulator.analytical.kernels import _numpy_sum
from simulator.analytical.overlap import layer_ready_times
from simulator.analytical.testing import make_cluster, mixed_model, random_strategies
from simulator.spec import ClusterSpec, comm

PARAMS = {
    "default": CostParams(),
    "max": CostParams(phi=3e-4, delta=1e-5, efficiency=0.2, combine="max"),
    "full": CostParams(overlap="full"),
    "max-full": CostParams(combine="max", overlap="full"),
    "measured-alpha": CostParams(call_overhead_s=8e-4, ps_round_s=1.2e-3),
    "unit-overhead": CostParams(
        call_overhead_s=5e-4, ps_round_s=1.2e-3, allgather_call_s=2.5e-3, unit_overhead_s=6e-4
    ),
}
CLUSTERS: dict[str, ClusterSpec] = {
    "one-node": make_cluster([4]),
    "uneven-with-cpu-server": make_cluster([4, 1, 2, 0], nic_gbps=[25.0, 10.0, 50.0, 40.0]),
    "eleven-nodes": make_cluster(
        [1, 2, 4, 1, 0, 2, 1, 1, 8, 1, 2], nic_gbps=[10.0 + 5 * i for i in range(11)]
    ),
}
FIELDS = ("t_ps", "t_cc", "t_sync", "t_iter", "server_time", "call_time")


def _assert_equal(ma: ModelArrays, ca: ClusterArrays, b: StrategyBatch, params: CostParams) -> None:
    got = score(ma, ca, b, params)
    want = numpy_times(ma, ca, b, params)
    for name in FIELDS:
        assert np.array_equal(getattr(got, name), want[name]), name


@pytest.mark.parametrize("cluster_name", sorted(CLUSTERS))
@pytest.mark.parametrize("params_name", sorted(PARAMS))
def test_encoded_strategies_score_as_numpy_did(cluster_name: str, params_name: str) -> None:
    model = mixed_model()
    cluster = CLUSTERS[cluster_name]
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    _assert_equal(ma, ca, encode(ma, ca, random_strategies(model, cluster, 80, seed=11)), PARAMS[params_name])


@pytest.mark.parametrize(("model_name", "cluster_name"), [("NCF-sparse", "A2"), ("ResNet50", "B7")])
@pytest.mark.parametrize("params_name", ["default", "max", "unit-overhead"])
def test_sampled_rows_score_as_numpy_did(model_name: str, cluster_name: str, params_name: str) -> None:
    model, cluster = zoo.model(model_name), zoo.cluster(cluster_name)
    space = Space(model, cluster, SpaceConfig(compressors=("none", "fp16", "powersgd")))
    batch = ArraySampler(space, 4, None, chunk=100).sample_arrays(100).batch(space)
    ma, ca, params = model_arrays(model), cluster_arrays(cluster), PARAMS[params_name]
    assert sync_columns(batch)[1] is not None  # calls not numbered yet: the kernel numbers them
    fresh = score(ma, ca, batch, params)
    _assert_equal(ma, ca, batch, params)  # the oracle reads the batch's call fields
    assert sync_columns(batch)[1] is None  # now numbered: the kernel reads them
    for name in FIELDS:
        assert np.array_equal(getattr(fresh, name), getattr(score(ma, ca, batch, params), name)), name


def test_numpy_sum_is_numpys_order() -> None:
    rng = np.random.default_rng(0)
    for n in [*range(0, 20), 127, 128, 129, 300, 1025]:
        a = rng.random((50, n)) * 10.0 ** rng.integers(-4, 4, (50, n))
        assert np.array_equal([_numpy_sum(row) for row in a], a.sum(axis=1)), n


def test_oracle_channel_end_is_the_max_plus_recursion() -> None:
    # channel 0: units (ready 1, 2 s) and (ready 2, 1 s): end = max(2, 1 + 2) + 1 = 4
    # channel 1: (ready 5, 1 s) after (ready 0, 1 s): end = max(5, 0 + 1) + 1 = 6; channel 2 empty
    ready = np.array([2.0, 5.0, 1.0, 0.0])
    dur = np.array([1.0, 1.0, 2.0, 1.0])
    chan = np.array([0, 1, 0, 1])
    assert channel_end(ready, dur, chan, 3).tolist() == [4.0, 6.0, 0.0]
    assert channel_end(np.array([]), np.array([]), np.array([], dtype=np.int64), 2).tolist() == [0.0, 0.0]


# ------------------------------------------------------------------------- the numpy oracle


def numpy_times(
    ma: ModelArrays, ca: ClusterArrays, b: StrategyBatch, params: CostParams
) -> dict[str, np.ndarray]:
    """t_ps, t_cc, t_sync, t_iter (N,), server_time (N, J) and call_time (G,), as numpy computed them."""
    n, j, g = b.size, len(ca.gpus), len(b.call_strategy)
    per_row_const = params.phi * ca.code_phi + params.delta * ca.code_delta + ca.code_latency
    row_const = per_row_const[b.code]
    if params.ps_round_s is not None:
        row_const = np.where(b.is_ps, params.ps_round_s * comm.ps_rounds(ma.sparse[b.variable]), row_const)
        if params.call_overhead_s and f.has_local_step(ca.cluster):  # I_p: the node's own calls
            local = b.is_ps & b.local_replication
            calls = comm.local_replication_calls(ma.sparse[b.variable])
            row_const = row_const + np.where(local, params.call_overhead_s * calls, 0.0)
    row_time = b.geo.sent_bytes * ca.code_transfer[b.code] + row_const
    acc = np.bincount(b.bin, weights=row_time, minlength=n * j + g)
    server_time = acc[: n * j].reshape(n, j)
    t_ps = server_time.max(axis=1)
    alphas = params.call_alphas()
    if alphas is not None:
        call_const = np.asarray(alphas)
    else:
        call_const = params.phi * ca.cc_phi + params.delta + ca.cc_latency
    call_time = acc[n * j :] + call_const[b.call_op] * b.call_repeats
    if alphas is not None and params.unit_overhead_s:
        call_time = call_time + params.unit_overhead_s
    t_cc = np.bincount(b.call_strategy, weights=call_time, minlength=n)
    t_sync = t_ps + t_cc if params.combine == "sum" else np.maximum(t_ps, t_cc)
    t_comp = np.full(n, f.compute_time(ma.model, ca.cluster, params))
    if params.overlap == "bucket":
        end = _sync_end(ma, ca, params, n, b, row_time, call_time, server_time)
        t_iter = np.maximum(t_comp, end)
    else:
        t_iter = np.maximum(t_comp, t_sync)
    return dict(
        t_ps=t_ps, t_cc=t_cc, t_sync=t_sync, t_iter=t_iter, server_time=server_time, call_time=call_time
    )


def _sync_end(
    ma: ModelArrays,
    ca: ClusterArrays,
    params: CostParams,
    n: int,
    b: StrategyBatch,
    row_time: np.ndarray,
    call_time: np.ndarray,
    server_time: np.ndarray,
) -> np.ndarray:
    layer_ready = layer_ready_times(ma, ca, params)
    level_ready, layer_level = np.unique(layer_ready, return_inverse=True)
    row_level = layer_level[ma.layer[b.variable]]
    row_ready = level_ready[row_level]
    g = len(b.call_strategy)
    call_ready = np.zeros(g)
    cc = ~b.is_ps
    np.maximum.at(call_ready, b.call[cc], row_ready[cc])
    call_level = np.searchsorted(level_ready, call_ready)
    j = server_time.shape[1]
    ps_rows = np.flatnonzero(b.is_ps)
    half = row_time[ps_rows] / 2
    strategy = b.strategy
    if params.combine == "sum":
        total = server_time.sum(axis=1)
        share = np.divide(server_time.max(axis=1), total, out=np.zeros(n), where=total > 0)
        scaled = half * share[strategy[ps_rows]]
        ready = np.concatenate([call_ready, row_ready[ps_rows]])
        level = np.concatenate([call_level, row_level[ps_rows]])
        duration = np.concatenate([call_time, scaled])
        channel = np.concatenate([b.call_strategy, strategy[ps_rows]])
        tail = np.concatenate([np.zeros(g), scaled])
        return channel_end(ready, duration, channel, n, tail, level, level_ready)
    cc_end = channel_end(call_ready, call_time, b.call_strategy, n, None, call_level, level_ready)
    ps_channel = strategy[ps_rows] * j + b.server[ps_rows]
    ps_end = channel_end(
        row_ready[ps_rows], half, ps_channel, n * j, half, row_level[ps_rows], level_ready
    ).reshape(n, j)
    return np.maximum(cc_end, ps_end.max(axis=1) if j else 0.0)


def channel_end(
    ready: np.ndarray,
    duration: np.ndarray,
    channel: np.ndarray,
    channels: int,
    tail: np.ndarray | None = None,
    level: np.ndarray | None = None,
    level_ready: np.ndarray | None = None,
) -> np.ndarray:
    """(channels,) end time of each serial channel: max_u (r_u + Σ_{u' ≥ u in its channel} d_u'),
    plus the ``tail`` of the channel's last unit (a PS shard's pull; 0 for a collective).

    ``ready``, ``duration``, ``channel``, ``tail`` (U,): each unit's ready time, duration in the
    channel, channel index and tail. A channel with no unit ends at 0. Units of a channel are
    taken in order of readiness (ties: input order).

    No sort: units that share a ready time r all start no earlier than r, so the max over the
    units is the max over the distinct ready times r of r + D(≥ r), D(≥ r) the channel's duration
    of units ready at r or later (the first unit of a tie has the largest suffix). D is a suffix
    sum over a (channel, ready level) table. ``level`` (U,) and ``level_ready`` (R,) give each
    unit's index among the distinct ready times, ascending (``np.unique(ready)``'s, computed when
    None; a caller whose units take few known ready times, the layers', passes them). The last
    unit (for ``tail``) is the channel's latest-ready one, ties: the last in input order.
    """
    end = np.zeros(channels)
    if ready.size == 0:
        return end
    if level is None or level_ready is None:
        level_ready, level = np.unique(ready, return_inverse=True)
    nl = len(level_ready)
    block = max(1, _TABLE_CELLS // nl)  # channels per (channel, level) table
    if channels > block:  # bounded tables: channel blocks (a unit belongs to one block)
        which = channel // block
        for b in np.unique(which).tolist():
            sel = np.flatnonzero(which == b)
            lo = b * block
            hi = min(channels, lo + block)
            end[lo:hi] = channel_end(
                ready[sel],
                duration[sel],
                channel[sel] - lo,
                hi - lo,
                None if tail is None else tail[sel],
                level[sel],
                level_ready,
            )
        return end
    cell = channel * nl + level
    size = channels * nl
    present = (np.bincount(cell, minlength=size) > 0).reshape(channels, nl)
    later = np.bincount(cell, weights=duration, minlength=size).reshape(channels, nl)
    later = np.cumsum(later[:, ::-1], axis=1)[:, ::-1]  # D(≥ level) per channel
    end = np.where(present, level_ready[None, :] + later, 0.0).max(axis=1)
    if tail is not None:
        top = nl - 1 - np.argmax(present[:, ::-1], axis=1)  # each channel's latest ready level
        at_top = np.flatnonzero(level == top[channel])
        last = np.full(channels, -1, dtype=np.int64)
        np.maximum.at(last, channel[at_top], at_top)
        has = last >= 0
        end[has] += tail[last[has]]
    return end


#: Cells of one (channel, ready level) table of ``channel_end`` (32 MB of float64).
_TABLE_CELLS = 1 << 22
