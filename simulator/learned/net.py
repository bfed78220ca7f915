"""The base of the learned simulators' networks: feature normalisation, batching, embed, score.

Contract: ``collate`` turns a list of ``StrategyGraph`` into the network's batch (any object);
``embed`` maps a batch to the hidden representation (B, H) and ``score`` maps that to (B,): a log
iteration time (regression) or a log-scale ranking score (ranking loss); lower means faster.
Normalisation statistics are buffers, so they travel with ``state_dict``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
from torch import nn

from simulator.learned.features import NUM_SHARD_FEATURES, StrategyGraph


class SimulatorNet(nn.Module, ABC):
    """A network over shard features; see the module docstring for the contract."""

    #: 'rnn' or 'gat'; the registry stores it to rebuild the network.
    kind: str = "net"
    x_mean: torch.Tensor
    x_std: torch.Tensor

    def __init__(self, in_dim: int = NUM_SHARD_FEATURES, hidden: int = 32) -> None:
        super().__init__()
        self.in_dim = in_dim
        self.hidden_dim = hidden
        self.register_buffer("x_mean", torch.zeros(in_dim))
        self.register_buffer("x_std", torch.ones(in_dim))

    def fit_normaliser(self, graphs: list[StrategyGraph]) -> None:
        """Set feature mean/std from training graphs (every shard counts once)."""
        x = np.concatenate([g.x for g in graphs]).astype(np.float64)
        std = x.std(axis=0)
        self.x_mean.copy_(torch.as_tensor(x.mean(axis=0), dtype=torch.float32))
        self.x_std.copy_(torch.as_tensor(np.where(std > 1e-6, std, 1.0), dtype=torch.float32))

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.x_mean) / self.x_std

    @property
    def embedding_dim(self) -> int:
        """H of ``embed``'s output."""
        return self.hidden_dim

    @abstractmethod
    def collate(self, graphs: list[StrategyGraph]) -> Any:
        """A batch of strategies in the network's input format."""

    @abstractmethod
    def embed(self, batch: Any) -> torch.Tensor:
        """Hidden representation, shape (B, embedding_dim)."""

    @abstractmethod
    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        """Output per strategy, shape (B,)."""

    def forward(self, batch: Any) -> torch.Tensor:
        return self.score(self.embed(batch))
