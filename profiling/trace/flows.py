"""Bind flow endpoints (`ac2g` launch -> kernel, `fwdbwd`) to the events they point at.

Done lazily, on first use of `Trace.flows` (the reader gives the trace a binder that calls
`bind_flows`), because most views never draw arrows and binding costs a pass over every endpoint.
"""

from __future__ import annotations

import numpy as np

from branchscope.profiling.trace.model import Flows, Trace


def _bind(trace: Trace, lane: int, ts: int, enclosing: bool) -> int:
    """Chrome's rule: bind to the deepest slice enclosing `ts`, or (for a plain 'f') the next slice."""
    hit = trace.event_at(lane, ts)
    if hit >= 0:
        return hit
    sl = trace.lane_slice(lane)
    # A slice starting exactly at ts with zero length still counts as the one the arrow meets.
    k = int(np.searchsorted(trace.start_ns[sl], ts, side="left"))
    if k < sl.stop - sl.start and (trace.start_ns[sl.start + k] == ts or not enclosing):
        return sl.start + k
    return -1


def bind_flows(trace: Trace, points: tuple[np.ndarray, ...] | None) -> Flows:
    """Binds flow endpoints given as columns (phase, id, cat, lane, ts_ns, binds_enclosing, cat names:
    the reader's `flow_point_columns`) to `trace`'s events."""
    if points is None:
        empty = np.zeros(0, dtype=np.int64)
        return Flows(cats=[], cat_id=np.zeros(0, dtype=np.int32), flow_id=empty, src=empty, dst=empty)
    phase, flow_id, cat, lane, ts, enclosing, cat_names = points
    src: dict[tuple[int, int], int] = {}
    dst: dict[tuple[int, int], int] = {}
    for i in range(phase.size):
        key = (int(cat[i]), int(flow_id[i]))
        ev = _bind(trace, int(lane[i]), int(ts[i]), bool(enclosing[i]))
        if phase[i] == 0:
            src.setdefault(key, ev)
        elif phase[i] == 2:
            dst[key] = ev
    keys = [k for k in src if k in dst]
    return Flows(
        cats=[str(c) for c in cat_names],
        cat_id=np.array([k[0] for k in keys], dtype=np.int32),
        flow_id=np.array([k[1] for k in keys], dtype=np.int64),
        src=np.array([src[k] for k in keys], dtype=np.int64),
        dst=np.array([dst[k] for k in keys], dtype=np.int64),
    )
