"""Flows: a launch's arrow to its kernel and back, the launch→start delay, collectives across ranks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtGui import QImage

from branchscope.profiling import load_trace, merge_traces
from branchscope.profiling.trace.flows import collective_key, collective_peers, event_flows, launch_delay_ns
from branchscope.profiling.trace.merge import as_ranks
from branchscope.widgets.details_panel import DetailsPanel
from branchscope.widgets.timeline import FLOW_COLOR, PEER_COLOR, TimelineView
from tests.gui_helpers import show


@pytest.fixture(scope="module")
def six(shared_traces):
    return load_trace(shared_traces / "hta_gpu_6streams_rank0.json.gz")


def _a_launch(trace):
    """A cudaLaunchKernel bound to a kernel, and the flow joining them."""
    f = trace.flows
    for k in np.flatnonzero((f.src >= 0) & (f.dst >= 0)).tolist():
        if trace.event_name(int(f.src[k])) == "cudaLaunchKernel":
            return int(f.src[k]), int(f.dst[k]), k
    raise AssertionError("no bound launch")


def _pixels(view) -> np.ndarray:
    img = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    arr = np.frombuffer(img.constBits(), dtype=np.uint32, count=img.width() * img.height())
    return arr.reshape(img.height(), img.width()) & np.uint32(0xFFFFFF)


def _rgb(c) -> int:
    return (c.red() << 16) | (c.green() << 8) | c.blue()


def test_the_six_stream_trace_binds_its_6600_launches(six):
    f = six.flows
    # 6600 flow event pairs; a cudaGraphLaunch's flow events give its first kernel an arrow, its
    # correlation id the other 275 kernels and copies it launched
    assert len(f) == 6600 + 275 and f.cats == ["ac2g"] and int(f.from_correlation.sum()) == 275
    assert {six.event_name(s) for s in f.src[f.from_correlation].tolist()} == {"cudaGraphLaunch"}
    assert (f.src >= 0).all() and (f.dst >= 0).all()
    kinds = {six.lanes[int(six.lane[d])].kind for d in f.dst[:200].tolist()}
    assert kinds == {"gpu"}


def assert_the_arrow_is_drawn_both_ways(qtbot, trace, launch: int, kernel: int) -> TimelineView:
    """Selecting the launch draws the arrow to its kernel (in its colour), selecting the kernel
    draws it back; returns the view, the kernel selected."""
    view = TimelineView()
    view.set_trace(trace)
    show(qtbot, view, 1400, 900)
    view.zoom_to_event(launch)
    before = int((_pixels(view) == _rgb(FLOW_COLOR)).sum())
    view.select_event(launch)
    assert view.flow_arrows == [(launch, kernel)]
    after = int((_pixels(view) == _rgb(FLOW_COLOR)).sum())
    assert view.drawn_arrows == [(launch, kernel)] and after > before + 10
    view.select_event(kernel)
    assert view.flow_arrows == [(launch, kernel)]
    view.grab()
    assert view.drawn_arrows == [(launch, kernel)]
    return view


def test_selecting_a_launch_draws_the_arrow_to_its_kernel_and_a_kernel_draws_it_back(six, qtbot):
    launch, kernel, k = _a_launch(six)
    view = assert_the_arrow_is_drawn_both_ways(qtbot, six, launch, kernel)
    view.select_event(-1)
    view.grab()
    assert view.flow_arrows == [] and view.drawn_arrows == []


def test_an_op_that_launches_through_its_children_gets_their_arrows(six):
    launch, kernel, _ = _a_launch(six)
    op = int(six.parent[launch])
    assert op >= 0 and not any(int(s) == op for s in six.flows.src.tolist())
    arrows = [(int(six.flows.src[k]), int(six.flows.dst[k])) for k in event_flows(six, op).tolist()]
    assert (launch, kernel) in arrows
    assert all(six.start_ns[op] <= six.start_ns[s] <= six.end_ns[op] for s, _ in arrows)


def test_details_say_the_launch_to_start_delay_both_ways(six, qtbot):
    launch, kernel, k = _a_launch(six)
    delay = launch_delay_ns(six, k)
    assert delay == int(six.start_ns[kernel] - six.start_ns[launch])
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.show_event(six, launch)
    rows = dict(panel.rows)
    assert rows["Launches"].startswith(six.event_name(kernel)) and "after the launch" in rows["Launches"]
    panel.show_event(six, kernel)
    rows = dict(panel.rows)
    assert rows["Launched by"].startswith("cudaLaunchKernel") and "launch→start" in rows["Launched by"]


def test_merged_ranks_keep_each_ranks_flows(six, shared_traces):
    other = load_trace(shared_traces / "hta_event_sync_multi_stream.json.gz")
    merged = merge_traces(as_ranks([six, other]))
    assert len(merged.flows) == len(six.flows) + len(other.flows)
    for part, offset in ((six, 0), (other, len(six))):
        f, mf = part.flows, merged.flows
        base = 0 if part is six else len(six.flows)
        for k in range(0, len(f), max(1, len(f) // 50)):
            s, d = int(mf.src[base + k]), int(mf.dst[base + k])
            assert merged.event_name(s) == part.event_name(int(f.src[k]))
            assert (
                merged.start_ns[d] - merged.start_ns[s]
                == part.start_ns[int(f.dst[k])] - part.start_ns[int(f.src[k])]
            )
            assert merged.lanes[int(merged.lane[s])].rank == (0 if part is six else 1)
            assert s - offset == int(f.src[k])


def test_collectives_line_up_across_ranks_by_name_and_place(shared_traces, qtbot):
    folder = shared_traces / "hta_two_ranks"
    merged = merge_traces(as_ranks([load_trace(folder / f"rank-{r}.json.gz") for r in (0, 1)]))
    ids = [i for i in range(len(merged)) if merged.event_name(i) == "nccl:all_reduce"]
    by_rank = {r: sorted((i for i in ids if merged.lanes[int(merged.lane[i])].rank == r), key=lambda i: merged.start_ns[i]) for r in (0, 1)}  # fmt: skip
    assert len(by_rank[0]) == len(by_rank[1]) > 1
    # by name, message size (Input Dims) and place: the trace is sampled, and the ranks' all-reduces
    # in start order are of 19,618,307 / 26,955,536 / 26,258,430 / … and 19,618,307 / 26,258,430 /
    # … elements: rank 1's second is rank 0's third (tests/trace/test_collectives.py)
    second = by_rank[1][1]
    assert collective_key(merged, second) == ("nccl:all_reduce", "order", 0)
    assert collective_peers(merged, second) == {0: by_rank[0][2], 1: second}
    first = by_rank[1][0]
    assert collective_peers(merged, first) == {0: by_rank[0][0], 1: first}
    view = TimelineView()
    view.set_trace(merged)
    show(qtbot, view, 1400, 1200)
    view.zoom_to_event(first)
    view.select_event(first)
    assert view.peer_events == [by_rank[0][0]]
    assert (_pixels(view) == _rgb(PEER_COLOR)).sum() > 10
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.show_event(merged, first)
    assert "#1 of 19,618,307 elements by start on each rank, on 2 ranks" in dict(panel.rows)["Collective"]
    assert dict(panel.rows)["Waits"] == "rank 1 waited 41 µs; rank 0 arrived last (skew 41 µs)"


def test_collectives_with_sequence_numbers_line_up_by_them(tmp_path):
    def rank(r: int, seqs: list[int]) -> str:
        events = [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 10 + r, "tid": 1, "ts": 100 * n + r * 7,
             "dur": 50, "args": {"Collective name": "allreduce", "Seq": s, "Process Group Name": "0"}}
            for n, s in enumerate(seqs)
        ]  # fmt: skip
        path = tmp_path / f"r{r}.json"
        path.write_text(json.dumps({"distributedInfo": {"rank": r, "world_size": 2}, "traceEvents": events}))
        return str(path)

    # rank 1's trace starts one collective later: by place they would not match, by number they do
    merged = merge_traces(as_ranks([load_trace(rank(0, [4, 5, 6])), load_trace(rank(1, [5, 6]))]))
    first_of_1 = next(
        i
        for i in range(len(merged))
        if merged.lanes[int(merged.lane[i])].rank == 1 and merged.start_ns[i] == 7000
    )
    assert collective_key(merged, first_of_1) == ("allreduce@0", "seq", 5)
    peers = collective_peers(merged, first_of_1)
    assert set(peers) == {0, 1} and merged.event_args(peers[0])["Seq"] == 5
