"""The in-memory model of one profiler trace: events as numpy columns grouped into lanes.

Everything branchscope draws or computes reads this model, never the JSON. Events are stored
column-wise (one numpy array per field) because a real trace holds millions of events and every
consumer (level-of-detail drawing, busy-time unions, occupancy) is a vectorised pass over them.
Names and categories are interned: an event stores an int id into `Trace.names` / `Trace.cats`.

Events are sorted by (lane, start, longest first), so the events of lane `i` are the contiguous
slice `lane_offsets[i]:lane_offsets[i + 1]` and, within a lane, a parent precedes its children.

A trace can hold a million lanes (a thread per event): the reader's lanes are a `LaneTable`, columns
that make a `Lane` only when asked for one (`lane_table`), and what is computed per lane (depth:
`depth`; busy time, computing runs) is computed for all lanes at once, never with a Python step
per lane. What the trace's JSON names and how (`metadata` keys, args) is `kineto`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.depth import compute_depth, compute_lane_order
from branchscope.profiling.trace.lane_table import (
    KIND_ORDER,
    ROLE_ORDER,
    Lane,
    LaneKind,
    LaneRole,
    LaneTable,
    _int_column,
)
from branchscope.profiling.trace.run_info import RunInfo


class TraceFormatError(ValueError):
    """A file that is not a readable torch.profiler / Chrome trace; the message names the file."""


class LoadCancelled(Exception):
    """A load stopped because its progress callback returned False (not an error in the file)."""


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
    """Arrows between events (`ac2g` CPU launch -> GPU kernel, `fwdbwd`); -1 where an end is unbound.
    An arrow comes from the trace's flow events or, where they give none, from a launch's and its
    kernel's correlation id (`from_correlation`; `correlation_flows`)."""

    cats: list[str]
    cat_id: np.ndarray  # int32
    flow_id: np.ndarray  # int64: the trace's flow id, interned (from a correlation: the id)
    src: np.ndarray  # int64 event index
    dst: np.ndarray  # int64 event index
    #: bool per arrow: made from correlation ids, not from flow events; all False if left out.
    from_correlation: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.from_correlation is None:
            object.__setattr__(self, "from_correlation", np.zeros(len(self.src), dtype=bool))

    @classmethod
    def empty(cls) -> Flows:
        """No arrows (a trace without flow events)."""
        none = np.zeros(0, dtype=np.int64)
        return cls(cats=[], cat_id=np.zeros(0, dtype=np.int32), flow_id=none, src=none, dst=none)

    def __len__(self) -> int:
        return len(self.src)


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
        return kineto.INPUT_DIMS.of(self.args)


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
    #: its args as a dict; None if absent. A sequence, not always a list: a Perfetto trace's
    #: (`perfetto_args.PerfettoArgs`) makes each text when asked for it.
    _raw_args: Sequence[Any] | None = None
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
        info = kineto.DISTRIBUTED_INFO.of(self.metadata)
        rank = kineto.RANK.of(info) if isinstance(info, dict) else None
        return rank if isinstance(rank, int) else None

    @property
    def base_time_ns(self) -> int | None:
        base = kineto.BASE_TIME.of(self.metadata)
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

    def _lane_column(self, attr: str, order: tuple[str, ...] | None = None) -> np.ndarray:
        """Each lane's `attr`: the reader's `LaneTable` holds it as a column; a list of lanes is
        read now, as int8 codes into `order` (-1: none of it) or, without one, as ints."""
        if isinstance(self.lanes, LaneTable):
            return getattr(self.lanes, attr)
        values = [getattr(ln, attr) for ln in self.lanes]
        if order is None:
            return _int_column(values)
        codes = {value: k for k, value in enumerate(order)}
        return np.array([codes.get(v, -1) for v in values], dtype=np.int8)

    @cached_property
    def lane_kind_codes(self) -> np.ndarray:
        """Each lane's kind as an int8 code into `KIND_ORDER` (0: cpu, 1: gpu)."""
        return self._lane_column("kind", KIND_ORDER)

    @cached_property
    def lane_pids(self) -> np.ndarray:
        """Each lane's pid (int64; an object array where some do not fit)."""
        return self._lane_column("pid")

    @cached_property
    def lane_tids(self) -> np.ndarray:
        """Each lane's tid (int64; an object array where some do not fit)."""
        return self._lane_column("tid")

    @cached_property
    def lane_rank_set(self) -> frozenset[int | None]:
        """The lanes' distinct ranks (None: a lane of no rank; a loaded trace's lanes have none)."""
        if isinstance(self.lanes, LaneTable):
            return frozenset({None}) if len(self.lanes) else frozenset()
        return frozenset(ln.rank for ln in self.lanes)

    @cached_property
    def lane_role_codes(self) -> np.ndarray:
        """Each lane's role as an int8 code into `ROLE_ORDER`."""
        return self._lane_column("role", ROLE_ORDER)

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
        return RunInfo.parse(kineto.RUN_FACTS.of(self.metadata))

    # ---- flows ------------------------------------------------------------------------------
    @cached_property
    def flows(self) -> Flows:
        """Flow arrows, bound on first use (most views never draw arrows)."""
        return Flows.empty() if self._flow_binder is None else self._flow_binder(self)


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
    raw_args: Sequence[Any] | None = None,
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
        # A lazy sequence (a Perfetto trace's args) reorders itself rather than being read whole.
        reordered = getattr(raw_args, "reordered", None)
        raw_args = reordered(order) if reordered is not None else list(map(raw_args.__getitem__, order.tolist()))
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
