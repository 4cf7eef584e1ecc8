"""The smallest fork-join: two matrix products of one input, added."""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "y = x·Wy and z = x·Wz from one input, then y + z: the smallest fork-join; with 2 inter-op threads "
    "the two products should overlap."
)

SIZE = 768


class TwinMM(nn.Module):
    def __init__(self, n: int = SIZE) -> None:
        super().__init__()
        self.Wy = nn.Linear(n, n, bias=False)
        self.Wz = nn.Linear(n, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.Wy(x)
        z = self.Wz(x)
        return y + z


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return TwinMM()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(SIZE, SIZE),)
