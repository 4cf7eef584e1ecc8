"""branchscope's Qt-free core: the trace model, the reader, analyses, and the profiling runner.

Nothing here imports Qt; only `profiling.worker` (run in its own process) imports torch at import
time, so the GUI can use this package without paying for torch.
"""

from profiling.trace_merge import load_traces, merge_traces
from profiling.trace_model import Lane, MemorySeries, Trace, TraceFormatError, build_trace
from profiling.trace_reader import load_trace

__all__ = [
    "Lane",
    "MemorySeries",
    "Trace",
    "TraceFormatError",
    "build_trace",
    "load_trace",
    "load_traces",
    "merge_traces",
]
