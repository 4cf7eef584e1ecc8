"""Natural order for names that carry numbers: ranks, devices, steps.

As strings, "rank10" sorts before "rank2" and "cuda:10" before "cuda:2"; every list of ranks or
devices (the Memory tab, `branchscope memory`, the details panel, sortable tables) sorts by
`natural_key` instead, numbers by value. A leaf module: the trace engine's readers and analyses
import it without a cycle.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """Case-insensitive, numbers by value: "rank2" before "rank10", "rank1/cuda:2" before
    "rank1/cuda:10", "step 2" before "Step 10"."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in _DIGITS.split(text))
