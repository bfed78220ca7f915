"""Reference PyTorch implementations of the zoo models that torchvision/transformers do not ship.

- ``NeuMF``: neural collaborative filtering (He et al., WWW'17, Sec. 3.4, the fused GMF + MLP
  model), laid out like the tensorflow/models ``official/recommendation/neumf_model.py`` that
  AutoSync ran: one user and one item embedding table of width ``mf_dim + mlp_layers[0] // 2``,
  each split into its GMF part and its MLP part; MLP towers ``mlp_layers``; a 1-unit logit.
- ``WMTTransformer``: the Transformer of Vaswani et al. (NeurIPS'17) as in tensorflow/models
  ``official/nlp/transformer`` (base parameters): one embedding table shared by source, target
  and the pre-softmax projection (scaled by sqrt(d_model)), sinusoidal positions (no parameters),
  and ``torch.nn.Transformer`` for the encoder-decoder stack.

Shapes:
    NeuMF:          users (B,), items (B,) int64  -> logits (B, 1)
    WMTTransformer: src (B, S), tgt (B, T) int64   -> logits (B, T, vocab)
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

# MovieLens-20M after the usual filtering (users with >= 20 ratings): 138,493 users, 26,744 items.
# MLPerf's x16x32 expansion multiplies them by 16 and 32.
ML20M_USERS = 138_493
ML20M_ITEMS = 26_744
WMT_ENDE_VOCAB = 33_708  # tensorflow/models official transformer: shared en-de subword vocabulary


class NeuMF(nn.Module):
    """NeuMF = GMF (elementwise product of embeddings) fused with an MLP tower, He et al. Sec. 3.4."""

    def __init__(
        self,
        num_users: int = ML20M_USERS * 16,
        num_items: int = ML20M_ITEMS * 32,
        mf_dim: int = 8,
        mlp_layers: tuple[int, ...] = (64, 32, 16, 8),
    ) -> None:
        super().__init__()
        self.mf_dim = mf_dim
        width = mf_dim + mlp_layers[0] // 2
        self.embedding_user = nn.Embedding(num_users, width)
        self.embedding_item = nn.Embedding(num_items, width)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(mlp_layers))
        self.logits = nn.Linear(mf_dim + mlp_layers[-1], 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u = self.embedding_user(users)
        i = self.embedding_item(items)
        gmf = u[:, : self.mf_dim] * i[:, : self.mf_dim]
        h = torch.cat([u[:, self.mf_dim :], i[:, self.mf_dim :]], dim=-1)
        for layer in self.mlp:
            h = torch.relu(layer(h))
        return self.logits(torch.cat([gmf, h], dim=-1))


def sinusoid_positions(length: int, d_model: int, device: torch.device) -> torch.Tensor:
    """Fixed sinusoidal position encodings (Vaswani et al. Sec. 3.5), shape (length, d_model)."""
    pos = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, device=device).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class WMTTransformer(nn.Module):
    """Encoder-decoder Transformer with one embedding shared by source, target and output."""

    def __init__(
        self,
        vocab: int = WMT_ENDE_VOCAB,
        d_model: int = 512,
        heads: int = 8,
        layers: int = 6,
        d_ffn: int = 2048,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        self.transformer = nn.Transformer(
            d_model, heads, layers, layers, d_ffn, dropout=dropout, batch_first=True
        )

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        pe = sinusoid_positions(max(src.shape[1], tgt.shape[1]), self.d_model, src.device)
        s = self.embedding(src) * scale + pe[: src.shape[1]]
        t = self.embedding(tgt) * scale + pe[: tgt.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.transformer(s, t, tgt_mask=mask, tgt_is_causal=True)
        return h @ self.embedding.weight.t()
