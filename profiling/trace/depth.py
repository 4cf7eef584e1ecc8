"""Nesting depth of a trace's events within their lanes, and the order that puts a parent before
its children (`build_trace` runs both).

Events are sorted by (lane, start, longest first); depth is computed for all lanes at once
wherever it can be, never with a Python step per lane: a trace can hold a million lanes of a few
events each. Real traces round times, so a child can end a little after its parent; such lanes
are redone with an explicit stack, the way Perfetto assigns rows (`_stack_depth`).
"""

from __future__ import annotations

import numpy as np


def compute_lane_order(lane: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Sort key order: by lane, then start, then longest first (so parents precede children)."""
    return np.lexsort((-dur_ns, start_ns, lane))


def _stack_depth(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Call-stack depth of one lane's start-sorted events, the way Perfetto assigns rows.

    An event goes one row below the latest-started event still open; events that ended are
    popped only from the top, so a child that outlives its parent by a rounding error keeps its
    parent's row below it and what starts inside that child goes below it. An event that is not
    inside the open child, though, goes where the child's ended parent was: a fork run's `forward`
    ends milliseconds after its `step N`, and the next step would otherwise sit a row lower than the
    last, every step a row lower (a staircase).
    """
    depth = np.zeros(start_ns.size, dtype=np.int32)
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(start_ns.tolist(), end_ns.tolist())):
        while stack and stack[-1] <= s:
            stack.pop()
        if stack and stack[-1] < e:  # not inside the open top: below an ended event, it is the top's
            for j, end in enumerate(stack):  # outliving child, and the event goes where its parent was
                if end <= s:
                    del stack[j:]
                    break
        depth[i] = len(stack)
        stack.append(e)
    return depth


#: Lanes of at least this many events get their depth one lane at a time (numpy per lane, cheap
#: against the lane's size); all smaller lanes, which can be a million lanes of a few events, at once.
BIG_LANE_EVENTS = 2048


def compute_depth(start_ns: np.ndarray, dur_ns: np.ndarray, lane_offsets: np.ndarray) -> np.ndarray:
    """Nesting depth of every event within its lane.

    Vectorised first: depth = how many earlier events of the lane are still open when an event
    starts, which is the call-stack depth when events nest properly. Real traces round times, so
    a child can end a little after its parent; there the count can put two overlapping events on
    one row. Such lanes (found by checking every event against the parent the count implies) are
    redone with an explicit stack. Zero-length events count as 1 ns long so that they never
    contain what starts right after them.

    Lanes of `BIG_LANE_EVENTS` events or more are done one by one, all smaller lanes together
    (`_small_lanes_depth`): the same depths, without a Python step per lane.
    """
    n = start_ns.size
    depth = np.zeros(n, dtype=np.int32)
    end = start_ns + np.maximum(dur_ns, 1)
    counts = np.diff(lane_offsets)
    for i in np.flatnonzero(counts >= BIG_LANE_EVENTS).tolist():
        a, b = int(lane_offsets[i]), int(lane_offsets[i + 1])
        depth[a:b] = lane_depth(start_ns[a:b], end[a:b])
    small = np.flatnonzero((counts >= 2) & (counts < BIG_LANE_EVENTS))
    if small.size:
        idx, seg, first = _segments(lane_offsets[small], counts[small])
        depth[idx] = _small_lanes_depth(start_ns[idx], end[idx], seg, first)
    return depth


def lane_depth(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """`compute_depth` of one lane's start-sorted events (`end`: zero-length events 1 ns long): the
    count of events still open, or the stack where that does not nest."""
    closed_before = np.searchsorted(np.sort(end), start, side="right")
    depth = (np.arange(start.size, dtype=np.int64) - closed_before).astype(np.int32)
    return depth if _nests_properly(start, end, depth) else _stack_depth(start, end)


def _segments(offsets: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The events of some lanes, lane after lane: their indices, each one's segment (0, 1, ...:
    which of the lanes) and the position among them of its segment's first event."""
    counts = counts.astype(np.int64)
    first_of_seg = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=first_of_seg[1:])
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    first = first_of_seg[seg]
    idx = np.arange(seg.size, dtype=np.int64) - first + offsets.astype(np.int64)[seg]
    return idx, seg, first


def _small_lanes_depth(start: np.ndarray, end: np.ndarray, seg: np.ndarray, first: np.ndarray) -> np.ndarray:
    """`compute_depth` of many lanes at once: `start`/`end` hold their events lane after lane
    (start-sorted within each), `seg` and `first` as `_segments` gives them.

    The count (ends at or before each start within its lane) comes from one sort of the ends by
    (lane, time); the nesting check from one sort by (row, index)."""
    m = start.size
    # Times from the lane's first start, lifted by lane (lane k by k times the widest lane) so that
    # one sorted array holds every lane's ends in turn; by (lane, time) sorts where that overflows.
    base = start[first]
    rel = end - base  # >= 0, but for spans past int64 (it wraps: then by (lane, time))
    width = int(rel.max()) + 1
    if (int(seg[-1]) + 1) * width < 1 << 62 and int(rel.min()) >= 0:
        lift = seg * width
        ends_up_to = np.searchsorted(np.sort(lift + rel), lift + (start - base), side="right")
    else:
        times = np.concatenate([end, start])
        is_start = np.concatenate([np.zeros(m, dtype=np.int8), np.ones(m, dtype=np.int8)])
        order = np.lexsort((is_start, times, np.concatenate([seg, seg])))
        at = np.empty(2 * m, dtype=np.int64)
        at[order] = np.arange(2 * m, dtype=np.int64)
        ends_up_to = np.cumsum(order < m)[at[m:]]
    # Ends up to a start's place: every end of the lanes before (one per event), and its own lane's.
    closed_before = ends_up_to - first
    depth = (np.arange(m, dtype=np.int64) - first - closed_before).astype(np.int32)
    bad = _misnested_segments(start, end, depth, seg)
    for k in np.flatnonzero(bad).tolist():
        a = int(np.searchsorted(seg, k, side="left"))
        b = int(np.searchsorted(seg, k, side="right"))
        depth[a:b] = _stack_depth(start[a:b], end[a:b])
    return depth


def _misnested_segments(start: np.ndarray, end: np.ndarray, depth: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Per segment (lane), whether `_nests_properly` fails on it: an event outside its implied
    parent (the last earlier event of its lane one row up), a child without one, or two events
    overlapping on one row."""
    n_seg = int(seg[-1]) + 1 if seg.size else 0
    bad = np.zeros(n_seg, dtype=bool)
    m = depth.size
    if m == 0:
        return bad
    # Events by (row, index): each row of each lane is a run of this order.
    by_row = np.argsort(depth, kind="stable")
    row = depth[by_row].astype(np.int64)
    key = row * m + by_row  # ascending
    child = by_row[row > 0]
    # The last event of the row above with a smaller index; any lane's: another lane's is none of ours.
    k = np.searchsorted(key, (depth[child].astype(np.int64) - 1) * m + child) - 1
    parent = by_row[np.maximum(k, 0)]
    orphan = (k < 0) | (row[np.maximum(k, 0)] != depth[child] - 1) | (seg[parent] != seg[child])
    outside = (end[child] > end[parent]) | (start[child] < start[parent])
    bad[seg[child[orphan | outside]]] = True
    # Neighbours on one row of one lane must not overlap.
    prev, nxt = by_row[:-1], by_row[1:]
    same = (row[:-1] == row[1:]) & (seg[prev] == seg[nxt])
    bad[seg[nxt[same & (start[nxt] < end[prev])]]] = True
    return bad


def _nests_properly(start: np.ndarray, end: np.ndarray, depth: np.ndarray) -> bool:
    """True when every event lies inside its implied parent: the last earlier event one row up."""
    order = np.arange(depth.size)
    for level in range(1, int(depth.max()) + 1 if depth.size else 0):
        children = order[depth == level]
        parents = order[depth == level - 1]
        k = np.searchsorted(parents, children) - 1
        if np.any(k < 0):
            return False
        p = parents[k]
        if np.any(end[children] > end[p]) or np.any(start[children] < start[p]):
            return False
    # Events on one row must not overlap either.
    for level in range(int(depth.max()) + 1 if depth.size else 0):
        row = order[depth == level]
        if row.size > 1 and np.any(start[row[1:]] < end[row[:-1]]):
            return False
    return True
