"""Two branches of many small ops: where Python threads meet the GIL."""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "Two independent branches of 200 tiny ops each (indexing, multiply, add, tanh on 64 numbers). Each op computes "
    "for a few microseconds without the GIL, but the Python around it needs the GIL: in threads mode the "
    "branches mostly take turns (run.json's branch_threads shows the GIL wait), fork mode's TorchScript "
    "needs no GIL between ops. Compare with two-towers, whose few large ops overlap in both."
)

#: Element-wise ops per branch (3 per layer) and the numbers each op works on.
LAYERS = 40
WIDTH = 64


class SmallOps(nn.Module):
    """One branch: LAYERS rounds of scale, shift and tanh on a small vector."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.rand(LAYERS, WIDTH) + 0.5)
        self.shift = nn.Parameter(torch.randn(LAYERS, WIDTH) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(LAYERS):
            x = torch.tanh(x * self.scale[i] + self.shift[i])
        return x


class TwoSmallBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = SmallOps()
        self.right = SmallOps()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.left(x) + self.right(x)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return TwoSmallBranches()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(WIDTH),)
