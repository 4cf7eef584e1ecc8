"""What a trace's memory events are, and why a trace has none, in words every view and the CLI share.

torch.profiler writes the allocator's `[memory]` events with `profile_memory=True`, except when it
profiles every thread (`profile_all_threads`, branchscope's threads mode): then it writes none, on
any thread. A branchscope run says in its trace (`run_info.RunInfo.memory_source`) what recorded its
memory instead (`profiling/run/thread_memory.py`), or why there is none; other traces say in
kineto's `profile_memory` whether memory was asked for.
"""

from __future__ import annotations

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.model import Trace

#: Why a trace has no memory events, by its `profile_memory`: off, on (and yet none), not said.
WITHOUT_PROFILE_MEMORY = "no memory events: torch.profiler was run without profile_memory=True"
NONE_RECORDED = (
    "no memory events: torch.profiler was run with profile_memory=True and recorded no allocation "
    "(it records none when it profiles every thread, profile_all_threads)"
)
NOT_SAID = "no memory events in this trace (torch.profiler writes them with profile_memory=True)"


def recorded_by(trace: Trace) -> str | None:
    """What recorded the trace's memory events where it was not torch.profiler itself (a
    branchscope threads run's: each thread's own), in a line; None: the profiler's own, or none."""
    info = trace.run_info
    source = info.memory_source if info is not None else None
    return source if trace.memory and source and not source.startswith("no memory") else None


def why_none(trace: Trace) -> str:
    """Why `trace` has no memory events, in a line, from what the trace says of itself."""
    info = trace.run_info
    if info is not None and info.memory_source and info.memory_source.startswith("no memory"):
        return info.memory_source
    asked = kineto.PROFILE_MEMORY.of(trace.metadata)
    if asked in (0, False):
        return WITHOUT_PROFILE_MEMORY
    if asked in (1, True):
        return NONE_RECORDED
    return NOT_SAID
