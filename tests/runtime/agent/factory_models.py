"""A model factory outside the zoo (issue 41): a small transformer language model whose output
projection is tied to its token embedding, as a user would write it for `searches.model_factory`."""

from __future__ import annotations

import torch
from torch import nn

VOCAB, DIM, HEADS, SEQ, LAYERS = 50, 16, 2, 8, 2


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=2 * DIM, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied: one variable, used twice

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.norm(self.blocks(h)))


def batch(n: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s ``n`` sequences (the same on every call): next-token targets."""
    g = torch.Generator().manual_seed(1000 + step)
    seq = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
    return seq[:, :-1].to(torch.get_default_device()), seq[:, 1:].to(torch.get_default_device())


def tiny_lm() -> tuple[nn.Module, object]:
    return TinyLM(), batch


def tiny_lm_untied() -> tuple[nn.Module, object]:
    """Another model (the head has its own weight): not the spec of ``tiny_lm``."""
    m = TinyLM()
    m.head.weight = nn.Parameter(torch.randn(VOCAB, DIM) * 0.02)
    return m, batch
