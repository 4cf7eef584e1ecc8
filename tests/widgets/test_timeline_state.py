"""What the user picked on the timeline (widgets.timeline_state), without Qt: the selected event and
its flows, hover, the time range, Find; and what the listeners are told of each change. (That
these modules load no Qt: tests/widgets/test_timeline_layout.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from branchscope.profiling.trace.model import Flows, Lane, build_trace
from branchscope.widgets.timeline_state import (
    FOUND,
    HOVERED,
    RANGE,
    RANGE_CLEARED,
    SELECTED,
    TimelineState,
    links_of,
)


@pytest.fixture
def trace():
    """A launch on the main thread bound to its kernel on a stream (the flow joins events 0 and 4
    once sorted by lane), and three ops named mm / addmm / add, given out of time order."""
    names = ["cudaLaunchKernel", "volta_kernel", "aten::mm", "aten::addmm", "aten::add"]
    return build_trace(
        path="state", start_ns=np.array([0, 20, 700, 300, 500]), dur_ns=np.array([10, 50, 50, 50, 50]),
        lane=np.array([0, 1, 0, 0, 0]), name_id=np.arange(5), cat_id=np.zeros(5), names=names,
        cats=["cpu_op"], lanes=[Lane(0, "cpu", 1, 1, "main", "main"), Lane(1, "gpu", 0, 7, "s", "stream", 0)],
        flow_binder=lambda t: Flows(["ac2g"], np.zeros(1, np.int32), np.zeros(1, np.int64),
                                    np.array([0]), np.array([4])),
    )  # fmt: skip


@pytest.fixture
def state():
    s = TimelineState()
    s.heard = []
    s.subscribe(s.heard.append)
    return s


def _event(trace, name: str) -> int:
    return next(i for i in range(len(trace)) if trace.event_name(i) == name)


def test_selecting_an_event_takes_its_flows_both_ways(trace, state):
    launch, kernel = _event(trace, "cudaLaunchKernel"), _event(trace, "volta_kernel")
    assert (int(trace.flows.src[0]), int(trace.flows.dst[0])) == (launch, kernel)
    state.select(trace, launch)
    assert state.selected == launch and state.flow_arrows == [(launch, kernel)] and state.peer_events == []
    state.select(trace, kernel)
    assert state.flow_arrows == [(launch, kernel)]
    state.select(trace, _event(trace, "aten::add"))
    assert state.flow_arrows == []
    state.select(trace, -1)
    assert state.selected == -1 and state.flow_arrows == []
    assert state.heard == [SELECTED] * 4
    assert links_of(None, 3) == ([], [])


def test_hover_tells_only_of_a_change(state):
    assert state.hover(3) and state.hovered == 3
    assert not state.hover(3)
    assert state.hover(-1) and state.hovered == -1
    assert state.heard == [HOVERED, HOVERED]


def test_a_drag_chooses_a_range_and_a_click_none(state):
    state.begin_range(500.0)
    state.drag_range(450.0, 1.0)
    assert state.range == (450.0, 500.0)
    state.drag_range(800.0, 1.0)  # past where it began: the other way
    assert state.range == (500.0, 800.0)
    assert state.end_range() == (500.0, 800.0) and state.range_anchor is None
    assert state.heard == [RANGE, RANGE]
    state.begin_range(100.0)  # a new drag drops the range before it
    assert state.range is None and state.heard[-1] == RANGE_CLEARED
    state.drag_range(100.5, 1.0)  # less than a pixel: a click
    assert state.end_range() is None


def test_clearing_tells_only_when_there_was_a_range(state):
    state.clear_range()
    assert state.heard == []
    state.set_range(1.0, 2.0)
    state.clear_range()
    state.clear_range()
    assert state.heard == [RANGE, RANGE_CLEARED] and state.range is None


def test_find_matches_names_and_steps_through_them_in_time_order(trace, state):
    assert state.search(trace, "MM") == 2 and state.heard == [FOUND]
    mm, addmm = _event(trace, "aten::mm"), _event(trace, "aten::addmm")
    find = state.find
    assert sorted(find.matches.tolist()) == sorted([mm, addmm]) and find.active and find.lod is not None
    assert [find.next(trace), find.next(trace), find.next(trace)] == [addmm, mm, addmm]  # 300 ns, 700 ns
    assert find.pos == 0
    assert state.search(trace, "nothing") == 0
    assert find.lod is None and find.active  # a search matching nothing still fades the events
    assert find.next(trace) == -1
    assert state.search(trace, "") == 0 and not find.active and find.query == ""
    assert state.search(None, "mm") == 0 and find.query == ""


def test_another_trace_clears_the_picks_and_tells_only_of_the_range(trace, state):
    state.select(trace, 0)
    state.hover(2)
    state.set_range(1.0, 5.0)
    state.search(trace, "mm")
    state.heard.clear()
    state.reset()
    assert (state.selected, state.hovered, state.flow_arrows, state.range) == (-1, -1, [], None)
    assert state.find.count == 0 and state.find.lod is None
    # the find bar keeps its text: the new trace is drawn faded until the next search
    assert state.find.query == "mm" and state.find.active
    assert state.heard == [RANGE_CLEARED]
