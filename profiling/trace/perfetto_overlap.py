"""Which of its lane's tracks each event goes on in a Perfetto export: Perfetto's UI draws a track's
slices as a stack, so events of one lane that overlap without nesting (kernels of one stream,
async ops) go on overflow tracks of their own, each of them properly nested.

Lanes whose events nest (nearly all) are found at once, on columns; only the others take a Python
step per event (a first-fit of each event on the first track where it nests).
"""

from __future__ import annotations

import numpy as np

from branchscope.profiling.trace.model import Trace


def overflow_tracks(trace: Trace) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Per event, its track of its lane (0: the lane's own, k: its k-th overflow track) and its
    nesting depth on that track; and the (lane, k) of every overflow track, k >= 1."""
    sub = np.zeros(len(trace), dtype=np.int32)
    depth = trace.depth.astype(np.int64, copy=True)
    overflow: list[tuple[int, int]] = []
    for ln in np.flatnonzero(_unnested_lanes(trace)).tolist():
        sl = trace.lane_slice(ln)
        tracks = _first_fit(trace.start_ns[sl].tolist(), trace.end_ns[sl].tolist(), sub[sl], depth[sl])
        overflow += [(ln, k) for k in range(1, tracks)]
    return sub, depth, overflow


def _unnested_lanes(trace: Trace) -> np.ndarray:
    """Per lane, whether two of its events overlap without one holding the other: an event that
    ends after its parent, or a top-level event that begins before the one before it ends."""
    bad = np.zeros(len(trace.lanes), dtype=bool)
    if len(trace) == 0:
        return bad
    start, end, parent = trace.start_ns, trace.end_ns, trace.parent
    has_parent = parent >= 0
    outside = has_parent & (end > end[np.where(has_parent, parent, 0)])
    bad[trace.lane[outside]] = True
    top = np.flatnonzero(~has_parent)
    same_lane = trace.lane[top[1:]] == trace.lane[top[:-1]]
    overlaps = same_lane & (start[top[1:]] < end[top[:-1]])
    bad[trace.lane[top[1:][overlaps]]] = True
    return bad


def _first_fit(starts: list[int], ends: list[int], sub: np.ndarray, depth: np.ndarray) -> int:
    """Puts each event (in lane order: by start, longest first) on the first track where it nests
    (writing `sub` and `depth` in place); returns how many tracks it took."""
    stacks: list[list[int]] = []
    for i, (s, e) in enumerate(zip(starts, ends)):
        k = _fitting(stacks, s, e)
        if k == len(stacks):
            stacks.append([])
        stacks[k].append(e)
        sub[i], depth[i] = k, len(stacks[k]) - 1
    return len(stacks)


def _fitting(stacks: list[list[int]], start: int, end: int) -> int:
    """The first track where an event of [start, end) nests (each track's stack of open events'
    ends is popped of those ended by `start`); len(stacks) when none."""
    for k, stack in enumerate(stacks):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            return k
    return len(stacks)
