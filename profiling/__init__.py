"""branchscope's Qt-free core: two engines side by side.

- `branchscope.profiling.trace`: the trace model, reader, flows, merging, analyses (what reads and
  derives from a trace);
- `branchscope.profiling.run`: model sources, branch discovery, plans, worker, runner.

Nothing here imports Qt; torch is imported only in the worker process. The package re-exports the
trace entry points (`load_trace` and friends) and nothing from the run engine.
"""

from branchscope.profiling.trace.merge import load_traces, merge_traces
from branchscope.profiling.trace.model import (
    Lane,
    LoadCancelled,
    MemorySeries,
    Trace,
    TraceFormatError,
    build_trace,
)
from branchscope.profiling.trace.reader import load_trace

__all__ = [
    "Lane",
    "LoadCancelled",
    "MemorySeries",
    "Trace",
    "TraceFormatError",
    "build_trace",
    "load_trace",
    "load_traces",
    "merge_traces",
]
