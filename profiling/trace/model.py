"""The in-memory model of one profiler trace: events as numpy columns grouped into lanes.

Everything branchscope draws or computes reads this model, never the JSON. Events are stored
column-wise (one numpy array per field) because a real trace holds millions of events and every
consumer (level-of-detail drawing, busy-time unions, occupancy) is a vectorised pass over them.
Names and categories are interned: an event stores an int id into `Trace.names` / `Trace.cats`.

Events are sorted by (lane, start, longest first), so the events of lane `i` are the contiguous
slice `lane_offsets[i]:lane_offsets[i + 1]` and, within a lane, a parent precedes its children.

A trace can hold a million lanes (a thread per event): the reader's lanes are a `LaneTable`, columns
that make a `Lane` only when asked for one, and what is computed per lane (depth, busy time,
computing runs) is computed for all lanes at once, never with a Python step per lane.
"""

from __future__ import annotations

import gc
import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal, overload

import numpy as np

from branchscope.profiling.trace.run_info import RunInfo

LaneKind = Literal["cpu", "gpu"]
#: What a lane's thread does: the main thread, an inter-op pool thread, an intra-op (OpenMP) worker,
#: an autograd engine thread, any other thread. GPU lanes are always "stream".
LaneRole = Literal["main", "interop", "intra", "autograd", "other", "stream"]

ROLE_ORDER: tuple[LaneRole, ...] = ("main", "interop", "intra", "autograd", "other", "stream")
#: Lane kinds by their code in `LaneTable.kind` and `Trace.lane_kind_codes`.
KIND_ORDER: tuple[LaneKind, ...] = ("cpu", "gpu")


class TraceFormatError(ValueError):
    """A file that is not a readable torch.profiler / Chrome trace; the message names the file."""


class LoadCancelled(Exception):
    """A load stopped because its progress callback returned False (not an error in the file)."""


@dataclass(frozen=True, slots=True)
class Lane:
    """One horizontal track: a CPU thread, or one stream of one GPU."""

    index: int
    kind: LaneKind
    pid: int
    #: OS thread id for CPU lanes (as written in the trace, possibly negative); stream id for GPU lanes.
    tid: int
    name: str
    role: LaneRole
    #: GPU device index for GPU lanes; -1 for CPU lanes.
    device: int = -1
    #: The distributed rank this lane belongs to, when several ranks' traces are merged.
    rank: int | None = None

    @property
    def label(self) -> str:
        text = f"GPU {self.device} stream {self.tid}" if self.kind == "gpu" else (self.name or f"thread {self.tid}")
        return text if self.rank is None else f"rank {self.rank} · {text}"


#: Lane's slots, set directly: making a million lanes through the frozen dataclass's __init__ (one
#: object.__setattr__ call per field) takes 1.6 s, through the slots' own setters 0.6 s.
_SET_INDEX, _SET_KIND, _SET_PID, _SET_TID, _SET_NAME, _SET_ROLE, _SET_DEVICE, _SET_RANK = (
    Lane.__dict__[name].__set__ for name in ("index", "kind", "pid", "tid", "name", "role", "device", "rank")
)
assert Lane.__slots__ == ("index", "kind", "pid", "tid", "name", "role", "device", "rank")


def _new_lane(
    index: int, kind: LaneKind, pid: int, tid: int, name: str, role: LaneRole, device: int, rank: int | None
) -> Lane:
    """`Lane(index, kind, pid, tid, name, role, device, rank)`, made without its __init__."""
    lane = object.__new__(Lane)
    _SET_INDEX(lane, index)
    _SET_KIND(lane, kind)
    _SET_PID(lane, pid)
    _SET_TID(lane, tid)
    _SET_NAME(lane, name)
    _SET_ROLE(lane, role)
    _SET_DEVICE(lane, device)
    _SET_RANK(lane, rank)
    return lane


#: The name of a lane whose thread has none, by kind code.
_DEFAULT_NAME = ("thread {}", "stream {}")


class LaneTable(Sequence[Lane]):
    """The lanes of a loaded trace as columns, a `Lane` made on first use of it.

    A trace of a million threads would spend seconds and hundreds of MB on Lane objects at load;
    the analyses read the columns instead (`Trace.lane_kind_codes`, `Trace.lane_indices`). A lane
    once made stays the same object. Compares equal to a list of the same lanes.

    Columns: `kind` (int8 code into `KIND_ORDER`), `pid`, `tid`, `device` (int64, or object
    arrays of Python ints where some do not fit int64), `role` (int8 code into `ROLE_ORDER`);
    `names` holds the names that are not the default ("thread TID" for a CPU lane, "stream TID"
    for a GPU lane). Every lane's index is its position and its rank None.
    """

    __slots__ = ("kind", "pid", "tid", "role", "device", "names", "_made", "_all_made")

    def __init__(
        self,
        *,
        kind: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        role: np.ndarray,
        device: np.ndarray,
        names: dict[int, str] | None = None,
    ) -> None:
        self.kind = np.asarray(kind, dtype=np.int8)
        self.pid, self.tid, self.device = pid, tid, device
        self.role = np.asarray(role, dtype=np.int8)
        self.names = names or {}
        self._made: list[Lane | None] | None = None
        self._all_made = False

    def __len__(self) -> int:
        return int(self.kind.size)

    @overload
    def __getitem__(self, i: int) -> Lane: ...

    @overload
    def __getitem__(self, i: slice) -> list[Lane]: ...

    def __getitem__(self, i: int | slice) -> Lane | list[Lane]:
        if isinstance(i, slice):
            return self._all()[i]
        n = len(self)
        k = operator.index(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("lane index out of range")
        made = self._made
        if made is None:
            made = self._made = [None] * n
        lane = made[k]
        if lane is None:
            lane = made[k] = self._make(np.array([k], dtype=np.int64))[0]
        return lane

    def __iter__(self) -> Iterator[Lane]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (LaneTable, list)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # like a list

    def __repr__(self) -> str:
        return repr(self._all())

    def _all(self) -> list[Lane]:
        """Every lane, the ones not yet made made now, in one pass."""
        made = self._made
        if not self._all_made:
            if made is None:
                made = self._made = list(self._make(np.arange(len(self), dtype=np.int64)))
            else:
                missing = [k for k, lane in enumerate(made) if lane is None]
                for k, lane in zip(missing, self._make(np.array(missing, dtype=np.int64))):
                    made[k] = lane
            self._all_made = True
        return made  # type: ignore[return-value]  # no None left

    def _make(self, index: np.ndarray) -> list[Lane]:
        kind = self.kind[index].tolist()
        tid = self.tid[index].tolist()
        name = list(map(str.format, map(_DEFAULT_NAME.__getitem__, kind), tid))
        if self.names and index.size <= len(self.names):  # one lane, a few: look each up
            for j, k in enumerate(index.tolist()):
                if (own_name := self.names.get(k)) is not None:
                    name[j] = own_name
        elif self.names:  # most lanes: go through the names once (`index` is ascending)
            own = np.array(list(self.names), dtype=np.int64)
            at = np.minimum(np.searchsorted(index, own), max(index.size - 1, 0))
            for k, j in zip(own.tolist(), at.tolist()):
                if index.size and index[j] == k:
                    name[j] = self.names[k]
        # A million new objects would set off as many needless passes of the cyclic collector.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return list(
                map(
                    _new_lane,
                    index.tolist(),
                    map(KIND_ORDER.__getitem__, kind),
                    self.pid[index].tolist(),
                    tid,
                    name,
                    map(ROLE_ORDER.__getitem__, self.role[index].tolist()),
                    self.device[index].tolist(),
                    itertools.repeat(None),
                )
            )
        finally:
            if gc_was_enabled:
                gc.enable()


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """Allocator events of one device in time order; `total_bytes` is the allocated total after each.

    The per-event columns after `total_bytes` may be left out when building one: `addr`, `pid` and
    `tid` are then -1 throughout (-1 also marks an event without `Addr`, as in the oldest traces).
    A snapshot's series names each event's allocation site: `site_id` indexes `sites` (-1: none).
    """

    device: str  # "cpu" or "cuda:N" ("rankR/cuda:N" once ranks are merged)
    ts_ns: np.ndarray  # int64
    delta_bytes: np.ndarray  # int64, negative for frees
    total_bytes: np.ndarray  # int64
    addr: np.ndarray = None  # type: ignore[assignment]  # int64; -1 filled in by __post_init__
    #: Reserved by the caching allocator after each event (int64); None where the trace lacks it.
    reserved_bytes: np.ndarray | None = None
    pid: np.ndarray = None  # type: ignore[assignment]  # int64, the allocating process; -1 filled in
    tid: np.ndarray = None  # type: ignore[assignment]  # int64, the allocating thread; -1 filled in
    #: The device's memory (deviceProperties[].totalGlobalMem for cuda:N); None when unknown.
    capacity_bytes: int | None = None
    rank: int | None = None
    site_id: np.ndarray | None = None  # int32 into `sites`, snapshots only
    sites: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = int(np.asarray(self.ts_ns).size)
        for name in ("addr", "pid", "tid"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(n, -1, dtype=np.int64))

    @property
    def events(self) -> int:
        return int(self.ts_ns.size)

    @property
    def has_addr(self) -> bool:
        """Whether events carry addresses, so that allocations and frees can be paired."""
        return bool(self.addr.size) and bool(np.any(self.addr != -1))

    @property
    def peak_bytes(self) -> int:
        return int(self.total_bytes.max()) if self.total_bytes.size else 0

    @property
    def peak_ts_ns(self) -> int:
        return int(self.ts_ns[int(np.argmax(self.total_bytes))]) if self.total_bytes.size else 0


@dataclass(frozen=True, slots=True)
class CounterTrack:
    """One series of a Chrome counter event ("ph": "C"), e.g. a sampled thread's CPU use."""

    name: str
    pid: int
    tid: int
    key: str  # the args key this series was read from
    ts_ns: np.ndarray  # int64, sorted
    values: np.ndarray  # float64
    cat: str = ""


@dataclass(frozen=True, slots=True)
class Flows:
    """Arrows between events (`ac2g` CPU launch -> GPU kernel, `fwdbwd`); -1 where an end is unbound."""

    cats: list[str]
    cat_id: np.ndarray  # int32
    flow_id: np.ndarray  # int64: the trace's flow id, interned
    src: np.ndarray  # int64 event index
    dst: np.ndarray  # int64 event index

    def __len__(self) -> int:
        return int(self.src.size)


@dataclass(frozen=True, slots=True)
class EventView:
    """One event, materialised for display (hover, details panel)."""

    index: int
    name: str
    cat: str
    lane: Lane
    start_ns: int
    dur_ns: int
    depth: int
    args: dict[str, Any]

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    @property
    def shapes(self) -> Any:
        return self.args.get("Input Dims")


@dataclass(eq=False)
class Trace:
    """A loaded trace. Build one with `profiling.load_trace` or `build_trace`, not directly."""

    path: str
    start_ns: np.ndarray  # int64
    dur_ns: np.ndarray  # int64
    lane: np.ndarray  # int32
    depth: np.ndarray  # int32
    name_id: np.ndarray  # int32
    cat_id: np.ndarray  # int32
    names: list[str]
    cats: list[str]
    lanes: Sequence[Lane]  # a list, or a `LaneTable` (the reader's)
    lane_offsets: np.ndarray  # int64, len(lanes) + 1
    memory: list[MemorySeries] = field(default_factory=list)
    counters: list[CounterTrack] = field(default_factory=list)
    #: Top-level trace keys other than traceEvents (deviceProperties, distributedInfo, ...).
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Per event, its whole JSON text (msgspec.Raw or bytes), whose `args` are decoded on demand, or
    #: its args as a dict; None if absent.
    _raw_args: list[Any] | None = None
    #: Binds the trace's flow events to its events, called once by `flows` (the reader gives it;
    #: None where the trace has no flows).
    _flow_binder: Callable[[Trace], Flows] | None = None

    # ---- sizes and clock -------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.start_ns.size)

    @cached_property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns

    def span(self) -> tuple[int, int]:
        """(first start, last end) over all events, in the trace's own clock (ns)."""
        if len(self) == 0:
            return (0, 0)
        return (int(self.start_ns.min()), int(self.end_ns.max()))

    @property
    def rank(self) -> int | None:
        info = self.metadata.get("distributedInfo")
        if isinstance(info, dict) and isinstance(info.get("rank"), int):
            return info["rank"]
        return None

    @property
    def base_time_ns(self) -> int | None:
        base = self.metadata.get("baseTimeNanoseconds")
        return int(base) if isinstance(base, (int, float)) else None

    # ---- lanes ------------------------------------------------------------------------------
    def lane_slice(self, lane_index: int) -> slice:
        return slice(int(self.lane_offsets[lane_index]), int(self.lane_offsets[lane_index + 1]))

    def lane_event_count(self, lane_index: int) -> int:
        return self._lane_counts[lane_index]

    @cached_property
    def _lane_counts(self) -> list[int]:
        """Events per lane as Python ints: asked once per lane (inspect's table), a list is 10x
        cheaper than two numpy scalars."""
        return np.diff(self.lane_offsets).tolist()

    def lanes_of(self, kind: LaneKind | None = None, role: LaneRole | None = None) -> list[Lane]:
        return [self.lanes[i] for i in self.lane_indices(kind, role).tolist()]

    def lane_indices(self, kind: LaneKind | None = None, role: LaneRole | None = None) -> np.ndarray:
        """Indices (int64, ascending) of the lanes of a kind and/or role: `lanes_of` without
        making Lane objects."""
        keep = np.ones(len(self.lanes), dtype=bool)
        if kind is not None:
            keep &= self.lane_kind_codes == (KIND_ORDER.index(kind) if kind in KIND_ORDER else -1)
        if role is not None:
            keep &= self.lane_role_codes == (ROLE_ORDER.index(role) if role in ROLE_ORDER else -1)
        return np.flatnonzero(keep)

    @cached_property
    def lane_kind_codes(self) -> np.ndarray:
        """Each lane's kind as an int8 code into `KIND_ORDER` (0: cpu, 1: gpu)."""
        if isinstance(self.lanes, LaneTable):
            return self.lanes.kind
        codes = {kind: k for k, kind in enumerate(KIND_ORDER)}
        return np.array([codes.get(ln.kind, -1) for ln in self.lanes], dtype=np.int8)

    @cached_property
    def lane_pids(self) -> np.ndarray:
        """Each lane's pid (int64; an object array where some do not fit)."""
        if isinstance(self.lanes, LaneTable):
            return self.lanes.pid
        return _int_column([ln.pid for ln in self.lanes])

    @cached_property
    def lane_tids(self) -> np.ndarray:
        """Each lane's tid (int64; an object array where some do not fit)."""
        if isinstance(self.lanes, LaneTable):
            return self.lanes.tid
        return _int_column([ln.tid for ln in self.lanes])

    @cached_property
    def lane_rank_set(self) -> frozenset[int | None]:
        """The lanes' distinct ranks (None: a lane of no rank; a loaded trace's lanes have none)."""
        if isinstance(self.lanes, LaneTable):
            return frozenset({None}) if len(self.lanes) else frozenset()
        return frozenset(ln.rank for ln in self.lanes)

    @cached_property
    def lane_role_codes(self) -> np.ndarray:
        """Each lane's role as an int8 code into `ROLE_ORDER`."""
        if isinstance(self.lanes, LaneTable):
            return self.lanes.role
        codes = {role: k for k, role in enumerate(ROLE_ORDER)}
        return np.array([codes.get(ln.role, -1) for ln in self.lanes], dtype=np.int8)

    # ---- events -----------------------------------------------------------------------------
    def event_name(self, i: int) -> str:
        return self.names[int(self.name_id[i])]

    def event_args(self, i: int) -> dict[str, Any]:
        """The event's `args`, read now from the event's text: reading them at load time would
        double load time."""
        if self._raw_args is None:
            return {}
        raw = self._raw_args[i]
        if raw is None or len(raw) == 0:
            return {}
        if isinstance(raw, dict):
            return raw
        import msgspec

        try:
            value = _args_of_event().decode(raw).args
        except (msgspec.DecodeError, msgspec.ValidationError):
            return {}
        return value if isinstance(value, dict) else {}

    def event(self, i: int) -> EventView:
        return EventView(
            index=int(i),
            name=self.names[int(self.name_id[i])],
            cat=self.cats[int(self.cat_id[i])],
            lane=self.lanes[int(self.lane[i])],
            start_ns=int(self.start_ns[i]),
            dur_ns=int(self.dur_ns[i]),
            depth=int(self.depth[i]),
            args=self.event_args(i),
        )

    def find(self, substring: str) -> np.ndarray:
        """Indices of events whose name contains `substring` (case-insensitive)."""
        needle = substring.lower()
        hit = np.fromiter((needle in n.lower() for n in self.names), dtype=bool, count=len(self.names))
        return np.flatnonzero(hit[self.name_id]) if hit.size else np.zeros(0, dtype=np.int64)

    @cached_property
    def parent(self) -> np.ndarray:
        """Index of each event's enclosing event on its lane (-1 at the top).

        The parent is the last earlier event of the lane one row up: true both for properly nested
        lanes and for the call-stack rows `compute_depth` falls back to.
        """
        parent = np.full(len(self), -1, dtype=np.int64)
        if len(self) == 0:
            return parent
        # A (lane, depth) key orders rows; searching within each row finds the last earlier one.
        order = np.arange(len(self), dtype=np.int64)
        for level in range(1, int(self.depth.max()) + 1):
            children = order[self.depth == level]
            rows = order[self.depth == level - 1]
            k = np.searchsorted(rows, children) - 1
            ok = k >= 0
            cand = rows[np.maximum(k, 0)]
            ok &= self.lane[cand] == self.lane[children]
            parent[children[ok]] = cand[ok]
        return parent

    def event_at(self, lane_index: int, t_ns: int) -> int:
        """The deepest event of a lane covering time `t_ns` (start <= t < end), or -1."""
        sl = self.lane_slice(lane_index)
        k = int(np.searchsorted(self.start_ns[sl], t_ns, side="right")) - 1
        i = sl.start + k if k >= 0 else -1
        # The last event starting at or before t is the deepest candidate; climb while it ended.
        while i >= 0 and self.end_ns[i] <= t_ns:
            i = int(self.parent[i])
        return i

    # ---- a branchscope run's own metadata ---------------------------------------------------
    @cached_property
    def run_info(self) -> RunInfo | None:
        """The `"branchscope"` object of a trace our runner wrote, typed; None for other traces."""
        return RunInfo.parse(self.metadata.get("branchscope"))

    # ---- flows ------------------------------------------------------------------------------
    @cached_property
    def flows(self) -> Flows:
        """Flow arrows, bound on first use (most views never draw arrows)."""
        if self._flow_binder is None:
            empty = np.zeros(0, dtype=np.int64)
            return Flows(cats=[], cat_id=np.zeros(0, dtype=np.int32), flow_id=empty, src=empty, dst=empty)
        return self._flow_binder(self)


def _int_column(values: list[int]) -> np.ndarray:
    """Python ints as int64, or as an object array where some do not fit int64."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array(values, dtype=object)


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
        s, e = start_ns[a:b], end[a:b]
        closed_before = np.searchsorted(np.sort(e), s, side="right")
        d = (np.arange(b - a, dtype=np.int64) - closed_before).astype(np.int32)
        if not _nests_properly(s, e, d):
            d = _stack_depth(s, e)
        depth[a:b] = d
    small = np.flatnonzero((counts >= 2) & (counts < BIG_LANE_EVENTS))
    if small.size:
        idx, seg, first = _segments(lane_offsets[small], counts[small])
        depth[idx] = _small_lanes_depth(start_ns[idx], end[idx], seg, first)
    return depth


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


@cache
def _args_of_event() -> Any:
    """A decoder of an event's text that reads only its `args` (msgspec is imported on first use)."""
    import msgspec

    class _ArgsOf(msgspec.Struct):
        args: Any = None

    return msgspec.json.Decoder(_ArgsOf)


def build_trace(
    *,
    path: str,
    start_ns: np.ndarray,
    dur_ns: np.ndarray,
    lane: np.ndarray,
    name_id: np.ndarray,
    cat_id: np.ndarray,
    names: list[str],
    cats: list[str],
    lanes: Sequence[Lane],
    memory: list[MemorySeries] | None = None,
    counters: list[CounterTrack] | None = None,
    metadata: dict[str, Any] | None = None,
    raw_args: list[Any] | None = None,
    flow_binder: Callable[[Trace], Flows] | None = None,
) -> Trace:
    """Sort events into lane order, compute nesting depth, and assemble a `Trace`.

    Used by the reader and by anything that synthesises traces (benchmarks, tests).
    `lanes[i].index` must equal i; `lane` holds indices into `lanes`.
    """
    start_ns = np.asarray(start_ns, dtype=np.int64)
    dur_ns = np.maximum(np.asarray(dur_ns, dtype=np.int64), 0)
    lane = np.asarray(lane, dtype=np.int32)
    order = compute_lane_order(lane, start_ns, dur_ns)
    start_ns, dur_ns, lane = start_ns[order], dur_ns[order], lane[order]
    name_id = np.asarray(name_id, dtype=np.int32)[order]
    cat_id = np.asarray(cat_id, dtype=np.int32)[order]
    if raw_args is not None:
        raw_args = list(map(raw_args.__getitem__, order.tolist()))
    counts = np.bincount(lane, minlength=len(lanes)) if lane.size else np.zeros(len(lanes), dtype=np.int64)
    lane_offsets = np.zeros(len(lanes) + 1, dtype=np.int64)
    np.cumsum(counts, out=lane_offsets[1:])
    depth = compute_depth(start_ns, dur_ns, lane_offsets)
    return Trace(
        path=path,
        start_ns=start_ns,
        dur_ns=dur_ns,
        lane=lane,
        depth=depth,
        name_id=name_id,
        cat_id=cat_id,
        names=names,
        cats=cats,
        lanes=lanes,
        lane_offsets=lane_offsets,
        memory=memory or [],
        counters=counters or [],
        metadata=metadata or {},
        _raw_args=raw_args,
        _flow_binder=flow_binder,
    )
