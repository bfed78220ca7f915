"""Eq. 1 at the granularity of buckets: synchronisation overlapped with the rest of back-propagation.

AutoSync's Eq. 1 is T = max(T_comp, T_sync): every byte of synchronisation hides behind compute.
Horovod, DDP and strategist's executor do less than that: a bucket (a merge group's collective or
a PS shard) can start only when back-propagation has produced every gradient in it, and the
buckets of one channel run one after another. With

    r_u  the ready time of unit u = T_fwd + Σ_{layers l ≥ l_u} T_bwd(l), l_u the earliest layer
         (in forward order) among the unit's variables (backward visits layers in reverse),
    d_u  the unit's synchronisation time (Eq. 2 for a PS shard, Eq. 3 for a collective call),

a channel that takes its units in order of readiness ends at

    E = max_u ( r_u + Σ_{u' ≥ u} d_{u'} )        (units sorted by r; the usual max-plus recursion
                                                  end_u = max(r_u, end_{u-1}) + d_u, unrolled)

and the step takes T = max(T_comp, E). A single bucket ready at the end of backward gives
T = T_comp + T_sync (no overlap); many small buckets ready early give T → max(T_comp, T_sync),
the paper's Eq. 1, which this model contains as its limit.

A PS shard's time (Eq. 2 counts both directions: push to the server, pull back) is split in its
two halves: the push occupies the channel, and only the *last* unit's pull adds to the channel's
end. A NIC is full duplex, so while the server answers one shard the next shard's pushes already
flow the other way (the executor pushes and pulls on separate threads and process groups, as a PS
does): n pipelined shards take n pushes and one pull, a single shard push + pull. This is the
two-stage flow shop's makespan when pushes run back to back.

Channels follow ``CostParams.combine`` (the same contention assumption as T_sync):
  - ``"sum"`` (default): one channel holds every collective call and every PS shard, a shard's
    time scaled by T_sync^PS / Σ_j T_server(j) (the servers work in parallel, so the PS part of
    the channel totals the busiest server's time, spread over the shards in proportion to their
    own): the channel's work is T_sync^CC + T_sync^PS = T_sync, as PS and collectives contend
    for the worker NICs and serialise;
  - ``"max"``: the collective calls form one channel (the executor's collective thread, one NCCL
    stream), and each PS server is its own channel; E is the latest of them.
``CostParams.overlap = "full"`` keeps the paper's Eq. 1 (T = max(T_comp, T_sync)).

Decision (the paper is silent on buckets): compute is taken on the slowest worker node (the one
that bounds T_comp), whose backward sets every ready time; ties in readiness keep batch order.

Shapes: N strategies, T shard rows, G collective calls, J nodes, V variables, L layers.
"""

from __future__ import annotations

import numpy as np

from simulator.analytical import compute
from simulator.analytical.arrays import ClusterArrays, ModelArrays
from simulator.analytical.params import CostParams


def layer_ready_times(ma: ModelArrays, ca: ClusterArrays, params: CostParams) -> np.ndarray:
    """(L,) seconds after the step starts at which each layer's gradients are final (slowest node)."""
    model, cluster = ma.model, ca.cluster
    times = None
    for k in cluster.worker_nodes:
        t = compute.layer_times(model, cluster.device_type(k), model.batch_size, params)
        if times is None or t.step > times.step:
            times = t
    assert times is not None, "a cluster has at least one worker node"
    suffix = np.cumsum(times.bwd[::-1])[::-1]  # Σ_{l' ≥ l} bwd
    return float(times.fwd.sum()) + suffix


def channel_end(
    ready: np.ndarray,
    duration: np.ndarray,
    channel: np.ndarray,
    channels: int,
    tail: np.ndarray | None = None,
) -> np.ndarray:
    """(channels,) end time of each serial channel: max_u (r_u + Σ_{u' ≥ u in its channel} d_u'),
    plus the ``tail`` of the channel's last unit (a PS shard's pull; 0 for a collective).

    ``ready``, ``duration``, ``channel``, ``tail`` (U,): each unit's ready time, duration in the
    channel, channel index and tail. A channel with no unit ends at 0. Units of a channel are
    taken in order of readiness (ties: input order).
    """
    end = np.zeros(channels)
    if ready.size == 0:
        return end
    order = np.lexsort((ready, channel))
    r, d, c = ready[order], duration[order], channel[order]
    total = np.bincount(c, weights=d, minlength=channels)
    before = np.cumsum(d) - d  # Σ of durations earlier in the sorted array
    start_of = np.searchsorted(c, np.arange(channels))  # first index of each channel
    done_in_channel = before - before[start_of[c]]
    suffix = total[c] - done_in_channel  # Σ_{u' ≥ u, same channel} d
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])  # the first unit of each channel
    # a segment max over each channel's run (np.maximum.at is ~10x slower on millions of units)
    end[c[first]] = np.maximum(end[c[first]], np.maximum.reduceat(r + suffix, first))
    if tail is not None:
        last = np.flatnonzero(np.r_[c[1:] != c[:-1], True])  # the last unit of each channel
        end[c[last]] += tail[order][last]
    return end


def sync_end(
    *,
    ma: ModelArrays,
    ca: ClusterArrays,
    params: CostParams,
    n: int,
    row_variable: np.ndarray,
    row_is_ps: np.ndarray,
    row_server: np.ndarray,
    row_strategy: np.ndarray,
    row_time: np.ndarray,
    row_call: np.ndarray,
    call_strategy: np.ndarray,
    call_time: np.ndarray,
    server_time: np.ndarray,
) -> np.ndarray:
    """(N,) E, the time the last synchronisation of each strategy ends (see the module docstring).

    Rows: ``row_time`` is a PS row's own Eq. 2 seconds (collective rows are costed per call);
    ``row_call`` the collective call of a collective row (-1 for PS rows); ``server_time`` (N, J).
    """
    layer_ready = layer_ready_times(ma, ca, params)
    row_ready = layer_ready[ma.layer[row_variable]]
    g = len(call_strategy)
    call_ready = np.zeros(g)
    cc = ~row_is_ps
    np.maximum.at(call_ready, row_call[cc], row_ready[cc])
    j = server_time.shape[1]
    ps_rows = np.flatnonzero(row_is_ps)
    half = row_time[ps_rows] / 2  # push and pull (Eq. 2 counts both directions alike)
    if params.combine == "sum":
        total = server_time.sum(axis=1)
        share = np.divide(server_time.max(axis=1), total, out=np.zeros(n), where=total > 0)
        scaled = half * share[row_strategy[ps_rows]]
        ready = np.concatenate([call_ready, row_ready[ps_rows]])
        duration = np.concatenate([call_time, scaled])
        channel = np.concatenate([call_strategy, row_strategy[ps_rows]])
        tail = np.concatenate([np.zeros(g), scaled])
        return channel_end(ready, duration, channel, n, tail)
    cc_end = channel_end(call_ready, call_time, call_strategy, n)
    ps_channel = row_strategy[ps_rows] * j + row_server[ps_rows]
    ps_end = channel_end(row_ready[ps_rows], half, ps_channel, n * j, half).reshape(n, j)
    return np.maximum(cc_end, ps_end.max(axis=1) if j else 0.0)
