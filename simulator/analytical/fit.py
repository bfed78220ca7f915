"""fit: least-squares estimates of φ, δ and per-device-type efficiency from measured iteration times.

The model is piecewise linear in its constants. For a fixed "active branch" (whether compute or
synchronisation bounds a step, which PS server is busiest, which node computes slowest):
    sync-bound:    T_measured ≈ transfer + φ·(coef of φ) + δ·(coef of δ)
    compute-bound: T_measured ≈ roofline_d · (1 / efficiency_d)
(roofline_d: ``compute.layer_times`` of the slowest node's device type with no correction; a
measured profile's layers are not scaled by the correction, so fit without profiles.)
with the coefficients from Eq. 2/3 (``Scores.sync_terms``). ``fit`` alternates: take the branches
under the current constants, solve non-negative least squares (scipy.optimize.nnls) for
x = [φ, δ, 1/efficiency_d ...] on rows divided by the measured time (so the fit minimises
relative error, fair across steps of milliseconds and seconds), then re-derive the branches;
it stops when they no longer change. Efficiencies are clipped to (0, 1]; a constant no row
informs keeps its initial value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from simulator.analytical import formulas as f
from simulator.analytical.arrays import cluster_arrays, model_arrays
from simulator.analytical.batch import encode
from simulator.analytical.params import CostParams
from simulator.analytical.vectorised import score
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class FitSample(NamedTuple):
    """One measured strategy: its model, cluster and the measured seconds per iteration."""

    model: ModelSpec
    cluster: ClusterSpec
    strategy: Strategy
    seconds: float


@dataclass(frozen=True)
class FitResult:
    """Fitted constants and how well they explain the measurements (relative errors)."""

    params: CostParams
    rms_rel_error_before: float
    rms_rel_error_after: float
    iterations: int
    samples: int


def predict_samples(samples: Sequence[FitSample], params: CostParams) -> np.ndarray:
    """Predicted T per sample, shape (S,), in input order (batched per (model, cluster)), with
    ``params`` as given (bucket overlap by default; the fit itself works on full overlap)."""
    out = np.zeros(len(samples))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((id(s.model), id(s.cluster)), []).append(i)
    for idx in groups.values():
        ma, ca = model_arrays(samples[idx[0]].model), cluster_arrays(samples[idx[0]].cluster)
        out[idx] = score(ma, ca, encode(ma, ca, [samples[i].strategy for i in idx]), params).t_iter
    return out


def fit(samples: Sequence[FitSample], initial: CostParams | None = None, max_iter: int = 20) -> FitResult:
    """Fit φ, δ and the efficiency of each device type that bounds some compute-bound sample."""
    if not samples:
        raise ValueError("samples: need at least one measurement")
    for i, s in enumerate(samples):
        if not s.seconds > 0:
            raise ValueError(f"samples.{i}.seconds: must be > 0, got {s.seconds}")
    # The fit is linear on one branch of the paper's Eq. 1 (full overlap); the bucket model's max
    # over units is not, so the fitted constants come with overlap="full", the model they fit.
    params = replace(initial or CostParams(), overlap="full")
    measured = np.array([s.seconds for s in samples])
    before = _rms_rel(predict_samples(samples, params), measured)
    branch_key: tuple[int, ...] | None = None
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (reported as iterations)
        _, sync_bound, sync_terms, comp_feature, comp_device = _branches(samples, params)
        key = tuple(np.where(sync_bound, -1, comp_device)) + tuple(sync_terms.ravel())
        if key == branch_key:
            break
        branch_key = key
        params = _solve(params, measured, sync_bound, sync_terms, comp_feature, comp_device, samples)
    after = _rms_rel(predict_samples(samples, params), measured)
    return FitResult(params, before, after, it, len(samples))


def _solve(
    params: CostParams,
    measured: np.ndarray,
    sync_bound: np.ndarray,
    sync_terms: np.ndarray,
    comp_feature: np.ndarray,
    comp_device: np.ndarray,
    samples: Sequence[FitSample],
) -> CostParams:
    names = sorted({samples[i].cluster.device_type(int(comp_device[i])).name for i in range(len(samples))})
    dev_col = {n: 2 + i for i, n in enumerate(names)}
    a = np.zeros((len(samples), 2 + len(names)))
    y = measured.copy()
    for i in range(len(samples)):
        if sync_bound[i]:
            a[i, 0], a[i, 1] = sync_terms[i, 1], sync_terms[i, 2]
            y[i] -= sync_terms[i, 0]
        else:
            name = samples[i].cluster.device_type(int(comp_device[i])).name
            a[i, dev_col[name]] = comp_feature[i]
    a /= measured[:, None]
    y /= measured
    from scipy.optimize import nnls  # imported here: scipy.optimize takes seconds to import

    used = np.flatnonzero(np.any(a != 0, axis=0))
    x = np.zeros(a.shape[1])
    if used.size:
        x[used] = nnls(a[:, used], y)[0]
    out = params
    if a[:, 0].any() or a[:, 1].any():
        out = replace(out, phi=float(x[0]) if a[:, 0].any() else out.phi)
        out = replace(out, delta=float(x[1]) if a[:, 1].any() else out.delta)
    for name, col in dev_col.items():
        if a[:, col].any() and x[col] > 0:
            out = out.with_efficiency(name, float(min(1.0, 1.0 / x[col])))
    return out


def _branches(
    samples: Sequence[FitSample], params: CostParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: T, sync-bound flag, T_sync's linear terms, slowest node's uncorrected T_comp, its index."""
    s_count = len(samples)
    t = np.zeros(s_count)
    sync_bound = np.zeros(s_count, dtype=bool)
    terms = np.zeros((s_count, 3))
    comp_feature = np.zeros(s_count)
    comp_device = np.zeros(s_count, dtype=np.int64)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((id(s.model), id(s.cluster)), []).append(i)
    for idx in groups.values():
        model, cluster = samples[idx[0]].model, samples[idx[0]].cluster
        ma, ca = model_arrays(model), cluster_arrays(cluster)
        sc = score(ma, ca, encode(ma, ca, [samples[i].strategy for i in idx]), params, detail=True)
        assert sc.sync_terms is not None
        node_t = f.node_compute_times(model, cluster, params)
        slowest = max(node_t, key=lambda k: node_t[k])
        raw = f.node_compute_times(model, cluster, replace(params, efficiency=1.0, device_efficiency=()))
        for r, i in enumerate(idx):
            t[i] = sc.t_iter[r]
            sync_bound[i] = sc.t_sync[r] > sc.t_comp[r]
            terms[i] = sc.sync_terms[r]
            comp_feature[i] = raw[slowest]
            comp_device[i] = slowest
    return t, sync_bound, terms, comp_feature, comp_device


def _rms_rel(pred: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean(((pred - measured) / measured) ** 2)))
