"""An ensemble of bidirectional LSTMs, after the TorchScript dynamic-parallelism tutorial.

Each member runs a forward LSTM over the sequence and a second LSTM over the reversed sequence;
members are summed. LSTMs are a chain of small matrix products, so one member cannot use many
cores, but the members (and each member's two directions) are independent.
"""

from __future__ import annotations

import torch
from torch import nn

DESCRIPTION = (
    "Four bidirectional LSTM members (a forward and a backward LSTM each), summed: small sequential "
    "ops that intra-op threads cannot speed up, but fork runs members and directions side by side."
)

SEQ_LEN = 200
BATCH = 16
INPUT = 64
HIDDEN = 256
MEMBERS = 4


class BidirectionalMember(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fwd = nn.LSTM(INPUT, HIDDEN)
        self.bwd = nn.LSTM(INPUT, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        forward_out, _ = self.fwd(x)
        backward_out, _ = self.bwd(torch.flip(x, [0]))
        return forward_out + torch.flip(backward_out, [0])


class LSTMEnsemble(nn.Module):
    def __init__(self, members: int = MEMBERS) -> None:
        super().__init__()
        self.members = nn.ModuleList(BidirectionalMember() for _ in range(members))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.members[0](x)
        for member in self.members[1:]:
            out = out + member(x)
        return out


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return LSTMEnsemble()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(SEQ_LEN, BATCH, INPUT),)
