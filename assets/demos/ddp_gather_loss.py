"""DistributedDataParallel where rank 0 gathers every rank's outputs and computes the loss, as
DataParallel does on its first GPU: rank 0's memory and time grow with the world size."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

DESCRIPTION = (
    "A DistributedDataParallel training step where rank 0 gathers every rank's logits and targets, "
    "computes the loss and scatters the logits' gradients back, as DataParallel computes the loss on "
    "its first GPU: rank 0's memory peak and step time grow with the world size; compare with "
    "ddp-local-loss (run with --nproc 2 or more; gloo on CPU, nccl on GPUs)."
)

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
    torch.manual_seed(0)
    return Net()


def example_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1 + rank())
    return torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen)


_state: dict[int, tuple[nn.Module, torch.optim.Optimizer]] = {}


def wrapped(model: nn.Module) -> tuple[nn.Module, torch.optim.Optimizer]:
    if id(model) not in _state:
        model.train()
        ddp = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model
        _state[id(model)] = (ddp, torch.optim.SGD(model.parameters(), lr=1e-3))
    return _state[id(model)]


def gathered_loss_grad(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss's gradient for this rank's logits, the loss computed on rank 0 over every rank's
    logits (gathered there, as DataParallel gathers its replicas' outputs)."""
    if not dist.is_initialized():
        local = logits.detach().requires_grad_()
        nn.functional.cross_entropy(local, target).backward()
        assert local.grad is not None
        return local.grad
    world = dist.get_world_size()
    out = logits.detach()
    if dist.get_rank() == 0:
        all_logits = [torch.empty_like(out) for _ in range(world)]
        all_targets = [torch.empty_like(target) for _ in range(world)]
        dist.gather(out, all_logits, dst=0)
        dist.gather(target, all_targets, dst=0)
        full = torch.cat(all_logits).requires_grad_()
        nn.functional.cross_entropy(full, torch.cat(all_targets)).backward()
        assert full.grad is not None
        grads = list(full.grad.chunk(world))
        mine = torch.empty_like(out)
        dist.scatter(mine, grads, src=0)
        return mine
    dist.gather(out, dst=0)
    dist.gather(target, dst=0)
    mine = torch.empty_like(out)
    dist.scatter(mine, src=0)
    return mine


def train_step(model: nn.Module, inputs: Any) -> None:
    x, target = inputs
    ddp, opt = wrapped(model)
    opt.zero_grad(set_to_none=True)
    logits = ddp(x)
    logits.backward(gathered_loss_grad(logits, target))  # DDP all-reduces the parameters' gradients
    opt.step()
