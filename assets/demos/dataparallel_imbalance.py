"""nn.DataParallel over two or more GPUs: replicas run side by side, but GPU 0 does extra work."""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "nn.DataParallel splits the batch over the GPUs but scatters, gathers and holds the outputs on GPU 0: "
    "compare GPU 0's busy time and memory with the other GPUs (needs 2 or more CUDA devices)."
)

#: The loader refuses this demo (with a message saying so) on machines with fewer CUDA devices.
REQUIRES_CUDA_DEVICES = 2


class Tower(nn.Module):
    def __init__(self, width: int = 2048, depth: int = 6) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 8 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The wide head output is gathered onto GPU 0: the imbalance to look for.
        return self.head(self.body(x))


def build_model() -> nn.Module:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < REQUIRES_CUDA_DEVICES:
        raise RuntimeError(f"dataparallel-imbalance needs at least {REQUIRES_CUDA_DEVICES} CUDA devices; found {count}")
    torch.manual_seed(0)
    return nn.DataParallel(Tower().to("cuda:0"), device_ids=list(range(count)))


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(1024, 2048, device="cuda:0"),)
