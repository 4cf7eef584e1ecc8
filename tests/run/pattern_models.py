"""Small models of the shapes real models give branch timing trouble with (issue 33): a module
called by two branches, branches the forward interleaves, an embedding tied under two paths, and
modules shared across blocks of parallel branches. Each is plain torch, built in the tests."""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 32


def _mlp(width: int = WIDTH) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))


class Siamese(nn.Module):
    """One encoder called on two inputs: two branches that share every module."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = _mlp()
        self.head = nn.Linear(2 * WIDTH, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.encoder(x), self.encoder(y)], dim=1))


class Interleaved(nn.Module):
    """Two independent scales computed block by block in turn (as CrossViT's forward does): each
    branch runs in several pieces, the other branch's between them."""

    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.small = nn.ModuleList(_mlp() for _ in range(blocks))
        self.large = nn.ModuleList(_mlp() for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x, x * 2.0
        for small, large in zip(self.small, self.large, strict=True):
            a = small(a)
            b = large(b)
        return a + b


class Half(nn.Module):
    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embed_tokens = embedding  # the one embedding, under two paths
        self.layers = _mlp()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layers(self.embed_tokens(ids))


class TiedEmbedding(nn.Module):
    """An encoder and a decoder that share their embedding (BART's `shared`), each fed its own ids."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.shared = nn.Embedding(vocab, WIDTH)
        self.encoder = Half(self.shared)
        self.decoder = Half(self.shared)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.encoder(src).mean(1) + self.decoder(tgt).mean(1)


class SharedAcrossBlocks(nn.Module):
    """Blocks of two parallel paths whose modules every block reuses (as CoaT's parallel blocks
    share theirs): each branch's modules are called once per block."""

    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.left = _mlp()
        self.right = _mlp()
        self.blocks = blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.blocks):
            x = self.left(x) + self.right(x)
        return x


def patterns() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """Each pattern model (eval mode) and its example inputs, by name."""
    torch.manual_seed(0)
    x, y = torch.randn(8, WIDTH), torch.randn(8, WIDTH)
    ids, ids2 = torch.randint(0, 50, (4, 6)), torch.randint(0, 50, (4, 7))
    return {
        "siamese": (Siamese().eval(), (x, y)),
        "interleaved": (Interleaved().eval(), (x,)),
        "tied": (TiedEmbedding().eval(), (ids, ids2)),
        "shared_blocks": (SharedAcrossBlocks().eval(), (x,)),
    }
