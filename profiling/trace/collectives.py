"""Collectives matched across the ranks of a merged trace, and how long each rank waited for the last.

A collective (all-reduce, all-gather, …) cannot finish on any rank before the last rank arrives, so
the ranks that arrive early wait: rank r's wait in a collective is the last arrival less its own
(arrivals are the events' starts, ranks on one clock: `merge.merge_traces`). The same collective is
found on every rank in one vectorised pass over the collective events:

- where an event's args have a `Seq` (PyTorch ≥ 2.1 writes `Seq`, `Process Group Name`,
  `Collective name` and `In msg nelems` on `record_param_comms` and the NCCL kernels), by
  (event name, collective name, process group, Seq);
- otherwise by (event name, its place among the events of that name on its rank, by start).

A rank's message size that differs from the others' (all-to-all aside, whose sizes differ by design)
is kept and flagged (`size_mismatch`), not used to split a collective: with a Seq per process
group, a collective whose ranks disagree on the size is one call gone wrong, worth seeing as one.

Collectives nest (`c10d::allreduce_` › `record_param_comms` › `nccl:all_reduce` on the CPU, and the
kernel on the GPU): every level is matched (a selected event at any level finds its peers), and the
per-rank totals count one level only (`Collectives.counted`): the outermost collectives on CPU lanes,
or where a trace has none, the outermost on GPU lanes.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from branchscope.profiling.trace.model import KIND_ORDER, Trace

#: Collective calls: NCCL/Gloo annotations, c10d ops, NCCL kernels, `record_param_comms`.
COLLECTIVE_NAME = re.compile(r"^(nccl:|gloo:|c10d::|ncclKernel_|ncclDevKernel_|record_param_comms)")

#: Collectives whose ranks send different sizes by design (no size mismatch is flagged for them).
_UNEVEN = re.compile(r"all_?to_?all|alltoall|gather|scatter|send|recv", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class Collectives:
    """The collectives of a merged trace, each with its members (one event per rank).

    Per collective c (ordered by first arrival): `name[c]`, `group[c]` ("" where unknown), `seq[c]`
    (-1 when matched by position), `position[c]` (its place on each rank when matched by position,
    else -1), `size[c]` (elements of the message, the largest of its ranks'; -1 unknown),
    `size_mismatch[c]`, `first_ns`/`last_ns` (earliest and latest arrival), `last_rank[c]` (the
    rank that arrived last: the straggler), `skew_ns[c]` = last − first, `on_gpu[c]`, `outer[c]`
    (not inside another collective event on its lane), `counted[c]` (the level the per-rank totals
    count). Its members are `offsets[c]:offsets[c+1]` of the member columns, in rank order:
    `event` (index into the trace), `rank`, `arrival_ns`, `wait_ns` (last arrival − own arrival).
    Per rank of the trace (`ranks`, ascending): `rank_wait_ns` (total wait in counted collectives on
    two or more ranks) and `rank_times_last` (how often it arrived last in them).
    """

    ranks: np.ndarray
    name: list[str]
    group: list[str]
    seq: np.ndarray
    position: np.ndarray
    size: np.ndarray
    size_mismatch: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    last_rank: np.ndarray
    skew_ns: np.ndarray
    on_gpu: np.ndarray
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
        ranks=ranks, name=[], group=[], seq=z, position=z, size=z, size_mismatch=b, first_ns=z, last_ns=z,
        last_rank=z, skew_ns=z, on_gpu=b, outer=b, counted=b, offsets=np.zeros(1, dtype=np.int64), event=z,
        rank=z, arrival_ns=z, wait_ns=z, rank_wait_ns=np.zeros(ranks.size, dtype=np.int64),
        rank_times_last=np.zeros(ranks.size, dtype=np.int64),
    )  # fmt: skip


@cache
def _batch_decoder() -> Any:
    """Reads, from a JSON list of events' texts, only the args that match a collective (msgspec
    imported on first use; every field `Any`, so one odd value never fails the batch)."""
    import msgspec

    class _Args(msgspec.Struct):
        coll: Any = msgspec.field(default=None, name="Collective name")
        seq: Any = msgspec.field(default=None, name="Seq")
        seq_lower: Any = msgspec.field(default=None, name="seq")
        group: Any = msgspec.field(default=None, name="Process Group Name")
        pg_name: Any = msgspec.field(default=None, name="pg_name")
        nelems: Any = msgspec.field(default=None, name="In msg nelems")
        dims: Any = msgspec.field(default=None, name="Input Dims")

    class _Event(msgspec.Struct):
        args: Any = None

    return msgspec.json.Decoder(list[_Event]), msgspec.convert, _Args


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _collective_args(trace: Trace, idx: np.ndarray) -> list[tuple[Any, Any, int | None, int | None]]:
    """(collective name, process group, Seq, message elements) of each event in `idx`: the args of
    events kept as text decoded in batches (one msgspec call per batch), dicts read as they are."""
    raws = trace._raw_args
    out: list[tuple[Any, Any, int | None, int | None]] = [(None, None, None, None)] * idx.size
    if raws is None or idx.size == 0:
        return out
    import msgspec

    decoder, convert, args_type = _batch_decoder()
    picked = [raws[i] for i in idx.tolist()]
    texts = [(k, r) for k, r in enumerate(picked) if isinstance(r, (bytes, msgspec.Raw)) and len(r)]
    dicts = [(k, r) for k, r in enumerate(picked) if isinstance(r, dict)]
    # anything else (a str, say) as `Trace.event_args` reads it
    values: list[tuple[int, Any]] = [
        (k, trace.event_args(int(idx[k]))) for k, r in enumerate(picked) if isinstance(r, str) and r
    ]
    for b in range(0, len(texts), 65536):
        chunk = texts[b : b + 65536]
        try:
            events = decoder.decode(b"[" + b",".join(bytes(r) for _, r in chunk) + b"]")
            values += [(k, e.args) for (k, _), e in zip(chunk, events)]
        except (msgspec.DecodeError, msgspec.ValidationError):  # one bad text: read them one by one
            values += [(k, trace.event_args(int(idx[k]))) for k, _ in chunk]
    values += dicts
    for k, a in values:
        if isinstance(a, dict):
            try:
                a = convert(a, args_type)
            except msgspec.ValidationError:
                continue
        if not isinstance(a, args_type):
            continue
        seq = _int(a.seq) if a.seq is not None else _int(a.seq_lower)
        group = a.group if a.group is not None else a.pg_name
        size = _int(a.nelems)
        if size is None and isinstance(a.dims, list) and a.dims and isinstance(a.dims[0], list):
            first = a.dims[0]
            if first and all(type(d) is int for d in first) and trace.names[int(trace.name_id[idx[k]])].startswith(("nccl:", "gloo:")):
                size = int(np.prod(first))
        out[k] = (a.coll, group, seq, size)
    return out


def _intern(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """Ids of `values` (None and non-strings as "", ints as their text) and the distinct texts."""
    table: dict[str, int] = {"": 0}
    ids = [table.setdefault(v if isinstance(v, str) else (str(v) if type(v) is int else ""), len(table)) for v in values]
    return np.array(ids, dtype=np.int64), list(table)


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
    coll_id, coll_names = _intern([a[0] for a in args])
    group_id, groups = _intern([a[1] for a in args])
    seq = np.array([-1 if a[2] is None else a[2] for a in args], dtype=np.int64)
    size = np.array([-1 if a[3] is None else a[3] for a in args], dtype=np.int64)
    by_seq = seq >= 0
    # place among the position-matched events of the same name on the same rank, by start
    position = np.full(idx.size, -1, dtype=np.int64)
    pos_idx = np.flatnonzero(~by_seq)
    if pos_idx.size:
        o = pos_idx[np.lexsort((start[pos_idx], name_id[pos_idx], rank[pos_idx]))]
        new = np.ones(o.size, dtype=bool)
        new[1:] = (rank[o][1:] != rank[o][:-1]) | (name_id[o][1:] != name_id[o][:-1])
        run_start = np.maximum.accumulate(np.where(new, np.arange(o.size), 0))
        position[o] = np.arange(o.size) - run_start
    # the key: (matched by position?, event name, collective name, group, Seq or position)
    number = np.where(by_seq, seq, position)
    kind = (~by_seq).astype(np.int64)
    cid = np.where(by_seq, coll_id, 0)
    gid = np.where(by_seq, group_id, 0)
    order = np.lexsort((start, rank, number, gid, cid, name_id, kind))
    keys = (kind[order], name_id[order], cid[order], gid[order], number[order])
    new_key = np.zeros(order.size, dtype=bool)
    new_key[0] = True
    for col in keys:
        new_key[1:] |= col[1:] != col[:-1]
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
    m = np.lexsort((rank[order], gnew))
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
    late = np.lexsort((-m_rank, arrival, gnew))
    last_rank = m_rank[late[offsets[1:] - 1]]
    wait = np.repeat(last, counts) - arrival
    m_size = size[order]
    big = np.maximum.reduceat(m_size, heads)
    small = np.minimum.reduceat(np.where(m_size < 0, np.iinfo(np.int64).max, m_size), heads)
    head_ev = order[heads]
    names = [
        coll_names[int(coll_id[e])] if by_seq[e] and coll_id[e] else trace.names[int(name_id[e])]
        for e in head_ev.tolist()
    ]
    uneven = np.fromiter((bool(_UNEVEN.search(s)) for s in names), dtype=bool, count=n)
    size_mismatch = (big >= 0) & (small != np.iinfo(np.int64).max) & (small != big) & ~uneven
    events = idx[order]
    on_gpu_lane = trace.lane_kind_codes == KIND_ORDER.index("gpu")
    on_gpu = on_gpu_lane[trace.lane[idx[head_ev]]]
    outer = _outer(trace, idx[head_ev], is_coll)
    level_gpu = bool((outer & ~on_gpu).sum() == 0)
    counted = outer & (on_gpu == level_gpu)
    # per rank: waits and times last over the counted collectives found on two or more ranks
    shared = counted & (counts >= 2)
    member_counted = np.repeat(shared, counts)
    rank_pos = np.searchsorted(ranks, m_rank)
    rank_wait = np.bincount(rank_pos[member_counted], weights=wait[member_counted], minlength=ranks.size)
    rank_last = np.bincount(np.searchsorted(ranks, last_rank[shared]), minlength=ranks.size)
    return Collectives(
        ranks=ranks,
        name=names,
        group=[groups[int(gid[e])] for e in head_ev.tolist()],
        seq=np.where(by_seq[head_ev], seq[head_ev], -1),
        position=np.where(by_seq[head_ev], -1, position[head_ev]),
        size=big,
        size_mismatch=size_mismatch,
        first_ns=first,
        last_ns=last,
        last_rank=last_rank,
        skew_ns=last - first,
        on_gpu=on_gpu,
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


def collectives_json(trace: Trace, worst: int = 5) -> dict[str, Any] | None:
    """`inspect --json`'s "collectives": the counted collectives found on two or more ranks, how they
    were matched, the `worst` by arrival skew, and per rank its total wait and times last; None where
    no collective is found on two ranks."""
    c = collectives_of(trace)
    shared = c.counted & (c.rank_count >= 2)
    if not shared.any():
        return None
    top = np.flatnonzero(shared)
    top = top[np.argsort(-c.skew_ns[top], kind="stable")][:worst]
    t0 = trace.span()[0]
    return {
        "count": int(shared.sum()),
        "level": "gpu" if bool(c.on_gpu[shared].all()) else "cpu",
        "matched_by_seq": int((shared & (c.seq >= 0)).sum()),
        "matched_by_position": int((shared & (c.seq < 0)).sum()),
        "incomplete": int((shared & (c.rank_count < c.ranks.size)).sum()),
        "unmatched": int((c.counted & (c.rank_count < 2)).sum()),
        "size_mismatch": int((shared & c.size_mismatch).sum()),
        "all_levels": int((c.rank_count >= 2).sum()),
        "worst": [
            {
                "name": c.name[k],
                "group": c.group[k] or None,
                "seq": None if c.seq[k] < 0 else int(c.seq[k]),
                "position": None if c.position[k] < 0 else int(c.position[k]),
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
