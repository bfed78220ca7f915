"""The vectorised analytical scorer: AutoSync Eq. 1-3 over a whole StrategyBatch with numpy.

How the pieces combine (supplementary §1-§3):
    T_server(j)  = Σ_{PS shards on j} Eq. 2          (accumulated per server)
    T_sync^PS    = max_j T_server(j)                 (the busiest server bounds the step)
    T_sync^CC    = Σ_{collective calls} Eq. 3        (one call per merge group and op: φ and δ
                                                      paid per call, bytes add up)
    T_sync       = T_sync^PS + T_sync^CC   (params.combine == "sum", the default)
    T            = max(T_comp, E)                    (Eq. 1 per bucket, ``overlap``: E is when
                                                      the last bucket's sync ends, each bucket
                                                      starting once its gradients are ready)
    T            = max(T_comp, T_sync)               (params.overlap == "full": the paper's Eq. 1)

Why a sum by default: every collective call involves every worker's NIC, and every worker pushes
to and pulls from every PS server, so the two kinds of traffic contend for the same links and
serialise; the paper gives each kind's total but not their combination. A sum is the
conservative choice and keeps T_sync linear in φ and δ for fitting. ``combine="max"`` models
perfect overlap instead (the lower bound), for clusters where servers sit on separate nodes.

Not modelled (kept as raw features for the learned simulators): SSP staleness (a stale shard is
costed as synchronous) and PS-side compression (the vocabulary's PSSync has no compressor; a row's compressor code would apply).
Hybrid plans (``Strategy.plan``) are rejected by ``encode``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.analytical import formulas as f
from simulator.analytical import overlap
from simulator.analytical.arrays import ClusterArrays, ModelArrays
from simulator.analytical.batch import StrategyBatch, sync_columns
from simulator.analytical.params import CostParams
from simulator.spec import comm


@dataclass(frozen=True, eq=False)
class Scores:
    """Predicted times of N strategies (seconds) and, with ``detail``, their breakdown.

    Shapes: N strategies, J nodes, G collective calls (``StrategyBatch.call_*``).
        t_comp, t_ps, t_cc, t_sync, t_iter, throughput (samples/s), cost (USD per iteration): (N,)
        server_time (N, J): accumulated Eq. 2 per server node (0 for nodes serving nothing).
        call_time (G,): Eq. 3 per collective call.
      detail only (else None):
        server_terms (N, J, 3), call_terms (G, 3): [transfer s, coef of φ, coef of δ];
        server_bytes (N, J), call_bytes (G,): c_i(m_i) summed; server_shards (N, J), call_shards (G,);
        sync_terms (N, 3): the linear terms of T_sync on its active branch (busiest server + calls);
            T_sync = sync_terms · (1, φ, δ) only without a measured α (``CostParams.call_overhead_s``).
    """

    t_comp: np.ndarray
    t_ps: np.ndarray
    t_cc: np.ndarray
    t_sync: np.ndarray
    t_iter: np.ndarray
    throughput: np.ndarray
    cost: np.ndarray
    server_time: np.ndarray
    call_time: np.ndarray
    server_terms: np.ndarray | None = None
    call_terms: np.ndarray | None = None
    server_bytes: np.ndarray | None = None
    call_bytes: np.ndarray | None = None
    server_shards: np.ndarray | None = None
    call_shards: np.ndarray | None = None
    sync_terms: np.ndarray | None = None
    #: E, when the overlapped synchronisation ends (``overlap``; T_sync with overlap="full"): (N,).
    t_sync_end: np.ndarray | None = None


def score(
    ma: ModelArrays, ca: ClusterArrays, b: StrategyBatch, params: CostParams, detail: bool = False
) -> Scores:
    """Score every strategy of ``b`` with Eq. 1-3; see the module docstring for how terms combine.

    Per row: transfer = c_i(m_i)·coefficient[code] plus, for PS rows, φ·messages + δ; rows are
    summed into their server (PS) or collective call, and E computed, strategy by strategy in one
    compiled loop (``kernels.sync_times``).
    """
    from simulator.analytical.kernels import sync_times  # numba: imported on first use

    n, j = b.size, len(ca.gpus)
    code_const = params.phi * ca.code_phi + params.delta * ca.code_delta + ca.code_latency
    # a measured α per PS round replaces messages·φ + δ + latency (per variable: sparse rounds)
    ps_const = np.zeros(0) if params.ps_round_s is None else params.ps_round_s * comm.ps_rounds(ma.sparse)
    alphas = params.call_alphas()
    # ... and a measured collective α per call a locally replicated shard makes inside its node
    lr_const = np.zeros(len(ps_const))
    if len(ps_const) and params.call_overhead_s and f.has_local_step(ca.cluster):
        lr_const = params.call_overhead_s * comm.local_replication_calls(ma.sparse)
    if alphas is not None:  # a measured α per call replaces w·φ + δ
        call_const = np.asarray(alphas, dtype=np.float64)
    else:
        call_const = params.phi * ca.cc_phi + params.delta + ca.cc_latency
    # the executor's hand-off, once per unit, only with a measured α
    unit = float(params.unit_overhead_s) if alphas is not None and params.unit_overhead_s else 0.0
    bucket = params.overlap == "bucket"
    if bucket:
        level_ready, var_level = overlap.ready_levels(ma, ca, params)
    else:  # T = max(T_comp, T_sync): no ready times (read-only like ready_levels': one signature)
        level_ready, var_level = np.zeros(1), np.zeros(len(ma.layer), dtype=np.int64)
        level_ready.setflags(write=False)
        var_level.setflags(write=False)
    rows, unnumbered = sync_columns(b)
    none = np.zeros(0, dtype=np.int64)
    if unnumbered is None:  # the batch's own call numbering
        numbered = (b.call, b.call_strategy, b.call_op, b.call_repeats)
        unnumbered = (none, none, none, np.zeros(0, dtype=bool))
    else:  # a sampled batch: the kernel numbers its calls (``number_calls``' numbering)
        numbered = (none, none, none, np.zeros(0))
    server_time, call_time, t_ps, t_cc, end = sync_times(
        b.offsets,
        *rows,
        b.is_ps,
        b.geo.sent_bytes,
        numbered,
        unnumbered,
        ma.sparse,
        var_level,
        level_ready,
        ca.code_transfer,
        code_const,
        np.asarray(ps_const, dtype=np.float64),
        np.asarray(lr_const, dtype=np.float64),
        call_const,
        unit,
        float(comm.POWERSGD_ALLREDUCES),
        j,
        params.combine == "sum",
        bucket,
    )
    t_sync = t_ps + t_cc if params.combine == "sum" else np.maximum(t_ps, t_cc)
    t_comp = np.full(n, f.compute_time(ma.model, ca.cluster, params))
    t_iter = np.maximum(t_comp, end if bucket else t_sync)
    out: dict[str, np.ndarray] = dict(
        t_comp=t_comp,
        t_ps=t_ps,
        t_cc=t_cc,
        t_sync=t_sync,
        t_iter=t_iter,
        throughput=ma.model.batch_size * ca.world / t_iter,
        cost=t_iter * ca.price_per_s,
        server_time=server_time,
        call_time=call_time,
        t_sync_end=end if bucket else t_sync,
    )
    if detail:
        out.update(_detail(ca, b, n, j, len(call_time)))
        busiest = server_time.argmax(axis=1)
        ps_terms = out["server_terms"][np.arange(n), busiest]
        ct = out["call_terms"]
        cc_terms = np.stack([np.bincount(b.call_strategy, ct[:, i], minlength=n) for i in range(3)], 1)
        if params.combine == "sum":
            out["sync_terms"] = ps_terms + cc_terms
        else:
            out["sync_terms"] = np.where((t_ps >= t_cc)[:, None], ps_terms, cc_terms)
    return Scores(**out)


def _detail(ca: ClusterArrays, b: StrategyBatch, n: int, j: int, g: int) -> dict[str, np.ndarray]:
    """Per-server and per-call [transfer, φ coefficient, δ coefficient], bytes and shard counts."""
    size = n * j + g
    c = b.geo.sent_bytes

    def acc(w: np.ndarray) -> np.ndarray:
        return np.bincount(b.bin, weights=w, minlength=size)

    transfer = acc(c * ca.code_transfer[b.code] + ca.code_latency[b.code])  # latency: known, not fitted
    phi = acc(ca.code_phi[b.code])
    delta = acc(ca.code_delta[b.code])
    nbytes = acc(c)
    shards = np.bincount(b.bin, minlength=size)
    cut = n * j
    return dict(
        server_terms=np.stack([transfer[:cut], phi[:cut], delta[:cut]], -1).reshape(n, j, 3),
        call_terms=np.stack(
            [
                transfer[cut:] + ca.cc_latency[b.call_op] * b.call_repeats,
                ca.cc_phi[b.call_op] * b.call_repeats,
                b.call_repeats,
            ],
            -1,
        ),
        server_bytes=nbytes[:cut].reshape(n, j),
        call_bytes=nbytes[cut:],
        server_shards=shards[:cut].reshape(n, j),
        call_shards=shards[cut:],
    )
