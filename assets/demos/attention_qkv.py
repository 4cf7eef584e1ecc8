"""Multi-head self-attention with separate query, key and value projections: the fork inside every
transformer layer (BERT, ViT, GPT-2...), in plain torch so it runs without extra packages."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DESCRIPTION = (
    "Two transformer layers whose query, key and value projections read one input: three branches per "
    "layer, joined by the attention; fork runs the projections over the inter-op pool."
)

DIM, HEADS, TOKENS, BATCH = 512, 8, 256, 4


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # (batch, heads, tokens, head dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.mlp(x))


class Encoder(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Encoder()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(BATCH, TOKENS, DIM),)
