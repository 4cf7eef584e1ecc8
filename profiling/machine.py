"""Facts about the machine: the cores this process may run on, as the worker, the sweep and the
window all count them. No torch, no Qt."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The CPUs this process may run on, counted the way the worker counts them for its runs
    (`len(os.sched_getaffinity(0))`): a container or `taskset` may allow fewer than the machine has,
    and the thread sliders and the oversubscription hint must agree with the runs' `cores`."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1
