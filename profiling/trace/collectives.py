"""Collectives matched across the ranks of a merged trace, and how long each rank waited for the last.

A collective (all-reduce, all-gather, …) cannot finish on any rank before the last rank arrives, so
the ranks that arrive early wait: rank r's wait in a collective is the last arrival less its own
(arrivals are the events' starts, ranks on one clock: `merge.merge_traces`). The same collective is
found on every rank in one vectorised pass over the collective events:

- where an event's args have a `Seq` (PyTorch ≥ 2.1 writes `Seq`, `Process Group Name`,
  `Collective name` and `In msg nelems` on `record_param_comms` and the NCCL kernels), by
  (event name, collective name, process group, Seq);
- otherwise by (event name, message size, its place among the events of that name and size on its
  rank, by start); the size where known (`In msg nelems`, an `nccl:`/`gloo:` annotation's `Input
  Dims`, taken by the `c10d::` op around it too) and the same on every rank by design (not for
  all-to-all, gather, scatter), so that a trace whose ranks dropped different collectives (a sampled
  trace, a profiling window that starts mid-step) still pairs the same calls.

A rank's message size that differs from the others' (all-to-all aside, whose sizes differ by design)
is kept and flagged (`size_mismatch`), not used to split a collective: with a Seq per process
group, a collective whose ranks disagree on the size is one call gone wrong, worth seeing as one.

Collectives nest (`c10d::allreduce_` › `record_param_comms` › `nccl:all_reduce` on the CPU, and the
kernel on the GPU), and gloo runs its `gloo:all_reduce` on threads of its own, beside the caller's
`c10d::allreduce_`. Every level is matched (a selected event at any level finds its peers), and the
per-rank totals count one level only (`Collectives.counted`): the first of `LEVELS` the trace has
(the `c10d::` calls, else `record_param_comms`, else the `nccl:`/`gloo:` annotations, else the
kernels), its outermost events.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from typing import Any

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.model import KIND_ORDER, Trace, build_trace

#: The levels of collectives, outermost call first: the per-rank totals count the first a trace has.
LEVELS = tuple(level for level, _ in kineto.COLLECTIVE_LEVELS)
_LEVEL_PREFIXES = tuple(names.spellings for _, names in kineto.COLLECTIVE_LEVELS)
#: Collective calls: c10d ops, `record_param_comms`, NCCL/Gloo annotations, NCCL kernels.
COLLECTIVE_NAME = re.compile("^(" + "|".join(re.escape(p) for prefixes in _LEVEL_PREFIXES for p in prefixes) + ")")
#: The annotations (`nccl:all_reduce`), whose `Input Dims` give the message size.
_ANNOTATION = _LEVEL_PREFIXES[LEVELS.index("annotation")]


def _level(name: str) -> int:
    """Index in `LEVELS` of a collective's event name."""
    return next((k for k, prefixes in enumerate(_LEVEL_PREFIXES) if name.startswith(prefixes)), len(LEVELS) - 1)


#: Collectives whose ranks send different sizes by design: all-to-all, gather to a root, scatter from
#: one, point to point (their sizes neither key nor flag them; all-gather and reduce-scatter are even).
_UNEVEN = re.compile(r"all_?to_?all|(?<!all)(?<!all_)gather|(?<!reduce)(?<!reduce_)scatter|send|recv", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class Collectives:
    """The collectives of a merged trace, each with its members (one event per rank).

    Per collective c (ordered by first arrival): `name[c]` (its events' name), `collective[c]`
    (the args' `Collective name`, "" where unknown), `group[c]` ("" where unknown), `seq[c]`
    (-1 when matched by position), `position[c]` (its place among the events of its name and size
    on each rank when matched by position, else -1), `sized[c]` (its size was part of the key),
    `size[c]` (elements of the message, the
    largest of its ranks'; -1 unknown),
    `size_mismatch[c]`, `first_ns`/`last_ns` (earliest and latest arrival), `last_rank[c]` (the
    rank that arrived last: the straggler), `skew_ns[c]` = last − first, `on_gpu[c]`, `level[c]`
    (index into `LEVELS`), `outer[c]` (not inside another collective event on its lane),
    `counted[c]` (the level the per-rank totals count, its outermost events). Its members are `offsets[c]:offsets[c+1]` of the member columns, in rank order:
    `event` (index into the trace), `rank`, `arrival_ns`, `wait_ns` (last arrival − own arrival).
    Per rank of the trace (`ranks`, ascending): `rank_wait_ns` (total wait in counted collectives on
    two or more ranks) and `rank_times_last` (how often it arrived last in them).
    """

    ranks: np.ndarray
    name: list[str]
    collective: list[str]
    group: list[str]
    seq: np.ndarray
    position: np.ndarray
    sized: np.ndarray
    size: np.ndarray
    size_mismatch: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    last_rank: np.ndarray
    skew_ns: np.ndarray
    on_gpu: np.ndarray
    level: np.ndarray
    outer: np.ndarray
    counted: np.ndarray
    offsets: np.ndarray
    event: np.ndarray
    rank: np.ndarray
    arrival_ns: np.ndarray
    wait_ns: np.ndarray
    rank_wait_ns: np.ndarray
    rank_times_last: np.ndarray

    def __len__(self) -> int:
        return len(self.name)

    @property
    def rank_count(self) -> np.ndarray:
        """How many ranks each collective was found on."""
        return np.diff(self.offsets)

    def members(self, c: int) -> slice:
        return slice(int(self.offsets[c]), int(self.offsets[c + 1]))

    def of_event(self, i: int) -> int:
        """The collective event `i` is a member of, or -1."""
        hit = np.flatnonzero(self.event == i)
        if hit.size == 0:
            return -1
        return int(np.searchsorted(self.offsets, hit[0], side="right")) - 1

    def waits(self, c: int) -> dict[int, int]:
        """{rank: ns it waited for the last arrival} of collective `c`."""
        sl = self.members(c)
        return dict(zip(self.rank[sl].tolist(), self.wait_ns[sl].tolist()))


def _empty(ranks: np.ndarray) -> Collectives:
    z = np.zeros(0, dtype=np.int64)
    b = np.zeros(0, dtype=bool)
    return Collectives(
        ranks=ranks, name=[], collective=[], group=[], seq=z, position=z, sized=b, size=z, size_mismatch=b,
        first_ns=z, last_ns=z, last_rank=z, skew_ns=z, on_gpu=b, level=z, outer=b, counted=b, offsets=np.zeros(1, dtype=np.int64), event=z,
        rank=z, arrival_ns=z, wait_ns=z, rank_wait_ns=np.zeros(ranks.size, dtype=np.int64),
        rank_times_last=np.zeros(ranks.size, dtype=np.int64),
    )  # fmt: skip


#: The args naming a collective: (attribute, key, type, absent). A key's other spellings decode
#: into attributes of their own (`kineto.struct_fields`); the first said is taken (`first_said`).
_ARGS = (
    ("coll", kineto.COLLECTIVE_NAME, str, ""),
    ("seq", kineto.SEQ, int, -1),
    ("group", kineto.PROCESS_GROUP, str, ""),
    ("nelems", kineto.IN_MSG_NELEMS, int, -1),
)


@cache
def _decoders() -> Any:
    """Decoders of one event's text that read only the args naming a collective (`_ARGS`), typed,
    absent fields as "" and -1 (msgspec imported on first use); a value of another type fails,
    and that event is read as `Trace.event_args` reads it (`_lenient`). The second reads
    `Input Dims` too. Built once: the keys are resolved here, not per event."""
    import msgspec

    common = [f for attr, k, kind, absent in _ARGS for f in kineto.struct_fields(attr, k, kind, absent)]
    dims = kineto.struct_fields("dims", kineto.INPUT_DIMS, Any, None)
    # gc=False: hundreds of thousands of small structs, no cycles, and 40% less time than tracked ones
    args = msgspec.defstruct("_Args", common, gc=False)
    dims_args = msgspec.defstruct("_DimsArgs", [*common, *dims], gc=False)
    event = msgspec.defstruct("_Event", [("args", args, msgspec.field(default_factory=args))], gc=False)
    dims_event = msgspec.defstruct("_DimsEvent", [("args", dims_args, msgspec.field(default_factory=dims_args))], gc=False)
    return msgspec.json.Decoder(event), msgspec.json.Decoder(dims_event)


#: What `_lenient` reads of an event: (collective name, process group, Seq, message elements).
_Found = tuple[str, str, int, int]


def _text(v: Any) -> str:
    return v if isinstance(v, str) else (str(v) if type(v) is int else "")


def _int(v: Any) -> int:
    return v if type(v) is int and v >= 0 else -1


def _dims_size(dims: Any) -> int:
    """Elements of the first input of `Input Dims` (an `nccl:`/`gloo:` annotation's message), or -1."""
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0]:
        if all(type(d) is int for d in dims[0]):
            return int(np.prod(dims[0]))
    return -1


def _lenient(args: dict[str, Any], with_dims: bool) -> _Found:
    """`_Found` from an args dict, a field of an odd type read as absent."""
    seq = _int(kineto.SEQ.of(args))
    group = _text(kineto.PROCESS_GROUP.of(args))
    size = _int(kineto.IN_MSG_NELEMS.of(args))
    if size < 0 and with_dims:
        size = _dims_size(kineto.INPUT_DIMS.of(args))
    return (_text(kineto.COLLECTIVE_NAME.of(args)), group, seq, size)


def first_said(args: list[Any], attr: str, k: kineto.Key, absent: Any) -> np.ndarray:
    """Each event's value of key `k` (an object column of texts, or int64): of the first of its
    spellings that the event says (a text other than "", a number from 0 on)."""
    dtype = object if isinstance(absent, str) else np.int64
    attrs = kineto.spelling_attrs(attr, k)
    values = np.fromiter(map(attrgetter(attrs[0]), args), dtype=dtype, count=len(args))
    for other in attrs[1:]:
        unsaid = values == absent if dtype is object else values < 0
        values = np.where(unsaid, np.fromiter(map(attrgetter(other), args), dtype=dtype, count=len(args)), values)
    return values


class _Columns:
    """What the args say, one column per field ("" and -1: not said), for `n` events."""

    def __init__(self, n: int) -> None:
        self.coll = np.full(n, "", dtype=object)
        self.group = np.full(n, "", dtype=object)
        self.seq = np.full(n, -1, dtype=np.int64)
        self.size = np.full(n, -1, dtype=np.int64)

    def put(self, at: np.ndarray, found: list[_Found]) -> None:
        if len(found):
            coll, group, seq, size = zip(*found)
            self.coll[at], self.group[at] = np.array(coll, dtype=object), np.array(group, dtype=object)
            self.seq[at], self.size[at] = np.array(seq, dtype=np.int64), np.array(size, dtype=np.int64)

    def said(self, at: np.ndarray) -> bool:
        return bool((self.seq[at] >= 0).any() or (self.size[at] >= 0).any() or any(self.coll[at]) or any(self.group[at]))


def _read(trace: Trace, idx: np.ndarray, at: np.ndarray, with_dims: bool, cols: _Columns) -> None:
    """Reads the args of the events `idx[at]` into `cols[at]`: each text decoded by one C call,
    the fields taken out by `attrgetter` (no Python step per event); dicts, and texts that fail
    the typed decoder, read one by one."""
    import msgspec

    raws = trace._raw_args
    if raws is None or at.size == 0:
        return
    decode = _decoders()[1 if with_dims else 0].decode
    picked = [raws[i] for i in idx[at].tolist()]
    try:
        args = [decode(r).args for r in picked]
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError):  # a dict, None, an odd value
        found = []
        for k, r in enumerate(picked):
            if isinstance(r, dict):
                found.append(_lenient(r, with_dims))
            elif r is not None and len(r):
                found.append(_lenient(trace.event_args(int(idx[at[k]])), with_dims))
            else:
                found.append(("", "", -1, -1))
        cols.put(at, found)
        return
    said = {attr: first_said(args, attr, k, absent) for attr, k, _, absent in _ARGS}
    cols.coll[at] = said["coll"]
    cols.group[at] = said["group"]
    cols.seq[at] = np.maximum(said["seq"], -1)
    size = np.maximum(said["nelems"], -1)
    if with_dims:
        dims_attrs = kineto.spelling_attrs("dims", kineto.INPUT_DIMS)
        for k in np.flatnonzero(size < 0).tolist():
            dims = (getattr(args[k], a) for a in dims_attrs)
            size[k] = _dims_size(next((d for d in dims if d is not None), None))
    cols.size[at] = size


#: Events of a collective name read first to see whether its events say anything of a collective.
_SAMPLE = 4


def _collective_args(trace: Trace, idx: np.ndarray) -> _Columns:
    """What the args of the events of `idx` say. A name whose first events (`_SAMPLE` of them) say
    nothing of a collective (`c10d::allreduce_`, `nccl:all_reduce` in PyTorch's traces) is not read
    further: reading every event's text is most of the time this takes."""
    cols = _Columns(idx.size)
    name_id = trace.name_id[idx]
    order = np.argsort(name_id, kind="stable")
    bounds = np.flatnonzero(np.diff(name_id[order])) + 1
    for group in np.split(order, bounds):
        if group.size == 0:
            continue
        with_dims = trace.names[int(name_id[group[0]])].startswith(_ANNOTATION)
        _read(trace, idx, group[:_SAMPLE], with_dims, cols)
        if group.size > _SAMPLE and cols.said(group[:_SAMPLE]):
            _read(trace, idx, group[_SAMPLE:], with_dims, cols)
    return cols


def _intern(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Ids of an object column's texts ("" as 0) and the distinct texts."""
    ids = np.zeros(values.size, dtype=np.int64)
    said = np.flatnonzero(values != "")
    items = values[said].tolist()
    texts = [""] + sorted(set(items))
    table: dict[str, int] = {v: k for k, v in enumerate(texts)}
    ids[said] = np.fromiter(map(table.__getitem__, items), dtype=np.int64, count=len(items))
    return ids, texts


def _sort(key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The order of rows by (key, start): one stable sort by key where that leaves equal keys in
    start order (collective events come in lane order, each lane by start), else both."""
    order = np.argsort(key, kind="stable")
    k, t = key[order], start[order]
    if ((k[1:] == k[:-1]) & (t[1:] < t[:-1])).any():
        order = np.lexsort((start, key))
    return order


def _inherit(trace: Trace, idx: np.ndarray, value: np.ndarray) -> np.ndarray:
    """For each event of `idx`, the position in `idx` of the event it takes its Seq (or size: a
    `value` ≥ 0) from: its own where it has one, else the nearest collective inside it on its lane
    that has one (PyTorch writes the Seq on `record_param_comms`, inside `c10d::allreduce_`; the
    size on `nccl:all_reduce`'s Input Dims), else the nearest around it that has one, else -1."""
    src = np.where(value >= 0, np.arange(idx.size), -1)

    def pos_of(events: np.ndarray) -> np.ndarray:  # positions in idx (ascending) of events, or -1
        at = np.minimum(np.searchsorted(idx, events), idx.size - 1)
        return np.where(idx[at] == events, at, -1)

    parent = trace.parent
    child = np.flatnonzero(value >= 0)
    up = parent[idx[child]]
    while child.size:
        live = up >= 0
        child, up = child[live], up[live]
        at = pos_of(up)
        take = (at >= 0) & (src[np.maximum(at, 0)] < 0)
        src[at[take]] = child[take]  # the innermost first: a deeper one claimed it on an earlier pass
        up = parent[up]
    # then those still without one, from the nearest collective around them that has one
    # (`nccl:all_reduce` inside `record_param_comms`)
    rest = np.flatnonzero(src < 0)
    up = parent[idx[rest]]
    while rest.size:
        live = up >= 0
        rest, up = rest[live], up[live]
        at = pos_of(up)
        found = (at >= 0) & (src[np.maximum(at, 0)] >= 0)
        src[rest[found]] = src[at[found]]
        rest, up = rest[~found], parent[up[~found]]
    return src


def _outer(trace: Trace, idx: np.ndarray, is_coll: np.ndarray) -> np.ndarray:
    """For each collective event in `idx`: no collective event encloses it on its lane."""
    inside = np.zeros(idx.size, dtype=bool)
    parent = trace.parent
    up = parent[idx]
    while True:
        live = up >= 0
        if not live.any():
            return ~inside
        inside[live] |= is_coll[up[live]]
        up = np.where(live, parent[np.maximum(up, 0)], -1)


def _dense(cols: tuple[np.ndarray, ...]) -> np.ndarray:
    """One int64 per row of the columns (non-negative ints) that orders the rows as the columns
    would in turn: mixed radix where the product of their ranges fits, else ids of the distinct rows."""
    key = np.zeros(cols[0].size, dtype=np.int64)
    span = 1
    for col in cols:
        card = int(col.max()) + 1 if col.size else 1
        if span * card >= 1 << 62:
            return np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        key = key * card + col
        span *= card
    return key


def collective_events(trace: Trace) -> Trace:
    """`trace` with only its collective events (their args kept; its lanes, clock and metadata):
    what `match_collectives` reads of a rank, small enough to keep for every rank of a job whose
    other events are not held (`rank_job`). Merged as ranks, these match as the full traces do:
    every level of a collective is kept, so what nests in what is the same."""
    is_coll_name = np.fromiter((bool(COLLECTIVE_NAME.match(n)) for n in trace.names), dtype=bool, count=len(trace.names))
    idx = np.flatnonzero(is_coll_name[trace.name_id]) if len(trace) else np.zeros(0, dtype=np.int64)
    raw = trace._raw_args
    return build_trace(
        path=trace.path, start_ns=trace.start_ns[idx], dur_ns=trace.dur_ns[idx], lane=trace.lane[idx],
        name_id=trace.name_id[idx], cat_id=trace.cat_id[idx], names=list(trace.names), cats=list(trace.cats),
        lanes=list(trace.lanes), metadata=dict(trace.metadata),
        raw_args=None if raw is None else [_as_bytes(raw[i]) for i in idx.tolist()],
    )  # fmt: skip


def _as_bytes(raw: Any) -> Any:
    """An event's text as bytes of its own, not a view holding its whole trace's text (args
    already read, a dict, or none stay as they are)."""
    return raw if raw is None or isinstance(raw, dict) else bytes(raw)


def match_collectives(trace: Trace) -> Collectives:
    """Every collective of a merged trace matched across its ranks (see the module's docstring);
    a trace of one rank, or of none, has no collectives to match (an empty `Collectives`)."""
    lane_rank = np.array([-1 if ln.rank is None else ln.rank for ln in trace.lanes], dtype=np.int64)
    ranks = np.unique(lane_rank[lane_rank >= 0])
    if ranks.size < 2 or len(trace) == 0:
        return _empty(ranks)
    is_coll_name = np.fromiter((bool(COLLECTIVE_NAME.match(n)) for n in trace.names), dtype=bool, count=len(trace.names))
    is_coll = is_coll_name[trace.name_id]
    idx = np.flatnonzero(is_coll & (lane_rank[trace.lane] >= 0))
    if idx.size == 0:
        return _empty(ranks)
    rank = lane_rank[trace.lane[idx]]
    name_id = trace.name_id[idx].astype(np.int64)
    start = trace.start_ns[idx]
    args = _collective_args(trace, idx)
    coll_id, coll_names = _intern(args.coll)
    group_id, groups = _intern(args.group)
    seq, size = args.seq.copy(), args.size.copy()
    src = _inherit(trace, idx, seq)
    got = src >= 0
    seq[got], coll_id[got], group_id[got] = seq[src[got]], coll_id[src[got]], group_id[src[got]]
    size[got & (size < 0)] = size[src[got & (size < 0)]]
    size_src = _inherit(trace, idx, size)
    size = np.where(size_src >= 0, size[np.maximum(size_src, 0)], -1)
    by_seq = seq >= 0
    # without a Seq, the message size (where known, and the same on every rank by design) and the
    # place among the events of that name and size on the rank, by start, tell a collective
    uneven_name = np.fromiter((bool(_UNEVEN.search(x)) for x in trace.names), dtype=bool, count=len(trace.names))
    uneven_coll = np.fromiter((bool(_UNEVEN.search(x)) for x in coll_names), dtype=bool, count=len(coll_names))
    uneven = uneven_name[name_id] | uneven_coll[coll_id] | (uneven_name[name_id[np.maximum(size_src, 0)]] & (size_src >= 0))
    sized = ~by_seq & (size >= 0) & ~uneven
    size_key = np.unique(np.where(sized, size, -1), return_inverse=True)[1].reshape(-1)  # dense: 0 unsized
    rank_key = np.searchsorted(ranks, rank)
    position = np.full(idx.size, -1, dtype=np.int64)
    pos_idx = np.flatnonzero(~by_seq)
    if pos_idx.size:
        run = _dense((rank_key[pos_idx], name_id[pos_idx], size_key[pos_idx]))
        o = _sort(run, start[pos_idx])
        new = np.ones(o.size, dtype=bool)
        new[1:] = run[o][1:] != run[o][:-1]
        run_start = np.maximum.accumulate(np.where(new, np.arange(o.size), 0))
        position[pos_idx[o]] = np.arange(o.size) - run_start
    # the key: (matched by position?, event name, collective name, group, size, Seq or position)
    number = np.where(by_seq, seq, position)
    key = _dense(((~by_seq).astype(np.int64), name_id, np.where(by_seq, coll_id, 0),
                  np.where(by_seq, group_id, 0), size_key, number))  # fmt: skip
    order = _sort(_dense((key, rank_key)), start)
    new_key = np.zeros(order.size, dtype=bool)
    new_key[0] = True
    new_key[1:] = key[order][1:] != key[order][:-1]
    # one event per (collective, rank): the earliest (a rank's trace may repeat a Seq)
    new_rank = new_key.copy()
    new_rank[1:] |= rank[order][1:] != rank[order][:-1]
    order, new_key = order[new_rank], new_key[new_rank]
    group_of = np.cumsum(new_key) - 1
    n = int(group_of[-1]) + 1
    heads = np.flatnonzero(new_key)
    arrival = start[order]
    first = np.minimum.reduceat(arrival, heads)
    # collectives by first arrival, members by rank
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty(n, dtype=np.int64)
    renumber[by_first] = np.arange(n)
    gnew = renumber[group_of]
    m = np.argsort(gnew, kind="stable")  # whole groups move: each keeps its members in rank order
    order, gnew = order[m], gnew[m]
    arrival = start[order]
    m_rank = rank[order]
    counts = np.bincount(gnew, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    heads = offsets[:-1]
    first = np.minimum.reduceat(arrival, heads)
    last = np.maximum.reduceat(arrival, heads)
    # the last to arrive: the member with the latest arrival (the lowest rank of a tie)
    wait = np.repeat(last, counts) - arrival
    at = np.where(wait == 0, np.arange(order.size), order.size)
    last_rank = m_rank[np.minimum.reduceat(at, heads)]
    m_size = size[order]
    big = np.maximum.reduceat(m_size, heads)
    small = np.minimum.reduceat(np.where(m_size < 0, np.iinfo(np.int64).max, m_size), heads)
    head_ev = order[heads]
    names = [trace.names[int(name_id[e])] for e in head_ev.tolist()]
    collective = [coll_names[int(coll_id[e])] if by_seq[e] else "" for e in head_ev.tolist()]
    uneven = np.fromiter((bool(_UNEVEN.search(f"{a} {b}")) for a, b in zip(names, collective)), dtype=bool, count=n)
    size_mismatch = (big >= 0) & (small != np.iinfo(np.int64).max) & (small != big) & ~uneven
    events = idx[order]
    on_gpu_lane = trace.lane_kind_codes == KIND_ORDER.index("gpu")
    on_gpu = on_gpu_lane[trace.lane[idx[head_ev]]]
    outer = _outer(trace, idx[head_ev], is_coll)
    level = np.fromiter((_level(x) for x in names), dtype=np.int64, count=n)
    counted = outer & (level == level.min())
    # per rank: waits and times last over the counted collectives found on two or more ranks
    shared = counted & (counts >= 2)
    member_counted = np.repeat(shared, counts)
    rank_pos = np.searchsorted(ranks, m_rank)
    rank_wait = np.bincount(rank_pos[member_counted], weights=wait[member_counted], minlength=ranks.size)
    rank_last = np.bincount(np.searchsorted(ranks, last_rank[shared]), minlength=ranks.size)
    return Collectives(
        ranks=ranks,
        name=names,
        collective=collective,
        group=[groups[int(group_id[e])] if by_seq[e] else "" for e in head_ev.tolist()],
        seq=np.where(by_seq[head_ev], seq[head_ev], -1),
        position=np.where(by_seq[head_ev], -1, position[head_ev]),
        sized=sized[head_ev],
        size=big,
        size_mismatch=size_mismatch,
        first_ns=first,
        last_ns=last,
        last_rank=last_rank,
        skew_ns=last - first,
        on_gpu=on_gpu,
        level=level,
        outer=outer,
        counted=counted,
        offsets=offsets,
        event=events,
        rank=m_rank,
        arrival_ns=arrival,
        wait_ns=wait,
        rank_wait_ns=np.rint(rank_wait).astype(np.int64),
        rank_times_last=rank_last.astype(np.int64),
    )


_CACHE: weakref.WeakKeyDictionary[Trace, Collectives] = weakref.WeakKeyDictionary()


def collectives_of(trace: Trace) -> Collectives:
    """`match_collectives(trace)`, computed once per trace (the details panel asks on every selection)."""
    found = _CACHE.get(trace)
    if found is None:
        found = _CACHE[trace] = match_collectives(trace)
    return found


def collectives_json(trace: Trace, worst: int = 5, *, origin_ns: int | None = None) -> dict[str, Any] | None:
    """`inspect --json`'s "collectives": the counted collectives found on two or more ranks, how they
    were matched, the `worst` by arrival skew (their starts from `origin_ns`, by default the trace's
    first event), and per rank its total wait and times last; None where no collective is found on
    two ranks."""
    c = collectives_of(trace)
    shared = c.counted & (c.rank_count >= 2)
    if not shared.any():
        return None
    top = np.flatnonzero(shared)
    top = top[np.argsort(-c.skew_ns[top], kind="stable")][:worst]
    t0 = trace.span()[0] if origin_ns is None else origin_ns
    return {
        "count": int(shared.sum()),
        "level": LEVELS[int(c.level[shared][0])],
        "matched_by_seq": int((shared & (c.seq >= 0)).sum()),
        "matched_by_position": int((shared & (c.seq < 0)).sum()),
        "incomplete": int((shared & (c.rank_count < c.ranks.size)).sum()),
        "unmatched": int((c.counted & (c.rank_count < 2)).sum()),
        "size_mismatch": int((shared & c.size_mismatch).sum()),
        "all_levels": int((c.rank_count >= 2).sum()),
        "worst": [
            {
                "name": c.name[k],
                "collective": c.collective[k] or None,
                "group": c.group[k] or None,
                "seq": None if c.seq[k] < 0 else int(c.seq[k]),
                "position": None if c.position[k] < 0 else int(c.position[k]),
                "position_by_size": bool(c.sized[k]),
                "size_elems": None if c.size[k] < 0 else int(c.size[k]),
                "ranks": int(c.rank_count[k]),
                "skew_us": int(c.skew_ns[k]) / 1000.0,
                "first_rank": int(c.rank[c.offsets[k] + int(np.argmin(c.arrival_ns[c.members(k)]))]),
                "last_rank": int(c.last_rank[k]),
                "start_us": (int(c.first_ns[k]) - t0) / 1000.0,
            }
            for k in top.tolist()
        ],
        "ranks": [
            {"rank": int(r), "wait_us": int(w) / 1000.0, "times_last": int(t)}
            for r, w, t in zip(c.ranks.tolist(), c.rank_wait_ns.tolist(), c.rank_times_last.tolist())
        ],
    }
