"""AutoSync's predefined (analytical) cost model: Eq. 1-3, its features, its fit, and the baselines.

Public API:
    CostParams                        φ, δ, compute efficiency (typed config, defaults)
    cost_breakdown(model, cluster, strategy, params) -> CostBreakdown   one strategy, with breakdown
    AnalyticalSimulator(params)       the Simulator interface (predict -> seconds, hidden -> global z)
    encode / make_batch / decode      Strategy objects <-> StrategyBatch (flat arrays)
    score(ma, ca, batch, params)      vectorised Eq. 1-3 over a batch -> Scores
    features(ma, ca, batch)           per-shard z_i and raw features, global z -> Features
    model_arrays / cluster_arrays     cached per-model / per-cluster constants
    fit(samples, initial)             least-squares φ, δ and efficiencies from measurements
    baseline(name, model, cluster)    horovod, ps, ps-naive, allreduce-single as Strategies
"""

from simulator.analytical.arrays import (
    COMPRESSORS,
    OP_NAMES,
    ClusterArrays,
    ModelArrays,
    cluster_arrays,
    model_arrays,
)
from simulator.analytical.baselines import BASELINES, baseline
from simulator.analytical.batch import StrategyBatch, decode, encode, make_batch
from simulator.analytical.breakdown import CallCost, CostBreakdown, ServerCost, cost_breakdown
from simulator.analytical.features import GLOBAL_FEATURES, RAW_FEATURES, Features, features
from simulator.analytical.fit import FitResult, FitSample, fit, predict_samples
from simulator.analytical.geometry import ShardGeometry, shard_geometry
from simulator.analytical.params import CostParams
from simulator.analytical.simulator import AnalyticalSimulator
from simulator.analytical.vectorised import Scores, score

__all__ = [
    "BASELINES",
    "COMPRESSORS",
    "GLOBAL_FEATURES",
    "OP_NAMES",
    "RAW_FEATURES",
    "AnalyticalSimulator",
    "CallCost",
    "ClusterArrays",
    "CostBreakdown",
    "CostParams",
    "Features",
    "FitResult",
    "FitSample",
    "ModelArrays",
    "Scores",
    "ServerCost",
    "ShardGeometry",
    "StrategyBatch",
    "baseline",
    "cluster_arrays",
    "cost_breakdown",
    "decode",
    "encode",
    "features",
    "fit",
    "make_batch",
    "model_arrays",
    "predict_samples",
    "score",
    "shard_geometry",
]
