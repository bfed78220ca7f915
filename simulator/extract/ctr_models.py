"""HeterPS's CTR models (Section 6.2) as PyTorch modules for the zoo: CTRDNN, MATCHNET, 2EMB and NCE.

The paper names the models and their layer counts (MATCHNET 16, CTRDNN 16, 2EMB 10, NCE 5, and
CTRDNN variants of 8, 12, 16 and 20 layers made by removing or adding fully-connected layers) but
not their sizes; Baidu's are not public. The structures below follow the public PaddleRec models
the names come from (``rank/dnn`` for CTRDNN: 26 sparse slots + 13 dense features of Criteo, an
embedding, an FC tower, a 1-unit output; ``match/multiview-simnet``-style two towers for
MATCHNET; ``recall/word2vec`` with an NCE loss for NCE), with layer counts equal to the paper's
(each count is what ``simulator.extract`` produces: one layer per embedding, convolution, linear
or joining op).

Table sizes are chosen at industrial scale, since the point of the paper is that such tables are
data-intensive (its embedding layer "processes around 10 TB"): 2^32 (4.3e9) hashed feature rows
of width 16 for CTRDNN (275 GB in float32), two 2^30-row tables for MATCHNET (width 64, 275 GB
each) and 2EMB (width 32, 137 GB each), and a 2^28-entry vocabulary of width 128 for NCE (input
and output tables, 137 GB each). For scale: Criteo-1TB has about 8.8e8 distinct categorical
values before hashing, and production CTR models at Baidu have far more features (AIBox,
Zhao et al. 2019, trains models with 10^11 sparse features).

Shapes:
    CTRDNN:   ids (B, 26) int64, dense (B, 13) float        -> logits (B, 1)
    MATCHNET: query (B, 32) int64, title (B, 32) int64      -> score (B, 1)
    TwoEmb:   user (B, 16) int64, item (B, 16) int64        -> logits (B, 1)
    NCE:      words (B, 5) int64, targets (B, 1 + 5) int64  -> scores (B, 6)
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

CRITEO_SPARSE = 26  # categorical slots of Criteo
CRITEO_DENSE = 13  # integer (dense) features of Criteo


class CTRDNN(nn.Module):
    """Embedding of 26 sparse slots, concatenated with 13 dense features, an FC tower, a logit.

    ``layers`` counts the embedding, the hidden FC layers and the output layer.
    """

    def __init__(self, layers: int = 16, rows: int = 2**32, dim: int = 16, width: int = 1024) -> None:
        super().__init__()
        if layers < 3:
            raise ValueError(f"layers: need >= 3, got {layers}")
        self.embedding = nn.Embedding(rows, dim)
        widths = [CRITEO_SPARSE * dim + CRITEO_DENSE] + [width] * (layers - 2)
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.out = nn.Linear(width, 1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.embedding(ids).flatten(1), dense], dim=1)
        for fc in self.fc:
            h = torch.relu(fc(h))
        return self.out(h)


class MatchNet(nn.Module):
    """Two towers (query, title): embedding, 1-D convolution, three FCs each; a joined FC head.

    16 layers: 2 embeddings, 2 convolutions, 6 tower FCs, the join (concatenation of the towers),
    4 head FCs and the output.
    """

    def __init__(self, rows: int = 2**30, dim: int = 64, width: int = 512) -> None:
        super().__init__()
        self.q_emb = nn.Embedding(rows, dim)
        self.t_emb = nn.Embedding(rows, dim)
        self.q_conv = nn.Conv1d(dim, width, kernel_size=3, padding=1)
        self.t_conv = nn.Conv1d(dim, width, kernel_size=3, padding=1)
        self.q_fc = nn.ModuleList(nn.Linear(width, width) for _ in range(3))
        self.t_fc = nn.ModuleList(nn.Linear(width, width) for _ in range(3))
        self.head = nn.ModuleList([nn.Linear(2 * width, width)] + [nn.Linear(width, width) for _ in range(3)])
        self.out = nn.Linear(width, 1)

    def _tower(
        self, emb: nn.Embedding, conv: nn.Conv1d, fcs: nn.ModuleList, ids: torch.Tensor
    ) -> torch.Tensor:
        h = torch.relu(conv(emb(ids).transpose(1, 2))).amax(dim=2)
        for fc in fcs:
            h = torch.relu(fc(h))
        return h

    def forward(self, query: torch.Tensor, title: torch.Tensor) -> torch.Tensor:
        q = self._tower(self.q_emb, self.q_conv, self.q_fc, query)
        t = self._tower(self.t_emb, self.t_conv, self.t_fc, title)
        h = torch.cat([q, t], dim=1)
        for fc in self.head:
            h = torch.relu(fc(h))
        return self.out(h)


class TwoEmb(nn.Module):
    """Two embedding tables (user and item slots), joined, an FC tower of six, a logit: 10 layers."""

    def __init__(self, rows: int = 2**30, dim: int = 32, width: int = 1024, slots: int = 16) -> None:
        super().__init__()
        self.user = nn.Embedding(rows, dim)
        self.item = nn.Embedding(rows, dim)
        widths = [2 * slots * dim] + [width] * 6
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.out = nn.Linear(width, 1)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.user(user).flatten(1), self.item(item).flatten(1)], dim=1)
        for fc in self.fc:
            h = torch.relu(fc(h))
        return self.out(h)


class NCE(nn.Module):
    """word2vec-style context model with a noise-contrastive output: 5 layers.

    Input embedding of the context words, two FCs, the output embedding of the true and the
    sampled noise words (a second, sparse table), and their scores (a batched dot product).
    """

    def __init__(self, vocab: int = 2**28, dim: int = 128, width: int = 1024) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.fc1 = nn.Linear(dim, width)
        self.fc2 = nn.Linear(width, dim)
        self.out_emb = nn.Embedding(vocab, dim)

    def forward(self, words: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h = self.emb(words).mean(dim=1)
        h = self.fc2(torch.relu(self.fc1(h)))
        w = self.out_emb(targets)
        return torch.bmm(w, h.unsqueeze(2)).squeeze(2)
