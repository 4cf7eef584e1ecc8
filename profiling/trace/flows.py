"""Bind flow endpoints (`ac2g` launch -> kernel, `fwdbwd`) to the events they point at, and add the
launch -> kernel arrows that only correlation ids give (`correlation_flows`).

Done lazily, on first use of `Trace.flows` (the reader gives the trace a binder, `flow_binder`),
because most views never draw arrows and binding costs a pass over every endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.collectives import COLLECTIVE_NAME, collectives_of
from branchscope.profiling.trace.correlation_flows import correlation_flows
from branchscope.profiling.trace.model import Flows, Trace


def bind_points(trace: Trace, lane: np.ndarray, ts: np.ndarray, enclosing: np.ndarray) -> np.ndarray:
    """Chrome's rule for flow endpoints, all at once: each binds to the deepest event of its lane
    enclosing its time (start <= ts < end); else to the event starting just then (even one of zero
    length), or, for a plain "f" (`enclosing` False), to the next event on its lane; else -1.
    One numpy step per lane that has endpoints, then one per level climbed, none per endpoint."""
    ts = np.asarray(ts, dtype=np.int64)
    begin = np.zeros(ts.size, dtype=np.int64)  # the endpoint's lane: its first event
    stop = np.zeros(ts.size, dtype=np.int64)  # … and the end of its events
    last = np.zeros(ts.size, dtype=np.int64)  # the last event starting at or before ts
    after = np.zeros(ts.size, dtype=np.int64)  # the first event starting at or after ts
    order = np.argsort(lane, kind="stable")
    lanes, first = np.unique(lane[order], return_index=True)
    for ln, group in zip(lanes.tolist(), np.split(order, first[1:])):
        sl = trace.lane_slice(ln)
        starts, t = trace.start_ns[sl], ts[group]
        begin[group], stop[group] = sl.start, sl.stop
        last[group] = sl.start + np.searchsorted(starts, t, side="right") - 1
        after[group] = sl.start + np.searchsorted(starts, t, side="left")
    bound = np.where(last >= begin, last, -1)
    # The last event starting by ts is the deepest candidate: climb while it ended (`Trace.event_at`).
    climbing = np.flatnonzero(bound >= 0)
    end, parent = trace.end_ns, trace.parent
    while climbing.size:
        climbing = climbing[end[bound[climbing]] <= ts[climbing]]
        bound[climbing] = parent[bound[climbing]]
        climbing = climbing[bound[climbing] >= 0]
    missed = np.flatnonzero(bound < 0)
    nxt = after[missed]
    meets = nxt < stop[missed]
    meets[meets] = (trace.start_ns[nxt[meets]] == ts[missed[meets]]) | ~enclosing[missed[meets]]
    bound[missed[meets]] = nxt[meets]
    return bound


def bind_flows(trace: Trace, points: tuple[np.ndarray, ...] | None) -> Flows:
    """Binds flow endpoints given as columns (phase, id, cat, lane, ts_ns, binds_enclosing, cat names:
    the reader's `flow_point_columns`) to `trace`'s events: per (category, id), its first start
    to its last end, in the order of the starts; a flow without both has no arrow."""
    if points is None:
        return Flows.empty()
    phase, flow_id, cat, lane, ts, enclosing, cat_names = points
    key = cat.astype(np.int64) * (int(flow_id.max(initial=0)) + 1) + flow_id
    starts, ends = np.flatnonzero(phase == 0), np.flatnonzero(phase == 2)[::-1]
    start_keys, first_start = np.unique(key[starts], return_index=True)
    end_keys, last_end = np.unique(key[ends], return_index=True)
    _, s, e = np.intersect1d(start_keys, end_keys, assume_unique=True, return_indices=True)
    src_at, dst_at = starts[first_start[s]], ends[last_end[e]]
    in_order = np.argsort(src_at, kind="stable")
    src_at, dst_at = src_at[in_order], dst_at[in_order]
    at = np.concatenate([src_at, dst_at])
    bound = bind_points(trace, lane[at], ts[at], enclosing[at])
    return Flows(
        cats=[str(c) for c in cat_names],
        cat_id=cat[src_at].astype(np.int32),
        flow_id=flow_id[src_at].astype(np.int64),
        src=bound[: src_at.size],
        dst=bound[src_at.size :],
    )


#: Flow endpoints as columns (`flow_events.flow_point_columns`), read when first asked for.
FlowPoints = Callable[[], "tuple[np.ndarray, ...] | None"]


def flow_binder(points: FlowPoints | None) -> Callable[[Trace], Flows]:
    """A trace's binder: the arrows of its flow events (`points`; None: it has none), then those
    its correlation ids give and they do not (`correlation_flows`)."""

    def bind(trace: Trace) -> Flows:
        given = bind_flows(trace, points()) if points is not None else Flows.empty()
        return joined_flows([given, correlation_flows(trace, given)])

    return bind


def joined_flows(parts: Sequence[Flows]) -> Flows:
    """The arrows of `parts` in order as one `Flows` (their categories merged by name)."""
    cats: dict[str, int] = {}
    cat_ids = []
    for f in parts:
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in f.cats], dtype=np.int32)
        cat_ids.append(cat_map[f.cat_id] if len(f) else np.zeros(0, dtype=np.int32))

    def column(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([getattr(f, name) for f in parts]).astype(dtype) if parts else np.zeros(0, dtype)

    return Flows(
        cats=list(cats),
        cat_id=np.concatenate(cat_ids).astype(np.int32) if parts else np.zeros(0, np.int32),
        flow_id=column("flow_id", np.int64),
        src=column("src", np.int64),
        dst=column("dst", np.int64),
        from_correlation=column("from_correlation", bool),
    )


def flow_counts(trace: Trace) -> dict[str, int]:
    """How many arrows the trace has, from its flow events and from correlation ids only."""
    flows = trace.flows
    made = int(flows.from_correlation.sum())
    return {"from_events": len(flows) - made, "from_correlation": made, "total": len(flows)}


def event_flows(trace: Trace, i: int, limit: int = 256) -> np.ndarray:
    """Indices into `trace.flows` of the arrows to draw for event `i`: those that start or end at
    it (a launch: to its kernel; a kernel: back to its launch); for an op that launches nothing
    itself, those starting inside it on its lane (the kernels of its launches). At most `limit`."""
    flows = trace.flows
    if i < 0 or len(flows) == 0:
        return np.zeros(0, dtype=np.int64)
    own = np.flatnonzero((flows.src == i) | (flows.dst == i))
    if own.size:
        return own[:limit]
    lane, start, end = int(trace.lane[i]), int(trace.start_ns[i]), int(trace.end_ns[i])
    src = flows.src
    ok = src >= 0
    inside = np.zeros(src.size, dtype=bool)
    inside[ok] = (
        (trace.lane[src[ok]] == lane)
        & (trace.start_ns[src[ok]] >= start)
        & (trace.end_ns[src[ok]] <= end)
        & (trace.depth[src[ok]] > trace.depth[i])
    )
    return np.flatnonzero(inside & (flows.dst >= 0))[:limit]


def launch_delay_ns(trace: Trace, k: int) -> int | None:
    """How long after its launch began the kernel of flow `k` started (ns); None if an end is unbound."""
    src, dst = int(trace.flows.src[k]), int(trace.flows.dst[k])
    if src < 0 or dst < 0:
        return None
    return int(trace.start_ns[dst]) - int(trace.start_ns[src])


def collective_key(trace: Trace, i: int) -> tuple[str, str, int] | None:
    """(name, "seq" or "order", number) of a collective event: its `Collective name` and `Seq` where the
    trace has them (newer PyTorch), else its name and its place among the events of that name on its
    rank (first, second, …); None for other events. In a merged trace, as `collectives.match_collectives`
    matched it (a `c10d::` op takes the Seq of the `record_param_comms` inside it)."""
    name = trace.event_name(i)
    if not COLLECTIVE_NAME.match(name):
        return None
    if len(trace.lane_rank_set) > 1:
        coll = collectives_of(trace)
        c = coll.of_event(i)
        if c >= 0 and coll.seq[c] >= 0:
            label = coll.collective[c] or name
            return (f"{label}@{coll.group[c]}" if coll.group[c] else label, "seq", int(coll.seq[c]))
        if c >= 0:
            return (name, "order", int(coll.position[c]))
    args = trace.event_args(i)
    seq = kineto.SEQ.of(args)
    if type(seq) is int:
        coll = kineto.COLLECTIVE_NAME.of(args, name)
        group = kineto.PROCESS_GROUP.of(args, "")
        return (f"{coll}@{group}" if group else str(coll), "seq", seq)
    rank = trace.lanes[int(trace.lane[i])].rank
    same = np.flatnonzero(trace.name_id == trace.name_id[i])
    mine = same[[trace.lanes[int(trace.lane[k])].rank == rank for k in same.tolist()]]
    mine = mine[np.argsort(trace.start_ns[mine], kind="stable")]
    return (name, "order", int(np.flatnonzero(mine == i)[0]))


def collective_peers(trace: Trace, i: int) -> dict[int, int]:
    """{rank: event} of the same collective on every rank of a merged trace (`collectives.match_collectives`:
    same name, process group and sequence number, or same name and place), the event's own rank
    included; {} when `i` is no collective or its trace has one rank."""
    if len(trace.lane_rank_set) < 2 or not COLLECTIVE_NAME.match(trace.event_name(i)):
        return {}  # (before matching the whole trace's collectives, on the first one selected)
    coll = collectives_of(trace)
    c = coll.of_event(i)
    if c < 0:
        return {}
    sl = coll.members(c)
    return dict(zip(coll.rank[sl].tolist(), coll.event[sl].tolist()))


def merged_flow_binder(parts: Sequence[Trace]) -> Callable[[Trace], Flows]:
    """A flow binder for the merge of `parts` (ranks merged in order, each part's events kept in
    order after the parts before it, as `merge_traces` does): each part's own arrows, bound in it."""

    def bind(_merged: Trace) -> Flows:
        shifted = []
        offset = 0
        for part in parts:
            f = part.flows
            src, dst = np.where(f.src >= 0, f.src + offset, -1), np.where(f.dst >= 0, f.dst + offset, -1)
            shifted.append(Flows(f.cats, f.cat_id, f.flow_id, src, dst, f.from_correlation))
            offset += len(part)
        return joined_flows(shifted)

    return bind
