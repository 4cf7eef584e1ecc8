"""The lstm-ensemble demo forked by hand, as in the TorchScript dynamic-parallelism tutorial.

A model file for the benchmark: the same weights as the demo (same seed), members launched with
torch.jit.fork and summed after torch.jit.wait. Run in `sequential` mode (its forward is the fork).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

_DEMO = Path(__file__).resolve().parent.parent / "assets" / "demos" / "lstm_ensemble.py"


def _demo():
    spec = importlib.util.spec_from_file_location("branchscope_bench_lstm_demo", _DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class HandForked(nn.Module):
    def __init__(self, members: nn.ModuleList) -> None:
        super().__init__()
        self.members = members

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        futures: list[torch.jit.Future[torch.Tensor]] = []
        for member in self.members:
            futures.append(torch.jit.fork(member, x))
        out = torch.jit.wait(futures[0])
        for future in futures[1:]:
            out = out + torch.jit.wait(future)
        return out


def build_model() -> nn.Module:
    return torch.jit.script(HandForked(_demo().build_model().members))


def example_inputs() -> tuple[torch.Tensor, ...]:
    return _demo().example_inputs()
