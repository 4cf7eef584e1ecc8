"""A plan's step under torch's profiler, read back as branchscope reads a trace: what the tests of
plans use to see which branch each op ran in."""

from __future__ import annotations

import torch

from branchscope.profiling.run.cpu_sampler import settle_interop_pool
from branchscope.profiling.run.model_source import LoadedModel


def branch_labels_in_trace(plan, loaded: LoadedModel, tmp_path):
    """Runs `plan` once on `loaded`'s inputs under the profiler (CPU), exports the trace into
    `tmp_path` and loads it: the Trace and its `branch_assignment`."""
    from torch.profiler import ProfilerActivity, profile

    from branchscope.profiling import load_trace
    from branchscope.profiling.trace.analyses import branch_assignment

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        plan(*loaded.inputs, **loaded.kwargs)
        assert settle_interop_pool(timeout_s=10.0)  # before the profiler stops: see its docstring
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = load_trace(path)
    return trace, branch_assignment(trace)
