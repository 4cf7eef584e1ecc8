"""The in-memory model of one profiler trace: events as numpy columns grouped into lanes.

Everything branchscope draws or computes reads this model, never the JSON. Events are stored
column-wise (one numpy array per field) because a real trace holds millions of events and every
consumer (level-of-detail drawing, busy-time unions, occupancy) is a vectorised pass over them.
Names and categories are interned: an event stores an int id into `Trace.names` / `Trace.cats`.

Events are sorted by (lane, start, longest first), so the events of lane `i` are the contiguous
slice `lane_offsets[i]:lane_offsets[i + 1]` and, within a lane, a parent precedes its children.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal

import numpy as np

from branchscope.profiling.trace.run_info import RunInfo

LaneKind = Literal["cpu", "gpu"]
#: What a lane's thread does: the main thread, an inter-op pool thread, an intra-op (OpenMP) worker,
#: an autograd engine thread, any other thread. GPU lanes are always "stream".
LaneRole = Literal["main", "interop", "intra", "autograd", "other", "stream"]

ROLE_ORDER: tuple[LaneRole, ...] = ("main", "interop", "intra", "autograd", "other", "stream")


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
    lanes: list[Lane]
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
        return int(self.lane_offsets[lane_index + 1] - self.lane_offsets[lane_index])

    def lanes_of(self, kind: LaneKind | None = None, role: LaneRole | None = None) -> list[Lane]:
        return [ln for ln in self.lanes if (kind is None or ln.kind == kind) and (role is None or ln.role == role)]

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


def compute_lane_order(lane: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Sort key order: by lane, then start, then longest first (so parents precede children)."""
    return np.lexsort((-dur_ns, start_ns, lane))


def _stack_depth(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Call-stack depth of one lane's start-sorted events, the way Perfetto assigns rows.

    An event goes one row below the latest-started event still open; events that ended are
    popped only from the top, so a child that outlives its parent by a rounding error keeps its
    parent's row below it and nothing overlaps on one row.
    """
    depth = np.zeros(start_ns.size, dtype=np.int32)
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(start_ns.tolist(), end_ns.tolist())):
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(e)
    return depth


def compute_depth(start_ns: np.ndarray, dur_ns: np.ndarray, lane_offsets: np.ndarray) -> np.ndarray:
    """Nesting depth of every event within its lane.

    Vectorised first: depth = how many earlier events of the lane are still open when an event
    starts, which is the call-stack depth when events nest properly. Real traces round times, so
    a child can end a little after its parent; there the count can put two overlapping events on
    one row. Such lanes (found by checking every event against the parent the count implies) are
    redone with an explicit stack. Zero-length events count as 1 ns long so that they never
    contain what starts right after them.
    """
    n = start_ns.size
    depth = np.zeros(n, dtype=np.int32)
    end = start_ns + np.maximum(dur_ns, 1)
    for i in range(lane_offsets.size - 1):
        a, b = int(lane_offsets[i]), int(lane_offsets[i + 1])
        if b - a < 2:
            continue
        s, e = start_ns[a:b], end[a:b]
        closed_before = np.searchsorted(np.sort(e), s, side="right")
        d = (np.arange(b - a, dtype=np.int64) - closed_before).astype(np.int32)
        if not _nests_properly(s, e, d):
            d = _stack_depth(s, e)
        depth[a:b] = d
    return depth


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
    lanes: list[Lane],
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
