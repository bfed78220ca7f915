"""``NeuralSimulator``: an RNN or GAT network behind the Simulator interface.

``predict`` returns exp(network output): seconds for a regression-trained network, a positive
ranking score (same order, not calibrated) for a ranking-trained one (``is_ranker``). ``hidden``
is the network's embedding: the RNN's two final states or the GAT's pooled embedding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simulator.base import Simulator
from simulator.learned.features import ExtractorCache, FeatureExtractor, StrategyGraph
from simulator.learned.net import SimulatorNet
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Strategies per forward pass at inference.
_CHUNK = 256
#: Outputs are clipped before exp so a ranking score never overflows.
_CLIP = 60.0


class NeuralSimulator(Simulator):
    """A trained ``SimulatorNet`` for any domain its features cover.

    Thread safety: predict/hidden run under ``torch.no_grad`` and do not change the network;
    the per-domain feature-extractor cache is guarded by a lock.
    """

    def __init__(self, net: SimulatorNet, loss: str) -> None:
        if loss not in ("rank", "mse"):
            raise ValueError(f"loss must be 'rank' or 'mse', got {loss!r}")
        self.net = net.eval()
        self.loss = loss
        self.name = net.kind
        self.is_ranker = loss == "rank"
        self._extractors = ExtractorCache()

    def extractor(self, model: ModelSpec, cluster: ClusterSpec) -> FeatureExtractor:
        return self._extractors.get(model, cluster)

    def _graphs(
        self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]
    ) -> list[StrategyGraph]:
        fx = self.extractor(model, cluster)
        return fx.many(strategies)

    def outputs(self, graphs: Sequence[StrategyGraph]) -> np.ndarray:
        """Raw network outputs (log scale), shape (N,)."""
        return self._run(graphs, embed_only=False).reshape(-1)

    def embeddings(self, graphs: Sequence[StrategyGraph]) -> np.ndarray:
        return self._run(graphs, embed_only=True).reshape(len(graphs), self.net.embedding_dim)

    def _run(self, graphs: Sequence[StrategyGraph], embed_only: bool) -> np.ndarray:
        width = self.net.embedding_dim if embed_only else 1
        if not graphs:
            return np.zeros((0, width))
        parts = []
        with torch.no_grad():
            for start in range(0, len(graphs), _CHUNK):
                batch = self.net.collate(list(graphs[start : start + _CHUNK]))
                h = self.net.embed(batch)
                out = h if embed_only else self.net.score(h)
                parts.append(out.double().numpy().reshape(len(out), width))
        return np.concatenate(parts)

    def predict(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        out = self.outputs(self._graphs(model, cluster, strategies))
        return np.exp(np.clip(out, -_CLIP, _CLIP))

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        return self.embeddings(self._graphs(model, cluster, strategies))
