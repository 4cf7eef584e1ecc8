"""Arrows made from correlation ids (`correlation_flows`): a launch to the kernel, copy or set with
its id, where the trace's flow events give no arrow; never twice where they do; counted apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.flows import event_flows, flow_binder, flow_counts
from branchscope.profiling.trace.model import Lane
from branchscope.profiling.trace.sources import open_job
from tests.builders.events import trace_of

LANES = [Lane(0, "cpu", 10, 10, "main", "main"), Lane(1, "gpu", 0, 7, "stream 7", "stream", 0),
         Lane(2, "cpu", 20, 20, "other process", "main")]  # fmt: skip
CORR = kineto.CORRELATION.name


def _synthetic(events: list[tuple[tuple, Any]]):
    """A trace of (event tuple, correlation id or None) with correlation flows only, args as dicts."""
    return trace_of(
        [e for e, _ in events], LANES, cat="cuda_runtime",
        raw_args=[{} if c is None else {CORR: c} for _, c in events], flow_binder=flow_binder(None),
    )  # fmt: skip


def _arrows(trace) -> set[tuple[str, str]]:
    f = trace.flows
    return {(trace.event_name(int(s)), trace.event_name(int(d))) for s, d in zip(f.src, f.dst)}


def test_each_launch_gets_an_arrow_to_the_gpu_work_with_its_id():
    trace = _synthetic([
        ((0, "cudaLaunchKernel", 100, 10), 1), ((1, "gemm", 150, 40, "kernel"), 1),
        ((0, "cudaMemcpyAsync", 200, 10), 2), ((1, "Memcpy HtoD", 260, 40, "gpu_memcpy"), 2),
        ((0, "hipMemsetAsync", 300, 10), 3), ((1, "Memset", 320, 5, "gpu_memset"), 3),
        # not a launch, though its id is a GPU event's: no arrow
        ((0, "cudaStreamWaitEvent", 400, 10), 4), ((1, "Stream Wait", 420, 5, "cuda_sync"), 4),
        # a kernel whose launch the trace lacks, and a launch without an id
        ((1, "orphan", 500, 5, "kernel"), 99), ((0, "cudaLaunchKernel", 600, 10), None),
    ])  # fmt: skip
    assert _arrows(trace) == {("cudaLaunchKernel", "gemm"), ("cudaMemcpyAsync", "Memcpy HtoD"), ("hipMemsetAsync", "Memset")}
    f = trace.flows
    assert f.from_correlation.all() and f.cats == [kineto.LAUNCH_FLOW_CATEGORY.name]
    assert sorted(f.flow_id.tolist()) == [1, 2, 3]
    assert flow_counts(trace) == {"from_events": 0, "from_correlation": 3, "total": 3}


def test_a_selected_launch_or_kernel_finds_the_arrow_both_ways():
    trace = _synthetic([((0, "cudaLaunchKernel", 100, 10), 5), ((1, "gemm", 150, 40, "kernel"), 5)])
    launch, kernel = (next(i for i in range(len(trace)) if trace.event_name(i) == n) for n in ("cudaLaunchKernel", "gemm"))
    for selected in (launch, kernel):
        (k,) = event_flows(trace, selected).tolist()
        assert (int(trace.flows.src[k]), int(trace.flows.dst[k])) == (launch, kernel)


def test_one_id_said_by_two_processes_goes_to_the_launch_just_before():
    trace = _synthetic([
        ((0, "cudaLaunchKernel", 100, 10), 7), ((2, "cuLaunchKernel", 1000, 10), 7),
        ((1, "early", 150, 10, "kernel"), 7), ((1, "late", 1100, 10, "kernel"), 7),
    ])  # fmt: skip
    assert _arrows(trace) == {("cudaLaunchKernel", "early"), ("cuLaunchKernel", "late")}


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _x(name: str, ts: int, corr: Any, *, gpu: bool = False, cat: str = "") -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat or ("kernel" if gpu else "cuda_runtime"), "pid": 0 if gpu else 10,
            "tid": 7 if gpu else 10, "ts": ts, "dur": 5, "args": {CORR: corr}}  # fmt: skip


def _flow(ph: str, ts: int, fid: int, *, gpu: bool, cat: str = "ac2g", **extra: Any) -> dict[str, Any]:
    return {"ph": ph, "id": fid, "cat": cat, "name": cat, "pid": 0 if gpu else 10, "tid": 7 if gpu else 10, "ts": ts, **extra}


@pytest.mark.parametrize(
    "end",
    [
        {"bp": "e"},  # kineto: the end binds to the kernel enclosing it
        {},  # an end without "bp": binds to the next slice, the kernel starting there
    ],
)
@pytest.mark.parametrize("cat", ["ac2g", "async"])  # kineto's; the legacy profiler's ("launch")
def test_a_trace_whose_flow_events_give_the_arrow_gets_no_second_one(tmp_path: Path, end: dict, cat: str):
    events = [
        _x("cudaLaunchKernel", 100, 1), _x("gemm", 150, 1, gpu=True),
        _flow("s", 100, 1, gpu=False, cat=cat), _flow("f", 150, 1, gpu=True, cat=cat, **end),
        _x("cudaLaunchKernel", 200, 2), _x("relu", 250, 2, gpu=True),  # no flow events: from its id
    ]  # fmt: skip
    trace = load_trace(_write(tmp_path / "t.json", events))
    assert _arrows(trace) == {("cudaLaunchKernel", "gemm"), ("cudaLaunchKernel", "relu")}
    assert flow_counts(trace) == {"from_events": 1, "from_correlation": 1, "total": 2}
    given = ~trace.flows.from_correlation
    assert trace.event_name(int(trace.flows.dst[given][0])) == "gemm"


def test_a_graph_launch_reaches_every_kernel_it_launched(tmp_path: Path):
    """kineto's flow events give a cudaGraphLaunch one arrow (one "s", an "f" per kernel, one id):
    the other kernels get theirs from the id."""
    events = [_x("cudaGraphLaunch", 100, 3), _flow("s", 100, 3, gpu=False)]
    for k, ts in enumerate((150, 160, 170)):
        events += [_x(f"k{k}", ts, 3, gpu=True), _flow("f", ts, 3, gpu=True, bp="e")]
    trace = load_trace(_write(tmp_path / "graph.json", events))
    assert _arrows(trace) == {("cudaGraphLaunch", f"k{k}") for k in range(3)}
    assert flow_counts(trace) == {"from_events": 1, "from_correlation": 2, "total": 3}


@pytest.mark.parametrize("odd", ["12", 1.5, None, [1], 1 << 70, -3])
def test_an_odd_id_makes_no_arrow_and_no_error(tmp_path: Path, odd: Any):
    events = [_x("cudaLaunchKernel", 100, odd), _x("gemm", 150, odd, gpu=True),
              _x("cudaLaunchKernel", 200, 8), _x("relu", 250, 8, gpu=True)]  # fmt: skip
    trace = load_trace(_write(tmp_path / "odd.json", events))
    assert _arrows(trace) == {("cudaLaunchKernel", "relu")}


def test_a_trace_without_launches_binds_nothing(tmp_path: Path):
    trace = load_trace(_write(tmp_path / "cpu.json", [_x("aten::mm", 100, 1, cat="cpu_op"), _x("k", 150, 1, gpu=True)]))
    assert trace._flow_binder is None and len(trace.flows) == 0
    assert flow_counts(trace) == {"from_events": 0, "from_correlation": 0, "total": 0}


# ---- the public two-rank trace: correlation ids, no flow events ---------------------------------


@pytest.mark.parametrize("rank, launches", [(0, 1154 + 40 + 10), (1, 1104 + 40 + 10)])
def test_the_two_rank_trace_draws_every_launch_to_its_gpu_work(shared_traces: Path, rank: int, launches: int):
    trace = load_trace(shared_traces / "hta_two_ranks" / f"rank-{rank}.json.gz")
    f = trace.flows
    assert flow_counts(trace) == {"from_events": 0, "from_correlation": launches, "total": launches}
    assert {trace.event_name(int(s)) for s in f.src} == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}
    kinds = trace.lane_kind_codes
    assert (kinds[trace.lane[f.src]] == 0).all() and (kinds[trace.lane[f.dst]] == 1).all()
    assert np.unique(f.dst).size == launches  # each GPU event once
    # the same ids, read one by one from each end's args
    for k in range(0, len(f), 97):
        assert trace.event_args(int(f.src[k]))[CORR] == trace.event_args(int(f.dst[k]))[CORR] == int(f.flow_id[k])


def test_the_two_rank_job_keeps_each_ranks_arrows(shared_traces: Path):
    job = open_job([str(shared_traces / "hta_two_ranks")])
    f = job.flows
    assert flow_counts(job) == {"from_events": 0, "from_correlation": 1204 + 1154, "total": 1204 + 1154}
    ranks = np.array([job.lanes[int(ln)].rank for ln in job.lane[f.src]])
    assert (ranks == np.array([job.lanes[int(ln)].rank for ln in job.lane[f.dst]])).all()
    assert sorted(set(ranks.tolist())) == [0, 1]


def test_the_legacy_trace_gets_its_arrows_from_ids(shared_traces: Path):
    """PyTorch 1.9's trace writes its launches' flow starts with an int tid and the launches with a
    string one: its flow events bind no arrow (`test_many_lanes`: threads as written), its ids do."""
    trace = load_trace(shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz")
    assert flow_counts(trace) == {"from_events": 0, "from_correlation": 9096, "total": 9096}
    names = {trace.event_name(int(s)) for s in trace.flows.src}
    assert names == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}


def test_traces_with_flow_events_for_every_launch_get_no_arrow_from_ids(shared_traces: Path):
    trace = load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz")
    counts = flow_counts(trace)
    assert counts["from_correlation"] == 0 and counts["from_events"] == counts["total"] > 20000
