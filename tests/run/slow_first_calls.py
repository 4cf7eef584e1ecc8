"""A model slow for its first calls, each quicker than the one before (as TorchScript's profiling
executor optimising a forked plan), then quick: written as a model file a worker loads, for the
tests of the warm-up (one process, or one slow rank of a distributed job)."""

from __future__ import annotations

from pathlib import Path

_SOURCE = """
import time
import torch
import torch.distributed as dist
from torch import nn

SLOW_CALLS = {slow_calls}
SLOW_RANK = {slow_rank}  # None: slow in every process
UNIT_S = 0.015


class SlowFirstCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= SLOW_CALLS and (SLOW_RANK is None or dist.get_rank() == SLOW_RANK):
            time.sleep(UNIT_S * (SLOW_CALLS + 1 - self.calls))
        return x * 2


def build_model():
    return SlowFirstCalls()


def example_inputs():
    return (torch.randn(4),)
"""


def write_slow_first_calls(path: Path, slow_calls: int, slow_rank: int | None = None) -> Path:
    """Writes the model to `path`: its first `slow_calls` calls sleep 15 ms × (slow_calls + 1 − call),
    in every process, or only in rank `slow_rank` of a distributed job."""
    path.write_text(_SOURCE.format(slow_calls=slow_calls, slow_rank=slow_rank))
    return path
