"""dataparallel-imbalance's step with the loss computed in each replica, as DataParallelCriterion does."""

from __future__ import annotations

import torch
from torch import nn

# dataparallel-imbalance's net, devices and inputs: only where the loss is computed differs
from branchscope.assets.demos.dataparallel_imbalance import Net, device_ids
from branchscope.assets.demos.dataparallel_imbalance import example_inputs as example_inputs

DESCRIPTION = (
    "The same DataParallel training step with the loss computed inside each replica (as PyTorch-Encoding's "
    "DataParallelCriterion does): only one number per replica is gathered on GPU 0, so the GPUs' memory "
    "evens out; compare with dataparallel-imbalance (needs 2 or more CUDA devices)."
)

REQUIRES_CUDA_DEVICES = 2


class NetWithLoss(nn.Module):
    """The net and its loss in one module: each replica returns its own loss."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.criterion(self.net(x), target).unsqueeze(0)


class BalancedTrainStep(nn.Module):
    def __init__(self, net: nn.Module, device_ids: list[int] | None) -> None:
        super().__init__()
        self.net = net
        self.parallel = nn.DataParallel(NetWithLoss(net), device_ids=device_ids)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            loss = self.parallel(x, target).mean()  # one loss per replica gathered, not the logits
            loss.backward()
        self.net.zero_grad(set_to_none=True)
        return loss.detach()


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return BalancedTrainStep(Net().to("cuda:0"), device_ids())
