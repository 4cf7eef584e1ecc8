"""Tables over a stretch of a trace: the ops of a selected time range, and the profiled steps.

`range_ops(trace, t0, t1)` sums, per op name and lane, what ran inside [t0, t1) of the trace's own
clock: events are clipped at the range's ends, and an event's self time is its clipped duration
minus that of its children (the events one depth below it on its lane). `step_table(trace)` lists
each profiled step (`"step N"` annotations; `ProfilerStep#N` in traces without them) with its
duration and the time each branch's `"branch: NAME"` annotations spent inside it. `branch_order`
is the one order of a model's branches (by region, then name) that colours, legend and tables
follow, so a branch keeps its place, and its colour, across every run of a model.

All of it is vectorised over the event columns; nothing here imports Qt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.run_info import branch_name

_STEP = re.compile(r"^step (\d+)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def step_number(label: str) -> int | None:
    """The number a step's label gives it: N of "step N" (branchscope's, from 1) or of
    "ProfilerStep#N" (torch.profiler's schedule, counted from the profiler's start); None otherwise."""
    found = _STEP.match(label) or _PROFILER_STEP.match(label)
    return int(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op name on one lane within a range: how often it ran there and for how long."""

    name: str
    lane: int
    lane_label: str
    count: int
    #: Clipped to the range.
    total_ns: int
    #: `total_ns` minus the (clipped) time of its children on the same lane.
    self_ns: int


@dataclass(frozen=True, slots=True)
class StepRow:
    """One profiled step: its annotation's label, lane and interval, and each branch's time in it."""

    label: str
    lane: int
    start_ns: int
    dur_ns: int
    #: Every branch of `branch_order(trace)`, in that order (0 for a branch that did not run).
    branch_ns: dict[str, int]


def _region_key(region: str) -> tuple:
    """'1' < '1.2' < '2' < '10': numeric parts as numbers."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in region.split("."))


def branch_order(trace: Trace, names: Iterable[str] = ()) -> list[str]:
    """A model's branches in their one fixed order: those of the trace's run info by (region,
    name), then any other branch among `names` or the trace's `branch: NAME` annotations, by name.

    Every run of a model lists the same branches, so the order does not depend on which events
    happened first; a trace without run info orders its branches by name.
    """
    info = trace.run_info
    listed: list[str] = []
    if info is not None:
        seen: set[str] = set()
        for b in sorted(info.branches, key=lambda b: (_region_key(b.region), b.name)):
            if b.name not in seen:
                seen.add(b.name)
                listed.append(b.name)
    found = {n for n in (branch_name(label) for label in trace.names) if n is not None}
    rest = sorted((found | set(names)) - set(listed))
    return listed + rest


def _branch_annotations(trace: Trace) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(branch names in `branch_order`, the events that are branch annotations, their branch index)."""
    order = branch_order(trace)
    index = {name: k for k, name in enumerate(order)}
    of_name = np.full(len(trace.names), -1, dtype=np.int64)
    for i, label in enumerate(trace.names):
        name = branch_name(label)
        if name is not None:
            of_name[i] = index[name]
    if len(trace) == 0:
        return order, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    events = np.flatnonzero(of_name[trace.name_id] >= 0)
    return order, events, of_name[trace.name_id[events]]


def branch_totals(trace: Trace) -> dict[str, int]:
    """Each branch's total time in the trace (ns): the sum of its annotations' durations, for every
    branch of `branch_order` (0 for one that never ran)."""
    order, events, branch = _branch_annotations(trace)
    sums = np.zeros(len(order), dtype=np.int64)
    np.add.at(sums, branch, trace.dur_ns[events])
    return {name: int(sums[k]) for k, name in enumerate(order)}


def _in_range(trace: Trace, t0: int, t1: int) -> np.ndarray:
    """Events that overlap [t0, t1); a zero-length one counts when it lies inside."""
    start, end = trace.start_ns, trace.end_ns
    return np.flatnonzero((start < t1) & ((end > t0) | ((trace.dur_ns == 0) & (start >= t0))))


def _sums(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of the non-negative `values` per group: through float64 (fast) while the
    whole sum stays below 2**52 (every partial sum is then exact), else with integer adds."""
    if float(values.sum(dtype=np.float64)) < 2.0**52:
        return np.rint(np.bincount(group, weights=values, minlength=n)).astype(np.int64)
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, values)
    return out


def range_ops(trace: Trace, t0_ns: int, t1_ns: int) -> list[OpRow]:
    """Per op name and lane, the events overlapping [t0_ns, t1_ns) (the trace's clock): count, time
    clipped to the range, and self time (clipped time minus the children's, the child's also clipped
    to its parent). Sorted by total time, longest first."""
    t0, t1 = int(min(t0_ns, t1_ns)), int(max(t0_ns, t1_ns))
    if len(trace) == 0 or t1 == t0:
        return []
    sel = _in_range(trace, t0, t1)
    if sel.size == 0:
        return []
    start, end = trace.start_ns[sel], trace.end_ns[sel]
    clipped = np.maximum(np.minimum(end, t1) - np.maximum(start, t0), 0)
    # Children: every selected event whose parent is selected too (sel is sorted).
    parent = trace.parent[sel]
    pos = np.searchsorted(sel, parent)
    has = (parent >= 0) & (pos < sel.size)
    has[has] = sel[pos[has]] == parent[has]
    p = pos[has]
    inner = np.maximum(
        np.minimum(np.minimum(end[has], end[p]), t1) - np.maximum(np.maximum(start[has], start[p]), t0),
        0,
    )
    children = _sums(p, inner, sel.size)
    self_time = np.maximum(clipped - children, 0)
    n_lanes = max(1, len(trace.lanes))
    key = trace.name_id[sel].astype(np.int64) * n_lanes + trace.lane[sel]
    n_keys = len(trace.names) * n_lanes
    if n_keys <= max(1 << 22, 4 * sel.size):  # a small key space: count into it directly
        count = np.bincount(key, minlength=n_keys)
        keys = np.flatnonzero(count)
        group = key
        total, own = _sums(group, clipped, n_keys)[keys], _sums(group, self_time, n_keys)[keys]
        count = count[keys]
    else:
        keys, group = np.unique(key, return_inverse=True)
        count = np.bincount(group, minlength=keys.size)
        total, own = _sums(group, clipped, keys.size), _sums(group, self_time, keys.size)
    # Longest first; equal totals in (name, lane) key order.
    by_total = np.lexsort((keys, -total))
    keys, count, total, own = keys[by_total], count[by_total], total[by_total], own[by_total]
    return [
        OpRow(
            name=trace.names[int(k // n_lanes)],
            lane=int(k % n_lanes),
            lane_label=trace.lanes[int(k % n_lanes)].label,
            count=int(c),
            total_ns=int(t),
            self_ns=int(s),
        )
        for k, c, t, s in zip(keys.tolist(), count.tolist(), total.tolist(), own.tolist(), strict=True)
    ]


def step_events(trace: Trace) -> np.ndarray:
    """The profiled steps' annotations in time order: `"step N"` events (branchscope runs), else
    `ProfilerStep#N` (torch.profiler schedules)."""
    if len(trace) == 0:
        return np.zeros(0, dtype=np.int64)
    for pattern in (_STEP, _PROFILER_STEP):
        is_step = np.fromiter(
            (bool(pattern.match(s)) for s in trace.names), dtype=bool, count=len(trace.names)
        )
        events = np.flatnonzero(is_step[trace.name_id])
        if events.size:
            return events[np.argsort(trace.start_ns[events], kind="stable")]
    return np.zeros(0, dtype=np.int64)


def step_table(trace: Trace) -> list[StepRow]:
    """Each profiled step (see `step_events`): its duration and each branch's time within it, the
    branch annotations of the step's process clipped to the step."""
    steps = step_events(trace)
    order, ann, branch = _branch_annotations(trace)
    if steps.size == 0:
        return []
    # Only a branch of the step's own process (merged ranks share one clock, not one model run).
    # Only the lanes of steps and annotations are asked (a trace can have a million lanes).
    proc_ids: dict[tuple, int] = {}
    proc = np.zeros(len(trace.lanes), dtype=np.int64)
    used = np.unique(np.concatenate([trace.lane[steps], trace.lane[ann]]))
    for i in used.tolist():
        ln = trace.lanes[i]
        proc[i] = proc_ids.setdefault((ln.pid, ln.rank), len(proc_ids))
    ss, se = trace.start_ns[steps][:, None], trace.end_ns[steps][:, None]
    overlap = np.maximum(
        np.minimum(trace.end_ns[ann][None, :], se) - np.maximum(trace.start_ns[ann][None, :], ss), 0
    )
    overlap *= proc[trace.lane[steps]][:, None] == proc[trace.lane[ann]][None, :]
    per_branch = np.zeros((steps.size, len(order)), dtype=np.int64)
    for k in range(len(order)):
        per_branch[:, k] = overlap[:, branch == k].sum(axis=1)
    return [
        StepRow(
            label=trace.event_name(int(i)),
            lane=int(trace.lane[i]),
            start_ns=int(trace.start_ns[i]),
            dur_ns=int(trace.dur_ns[i]),
            branch_ns={name: int(per_branch[r, k]) for k, name in enumerate(order)},
        )
        for r, i in enumerate(steps.tolist())
    ]
