"""Two towers of large matrix products: where Python threads overlap as well as fork."""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "Two towers of three Linear(1024) layers, batch 64, on two inputs, joined by a sum: few ops, each "
    "computing for milliseconds without the GIL, so the towers overlap on Python threads (threads mode) "
    "about as well as on TorchScript's inter-op pool (fork mode). Compare with small-ops."
)

WIDTH = 1024
BATCH = 64


def tower() -> nn.Sequential:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))


class TwoTowers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.user = tower()
        self.item = tower()

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        return self.user(user) + self.item(item)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return TwoTowers()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH))
