"""A generated plan's memory: run on one thread, the threads plan peaks where the model's own forward
does, since it drops each value after its last use as the forward (torch.fx's code) does; measured in
process with the recorder threads runs use (`thread_memory.ThreadMemory`, on the main thread and each
pool thread)."""

from __future__ import annotations

import pytest
import torch

from branchscope.profiling.run.branch_pool import BranchPool
from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.modes import threads
from branchscope.profiling.run.plans import max_abs_diff
from branchscope.profiling.run.thread_memory import ThreadMemory, legacy_profiler

pytestmark = pytest.mark.skipif(legacy_profiler(torch) is None, reason="this torch has no legacy profiler")


@pytest.fixture(scope="module")
def one_thread():
    pool = BranchPool(1)
    yield pool
    pool.shutdown()


def peak_bytes(fn, inputs, pool):
    """The highest total of CPU bytes allocated during a step of `fn` (after one step to warm up),
    over the main thread and `pool`'s threads; and the step's output."""
    memory = ThreadMemory(torch, legacy_profiler(torch))
    with torch.no_grad():
        fn(*inputs)
        memory.on_pool(pool, memory.start)
        try:
            out = fn(*inputs)
        finally:
            memory.on_pool(pool, memory.stop)
    totals = [e["args"]["Total Allocated"] for e in memory.trace_events(0, 0)]
    return max(totals), out


@pytest.mark.parametrize("demo", ["inception", "two-towers"])
def test_threads_plan_on_one_thread_peaks_where_the_models_forward_does(demo, one_thread):
    loaded = load_model(ModelSpec(demo=demo))
    analysis = find_branches(loaded.model, loaded.inputs)
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=one_thread)
    sequential, expected = peak_bytes(loaded.model, loaded.inputs, one_thread)
    planned, out = peak_bytes(plan, loaded.inputs, one_thread)
    assert max_abs_diff(expected, out) <= 1e-5
    assert sequential > 0
    assert abs(planned - sequential) <= 0.10 * sequential, (planned, sequential)
