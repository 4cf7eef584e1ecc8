"""DistributedDataParallel, one training step per rank, every rank computing its own loss: balanced."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

DESCRIPTION = (
    "A DistributedDataParallel training step where every rank computes the loss of its own batch "
    "(forward, loss, backward with DDP's gradient all-reduce, SGD step): ranks stay balanced in time "
    "and memory; compare with ddp-gather-loss (run with --nproc 2 or more; gloo on CPU, nccl on GPUs)."
)

#: Wide logits over a small body: the outputs, not the weights, are what memory holds.
WIDTH, CLASSES, BATCH = 64, 4096, 128


class Net(nn.Module):
    def __init__(self, width: int = WIDTH, classes: int = CLASSES) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU())
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        """The logits; `target` is for train_step (example_inputs passes both)."""
        return self.head(self.body(x))


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def build_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank (DDP checks it)
    return Net()


def example_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's own batch and targets."""
    gen = torch.Generator().manual_seed(1 + rank())
    return torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen)


#: The DDP wrapper and optimizer of each module train_step is given (made on its first step).
_state: dict[int, tuple[nn.Module, torch.optim.Optimizer]] = {}


def wrapped(model: nn.Module) -> tuple[nn.Module, torch.optim.Optimizer]:
    if id(model) not in _state:
        model.train()
        ddp = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model
        _state[id(model)] = (ddp, torch.optim.SGD(model.parameters(), lr=1e-3))
    return _state[id(model)]


def train_step(model: nn.Module, inputs: Any) -> torch.Tensor:
    x, target = inputs
    ddp, opt = wrapped(model)
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(ddp(x), target)
    loss.backward()  # DDP all-reduces the gradients
    opt.step()
    return loss.detach()
