"""The GAT simulator of AutoSync supplementary §5 (Eqs. 8-10), on torch-geometric's GATConv.

    {z_i} = GAT({z_i^raw ⊕ z_i^pre}, E'_G)     two GATConv layers with ELU     (8)
    z     = (1/|V'|) Σ_i z_i                    global_mean_pool               (9)
    f̂     = q(z)                                a linear layer                 (10)

Shapes:
    input: torch_geometric Batch with x (ΣS, F), edge_index (2, ΣE), batch (ΣS,)
    hidden (``embed``): (B, H), the pooled embedding z
    output: (B,)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATConv, global_mean_pool

from simulator.learned.features import NUM_SHARD_FEATURES, StrategyGraph
from simulator.learned.net import SimulatorNet


class GATSimulatorNet(SimulatorNet):
    """GATConv × 2 → mean pool → linear q (Eqs. 8-10)."""

    kind = "gat"

    def __init__(self, in_dim: int = NUM_SHARD_FEATURES, hidden: int = 32, heads: int = 2) -> None:
        super().__init__(in_dim, hidden)
        self.conv1 = GATConv(in_dim, hidden, heads=heads, concat=False)
        self.conv2 = GATConv(hidden, hidden, heads=heads, concat=False)
        self.q = nn.Linear(hidden, 1)

    def collate(self, graphs: list[StrategyGraph]) -> Batch:
        return Batch.from_data_list(
            [Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index)) for g in graphs]
        )

    def embed(self, batch: Batch) -> torch.Tensor:
        x = self.normalise(batch.x)
        x = F.elu(self.conv1(x, batch.edge_index))
        x = F.elu(self.conv2(x, batch.edge_index))
        return global_mean_pool(x, batch.batch, size=batch.num_graphs)

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.q(hidden).squeeze(-1)
