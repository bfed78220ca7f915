"""The RNN simulator of AutoSync supplementary §4 (Eqs. 4-7).

    z_i     = MLP_i(z_i^raw ⊕ z_i^pre)                               (4)
    h_{i+1} = LSTM(h_i, z_i)              shards in forward order     (5)
    h'_{i+1} = LSTM'(h'_i, z_{|V'|+1-i})  shards in reverse order     (6)
    f̂       = MLP_o([h_{|V'|}, h'_{|V'|}])                           (7)

The two LSTMs are separate (not one bidirectional LSTM, whose backward half would start at the
padding of a batch); strategies of different lengths are batched with packed sequences.

Shapes:
    input: padded shard features (B, L, F) with lengths (B,)
    hidden (``embed``): (B, 2H), the two final LSTM states
    output: (B,)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

from simulator.learned.features import NUM_SHARD_FEATURES, StrategyGraph
from simulator.learned.net import SimulatorNet


@dataclass(frozen=True)
class SequenceBatch:
    """Padded forward and reversed shard sequences of B strategies."""

    forward: torch.Tensor  # (B, L, F)
    backward: torch.Tensor  # (B, L, F): each sequence reversed within its own length
    lengths: torch.Tensor  # (B,) int64 on the CPU (packing needs it there)


class RNNSimulatorNet(SimulatorNet):
    """MLP_i → forward LSTM ‖ reverse LSTM → MLP_o (Eqs. 4-7)."""

    kind = "rnn"

    def __init__(self, in_dim: int = NUM_SHARD_FEATURES, hidden: int = 32) -> None:
        super().__init__(in_dim, hidden)
        self.mlp_in = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.lstm_fwd = nn.LSTM(hidden, hidden, batch_first=True)
        self.lstm_bwd = nn.LSTM(hidden, hidden, batch_first=True)
        self.mlp_out = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    @property
    def embedding_dim(self) -> int:
        return 2 * self.hidden_dim

    def collate(self, graphs: list[StrategyGraph]) -> SequenceBatch:
        seqs = [torch.from_numpy(g.x) for g in graphs]
        return SequenceBatch(
            forward=pad_sequence(seqs, batch_first=True),
            backward=pad_sequence([s.flip(0) for s in seqs], batch_first=True),
            lengths=torch.tensor([len(s) for s in seqs], dtype=torch.int64),
        )

    def _final_state(self, lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        z = self.mlp_in(self.normalise(x))
        packed = pack_padded_sequence(z, lengths, batch_first=True, enforce_sorted=False)
        # oneDNN builds an LSTM primitive per input shape (~0.2 s each); strategies have many
        # lengths, so the native kernel is much faster here.
        with torch.backends.mkldnn.flags(enabled=False):
            _, (h, _) = lstm(packed)
        return h[-1]

    def embed(self, batch: SequenceBatch) -> torch.Tensor:
        h = self._final_state(self.lstm_fwd, batch.forward, batch.lengths)
        h_rev = self._final_state(self.lstm_bwd, batch.backward, batch.lengths)
        return torch.cat([h, h_rev], dim=1)

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.mlp_out(hidden).squeeze(-1)
