"""DistributedDataParallel where rank 0 gathers every rank's outputs and computes the loss, as
DataParallel does on its first GPU: rank 0's memory and time grow with the world size."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

# The same net, data and DDP wrapper as ddp-local-loss: only where the loss is computed differs.
from branchscope.assets.demos.ddp_local_loss import CLASSES, WIDTH, build_model, example_inputs, wrapped

__all__ = ["CLASSES", "DESCRIPTION", "WIDTH", "build_model", "example_inputs", "gathered_loss_grad", "train_step"]

DESCRIPTION = (
    "A DistributedDataParallel training step where rank 0 gathers every rank's logits and targets, "
    "computes the loss and scatters the logits' gradients back, as DataParallel computes the loss on "
    "its first GPU: rank 0's memory peak and step time grow with the world size; compare with "
    "ddp-local-loss (run with --nproc 2 or more; gloo on CPU, nccl on GPUs)."
)

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
