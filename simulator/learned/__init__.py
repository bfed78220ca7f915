"""Learned simulators (AutoSync §4-§5): RNN and GAT over shard features, a linear ranker, training.

What the service calls:

- ``train_version(domains, Registry(dir), TrainConfig(kind="rnn"))`` → ``VersionInfo``: trains on
  measured runtimes (``Domain.from_measurements(model, cluster, [(strategy, seconds), ...])``),
  selects on validation, records test metrics, saves a new version.
- ``load(version, Registry(dir))`` → a ``simulator.base.Simulator`` (``predict`` / ``hidden``).
- ``Registry(dir).list(domain=None, kind=None)`` / ``.latest(domain, kind)`` / ``.info(version)``:
  versions with their data, metrics and creation time.
- ``load_runtimes(dir)`` → the measured domains of ``datasets/runtimes``.
- Transfer (issue 16): ``pretrained.pretrain_version(sets, Registry(dir))`` → the transfer ensemble
  (``transfer.TransferEnsemble``, kind ``transfer-linear``) trained on every set, with LODO
  metrics, the fallback rule's decision and the training runtimes' provenance;
  ``scoring.HybridScorer(ensemble)`` / ``scoring.LearnedScorer`` score a round's arrays.
  ``tuning.fine_tune(trainer, target, lodo)`` → the in-domain ranker after fine-tuning (a learned
  residual on log Eq. 1-3 or on the domain's price list of its sync terms (``terms``), the
  fine-tuned transfer ensemble or Eq. 1-3, chosen by cross-validation on the target's
  measurements; below ``ResidualConfig.min_line`` of them, ``blend.BlendEnsemble``, the two
  learned models averaged); ``noise.estimate`` → the noise ceiling of pairwise accuracy
  from a retest.
"""

from simulator.learned.data import Domain, EncodedDomain, SourceFile, encode
from simulator.learned.features import FEATURE_SCHEMA_VERSION, FeatureExtractor, StrategyGraph
from simulator.learned.gat import GATSimulatorNet
from simulator.learned.linear import LinearRanker, fit_linear
from simulator.learned.registry import LearnedSimulator, Registry, VersionInfo
from simulator.learned.rnn import RNNSimulatorNet
from simulator.learned.simulator import NeuralSimulator
from simulator.learned.train import KINDS, FitResult, TrainConfig, evaluate, fine_tune, fit
from simulator.learned.versions import load, train_version

__all__ = [
    "FEATURE_SCHEMA_VERSION",
    "KINDS",
    "Domain",
    "EncodedDomain",
    "FeatureExtractor",
    "FitResult",
    "GATSimulatorNet",
    "LearnedSimulator",
    "LinearRanker",
    "NeuralSimulator",
    "RNNSimulatorNet",
    "Registry",
    "SourceFile",
    "StrategyGraph",
    "TrainConfig",
    "VersionInfo",
    "encode",
    "evaluate",
    "fine_tune",
    "fit",
    "fit_linear",
    "load",
    "train_version",
]
