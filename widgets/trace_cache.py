"""What the views derive from a trace (branches, colour keys, level-of-detail index, pool
occupancy, CPU series), kept with the trace so that showing it again costs nothing.

The cache lives *on* the `Trace` object (an attribute), not in a module-level dictionary keyed by
the trace: the derived data refers back to the trace (the level-of-detail index reads its
durations), so a `WeakKeyDictionary` value would keep its own key alive and no trace would ever be
freed. As an attribute it forms a plain reference cycle, collected with the trace once the window
drops it (the window keeps only a few traces in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from branchscope.profiling.trace.model import Trace

T = TypeVar("T")
_ATTR = "_widgets_derived"


def derived(trace: Trace, key: str, build: Callable[[], T]) -> T:
    """`build()`'s value for this trace under `key`: built on first use, then reused."""
    try:
        cache = trace.__dict__.setdefault(_ATTR, {})
    except AttributeError:  # a trace type without instance attributes: build every time
        return build()
    if key not in cache:
        cache[key] = build()
    return cache[key]
