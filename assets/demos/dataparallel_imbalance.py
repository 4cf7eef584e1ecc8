"""nn.DataParallel over two or more GPUs, one training step: GPU 0 holds what the others do not."""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "A DataParallel training step (forward, loss on GPU 0 as DataParallel users compute it, backward): "
    "GPU 0 gathers every replica's logits and holds the loss, so its memory peaks above the others; "
    "compare with dataparallel-balanced (needs 2 or more CUDA devices)."
)

#: The loader refuses this demo (with a message saying so) on machines with fewer CUDA devices.
REQUIRES_CUDA_DEVICES = 2
#: Wide logits (a vocabulary, say) make the gathered outputs the imbalance to look for.
WIDTH, CLASSES, BATCH = 1024, 32_000, 512


class Net(nn.Module):
    def __init__(self, width: int = WIDTH, classes: int = CLASSES, depth: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class TrainStep(nn.Module):
    """One step as DataParallel users write it: the replicas' logits are gathered on the first
    device, the loss is computed there, then backward; the loss is returned."""

    def __init__(self, net: nn.Module, device_ids: list[int] | None) -> None:
        super().__init__()
        self.net = net
        self.parallel = nn.DataParallel(net, device_ids=device_ids)
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():  # branchscope runs steps under no_grad; a training step needs grad
            logits = self.parallel(x)  # every replica's logits, gathered on the first device
            loss = self.criterion(logits, target)
            loss.backward()
        self.net.zero_grad(set_to_none=True)
        return loss.detach()


def device_ids() -> list[int]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < REQUIRES_CUDA_DEVICES:
        raise RuntimeError(f"this demo needs at least {REQUIRES_CUDA_DEVICES} CUDA devices; found {count}")
    return list(range(count))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return TrainStep(Net().to("cuda:0"), device_ids())


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(BATCH, WIDTH, device="cuda:0"), torch.randint(0, CLASSES, (BATCH,), device="cuda:0"))
