"""Write a `Trace` as a Perfetto protobuf trace (`write_perfetto`), which Perfetto's UI draws right
where the JSON format cannot: events that overlap without nesting on one thread (kernels, async
ops) go on tracks of their own ("<lane> · 2", children of the lane's track), as kineto's Perfetto
export does. What is written, packet by packet (what `perfetto`, the reader, reads back):

- one sequence; the first packet clears its incremental state and interns every event name and
  category; debug-annotation names are interned as they first appear;
- a process track per pid ("rank R", `process_labels` "GPU N"), a thread track per lane (GPU
  streams too: pid, stream id, "stream N"), overflow tracks under their lane's track;
- each event a TYPE_SLICE_BEGIN / TYPE_SLICE_END pair, timestamps exact in ns (the trace's own
  clock), its args as debug annotations, its arrows as `flow_ids` / `terminating_flow_ids` (the
  arrows' categories, which Perfetto's flows lack, as the annotation "branchscope.flow_categories"
  {flow id: category} of the slice starting them);
- `[memory]` events as instants with kineto's args on their thread's track, beside a counter
  track of the bytes allocated per device for Perfetto's UI; counters (CPU samples) as counter
  tracks; the inter-op pool's busy threads as a counter track (category `branchscope.derived`,
  like the memory totals: made for the UI, not read back as counters);
- the trace's metadata ("branchscope" RunInfo, distributedInfo, deviceProperties, ...) as one
  instant "branchscope.metadata" whose "json" annotation holds it as JSON.

The few packets that describe (tracks, interned tables) are built with the `perfetto` package's
compiled protos; the millions of event packets are encoded here (a varint writer and constant
tags), since building a message object per event would take minutes on a large trace.
"""

from __future__ import annotations

import importlib
import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.export_common import (
    MEMORY_CATEGORY,
    MEMORY_NAME,
    ExportLanes,
    args_text_at,
    export_lanes,
    items,
    memory_args,
)
from branchscope.profiling.trace.labels import branch_name
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.profiling.trace.perfetto_overlap import overflow_tracks

#: Category of the counters made for Perfetto's UI (memory totals, pool occupancy): not the trace's.
DERIVED_CATEGORY = "branchscope.derived"
#: The annotation added on a branch's label: {branch, region, mode}, named as the run facts' key.
ADDED_ARG = kineto.RUN_FACTS.name
#: The metadata event's name, its track's name and its one annotation's name (the reader's contract).
METADATA_EVENT, METADATA_TRACK, METADATA_ARG = (
    kineto.PERFETTO_METADATA_EVENT.name, kineto.RUN_FACTS.name, kineto.PERFETTO_METADATA_ARG.name
)
#: The annotation of a slice that starts arrows: their categories, {flow id: category}.
FLOW_CATEGORIES = kineto.PERFETTO_FLOW_CATEGORIES.name
#: Annotations of scalar values remembered at most (unique ids would grow it without end).
_SEEN_MAX = 1 << 14
#: An event's args, each value kept as its JSON text.
_RAW_ARGS = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: Packets joined per write.
_CHUNK = 1 << 14
#: BEGIN / END records encoded per step: their varints and columns made for a slice of the order at
#: a time, so memory does not grow by Python objects per event.
_SLICE = 1 << 16

_MASK64 = (1 << 64) - 1
_SEQ = b"\x50\x01"  # trusted_packet_sequence_id = 1
_NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN, _END, _INSTANT, _COUNTER = b"\x48\x01", b"\x48\x02", b"\x48\x03", b"\x48\x04"  # TrackEvent.type
_FLOW_ID, _TERMINATING_FLOW_ID = b"\xf9\x02", b"\x81\x03"  # TrackEvent fields 47 and 48, fixed64
_DOUBLE_COUNTER = b"\xe1\x02"  # TrackEvent.double_counter_value (44), fixed64
_pack_double, _pack_u64 = struct.Struct("<d").pack, struct.Struct("<Q").pack


def _varint_of(v: int) -> bytes:
    """A protobuf varint (a negative int as its 64-bit two's complement)."""
    v &= _MASK64
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


#: The varints of 0 .. 2**14 - 1 (lengths, iids, track uuids: nearly every varint written).
_SMALL = [_varint_of(v) for v in range(1 << 14)]


def _varint(v: int) -> bytes:
    return _SMALL[v] if 0 <= v < 1 << 14 else _varint_of(v)


def _varints(values: np.ndarray) -> list[bytes]:
    """The varints of many non-negative int64s at once (timestamps), by numpy: one slice each."""
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    groups = np.stack([(v >> np.uint64(7 * k)) & np.uint64(0x7F) for k in range(10)], axis=1).astype(np.uint8)
    length = np.ones(v.size, dtype=np.int64)
    for k in range(1, 10):
        length += v >= np.uint64(1 << (7 * k))
    groups |= (np.arange(10) < (length - 1)[:, None]).astype(np.uint8) << 7
    raw = groups.tobytes()
    return [raw[at : at + n] for at, n in zip(range(0, 10 * v.size, 10), length.tolist())]


def _varint_items(values: np.ndarray) -> Iterator[bytes]:
    """`_varints` of a column, made a slice at a time."""
    for lo in range(0, values.size, _SLICE):
        yield from _varints(values[lo : lo + _SLICE])


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return tag + _varint(len(payload)) + payload


def _packet(timestamp: int | bytes, track_event: bytes, extra: bytes = b"") -> bytes:
    """One TracePacket of a TrackEvent (its timestamp, or the timestamp's varint), framed as a
    field of `Trace` (packet = 1)."""
    ts = timestamp if isinstance(timestamp, bytes) else _varint(timestamp)
    body = b"\x40" + ts + _field(b"\x5a", track_event) + _SEQ + _NEEDS_STATE + extra
    return _field(b"\x0a", body)


# ------------------------------------------------------------------------ debug annotations


def _value(v: Any) -> bytes:
    """A DebugAnnotation's value fields for a JSON value (see docs/formats.md)."""
    if v is True or v is False:
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        if -(1 << 63) <= v < 1 << 63:
            return b"\x20" + _varint(v)
        return b"\x18" + _varint(v) if 0 <= v <= _MASK64 else _field(b"\x4a", str(v).encode())
    if isinstance(v, float):
        return b"\x29" + _pack_double(v)
    if isinstance(v, str):
        return _field(b"\x32", v.encode())
    if isinstance(v, list) and v:
        return b"".join(_field(b"\x62", _value(x)) for x in v)
    if isinstance(v, dict) and v:
        return b"".join(_field(b"\x5a", _field(b"\x52", str(k).encode()) + _value(x)) for k, x in v.items())
    return _field(b"\x4a", msgspec.json.encode(v))  # null, [] and {}: as JSON text


@dataclass
class _Annotations:
    """Encodes an event's args as `debug_annotations`, interning their names on first use."""

    iids: dict[str, bytes] = field(default_factory=dict)
    pending: list[bytes] = field(default_factory=list)
    #: Encoded annotations of scalar values, by (name, type, value): most repeat (device, stream...).
    seen: dict[tuple[str, type, Any], bytes] = field(default_factory=dict)

    def encode(self, args: dict[str, Any]) -> bytes:
        return b"".join(map(self._one, args.items()))

    def encode_text(self, text: bytes) -> bytes:
        """`encode` of args given as JSON text, each value looked up by its text before it is
        decoded: a trace's args repeat (shapes, dtypes, devices) but for their ids."""
        seen, out = self.seen, []
        for key, raw in _RAW_ARGS.decode(text).items():
            value_text = bytes(raw)
            known = seen.get((key, bytes, value_text))
            if known is None:
                if len(seen) >= _SEEN_MAX:
                    seen.clear()
                known = seen[(key, bytes, value_text)] = _field(b"\x22", self._name(key) + _value(msgspec.json.decode(value_text)))
            out.append(known)
        return b"".join(out)

    def _one(self, item: tuple[str, Any]) -> bytes:
        key, value = item
        kind = type(value)
        if kind is list or kind is dict or kind is float:  # floats: 0.0 == -0.0 would share one
            return _field(b"\x22", self._name(key) + _value(value))
        known = self.seen.get((key, kind, value))
        if known is None:
            if len(self.seen) >= _SEEN_MAX:
                self.seen.clear()
            known = self.seen[(key, kind, value)] = _field(b"\x22", self._name(key) + _value(value))
        return known

    def _name(self, key: str) -> bytes:
        iid = self.iids.get(key)
        if iid is None:
            iid = self.iids[key] = b"\x08" + _varint(len(self.iids) + 1)
            self.pending.append(_field(b"\x1a", iid + _field(b"\x12", key.encode())))  # debug_annotation_names
        return iid

    def take_interned(self) -> bytes:
        """The `interned_data` field for the names first used since the last call (b"" if none)."""
        if not self.pending:
            return b""
        data, self.pending = b"".join(self.pending), []
        return _field(b"\x62", data)


# ------------------------------------------------------------------------------- tracks


def write_perfetto(trace: Trace, out: IO[bytes]) -> None:
    """Writes `trace` as Perfetto protobuf to the binary stream `out` (see the module docstring)."""
    _check_times(trace)
    pb = importlib.import_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2")  # lazily: a large import

    lanes = export_lanes(trace)
    names = [*trace.names, MEMORY_NAME]
    cats = [*trace.cats, MEMORY_CATEGORY]
    out.write(_interned_tables(pb, names, cats))
    sub, depth, overflow = overflow_tracks(trace)
    tracks = _Descriptors(pb, lanes, *_ids_written(trace, lanes))
    lane_uuid = [tracks.thread(lanes.pid[i], lanes.tid[i], lanes.names.get(i), _lane_label(lanes, i)) for i in range(len(lanes))]
    sub_uuid = {key: tracks.child(lane_uuid[key[0]], f"{_lane_label(lanes, key[0])} · {key[1] + 1}") for key in overflow}
    memory = _MemoryTracks(trace, lanes, tracks)
    # A counter's (pid, tid) is its parent thread track's, a thread of no event's too (a sampled OpenMP worker).
    counters = [tracks.counter(tracks.thread(lanes.pid_of(c.pid), c.tid), c.name, c.key, c.cat) for c in trace.counters]
    has_pool = len(trace) > 0 and trace.lane_indices("cpu", "interop").size > 0
    pool = tracks.counter(None, "inter-op pool busy threads", "busy", DERIVED_CATEGORY, 2) if has_pool else None
    meta = tracks.child(None, METADATA_TRACK)
    out.write(b"".join(tracks.packets))  # every track is described before the events on it
    memory_iids = (b"\x50" + _varint(len(names)), b"\x18" + _varint(len(cats)))
    annotations = _Annotations()  # one table of names for the whole sequence
    packets = itertools.chain(
        [_metadata_packet(trace, meta)],
        _slice_packets(trace, names, sub, depth, lane_uuid, sub_uuid, annotations),
        _memory_packets(trace, memory, memory_iids, annotations),
        _counter_packets(trace, counters),
        _pool_packets(trace, pool),
    )
    for chunk in _chunks(packets):
        out.write(chunk)


def _check_times(trace: Trace) -> None:
    """Refuses (one line) a trace with a time before 0 (an event's, an allocation's or a counter's):
    Perfetto's timestamps are unsigned. Its JSON export keeps such times; shifting every time
    instead would make the export disagree with every other view of the trace."""
    firsts = [int(trace.start_ns.min())] if len(trace) else []
    firsts += [int(m.ts_ns.min()) for m in trace.memory if m.ts_ns.size]
    firsts += [int(c.ts_ns.min()) for c in trace.counters if c.ts_ns.size]
    if firsts and min(firsts) < 0:
        raise TraceFormatError(
            f"{trace.path}: times before 0 (at {min(firsts)} ns) cannot be written as Perfetto timestamps: "
            "export it as .json or .json.gz"
        )


def _ids_written(trace: Trace, lanes: ExportLanes) -> tuple[set[int], set[int]]:
    """Every pid and every tid the export writes (lanes', allocator events', counters')."""
    pids, tids = set(lanes.pid), set(lanes.tid)
    for m in trace.memory:
        pids.update(lanes.pid_of(p, m.rank) for p in np.unique(m.pid).tolist())
        tids.update(np.unique(m.tid).tolist())
    pids.update(lanes.pid_of(c.pid) for c in trace.counters)
    tids.update(c.tid for c in trace.counters)
    return pids, tids


def _lane_label(lanes: ExportLanes, i: int) -> str:
    if i in lanes.names:
        return lanes.names[i]
    return f"stream {lanes.tid[i]}" if lanes.gpu[i] else f"thread {lanes.tid[i]}"


def _chunks(packets: Iterator[bytes]) -> Iterator[bytes]:
    batch: list[bytes] = []
    for p in packets:
        batch.append(p)
        if len(batch) >= _CHUNK:
            yield b"".join(batch)
            batch = []
    if batch:
        yield b"".join(batch)


def _interned_tables(pb: Any, names: list[str], cats: list[str]) -> bytes:
    """The first packet: incremental state cleared, every event name and category interned."""
    p = pb.TracePacket(trusted_packet_sequence_id=1, first_packet_on_sequence=True)
    p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    p.interned_data.event_names.extend(pb.EventName(iid=k + 1, name=n) for k, n in enumerate(names))
    p.interned_data.event_categories.extend(pb.EventCategory(iid=k + 1, name=c) for k, c in enumerate(cats))
    return _field(b"\x0a", p.SerializeToString())


class _Int32Ids:
    """Perfetto's pids and tids are int32: a value that fits is written as it is, any other (a
    64-bit thread id) as a fresh one, from the top of int32 down, that no other value written uses
    (keeping its low 32 bits would put two threads on one track)."""

    def __init__(self, used: set[int]) -> None:
        self.used = {v for v in used if _fits_int32(v)}
        self.fresh: dict[int, int] = {}
        self._next = (1 << 31) - 1

    def of(self, v: int) -> int:
        if _fits_int32(v):
            return v
        if v not in self.fresh:
            while self._next in self.used:
                self._next -= 1
            self.fresh[v] = self._next
            self.used.add(self._next)
        return self.fresh[v]


def _fits_int32(v: int) -> bool:
    return -(1 << 31) <= v < 1 << 31


class _Descriptors:
    """The track descriptors (`packets`), each made when first asked for: all are, before the
    first event is written. A pid or tid beyond int32 is written as a fresh one (`_Int32Ids`),
    the real one kept in its process's or thread's name."""

    def __init__(self, pb: Any, lanes: ExportLanes, pids: set[int], tids: set[int]) -> None:
        self.pb, self.lanes = pb, lanes
        self.pids, self.tids = _Int32Ids(pids), _Int32Ids(tids)
        self.processes: dict[int, int] = {}
        self.threads: dict[tuple[int, int], int] = {}
        self.packets: list[bytes] = []

    def _add(self, desc: Any) -> int:
        desc.uuid = len(self.packets) + 1
        self.packets.append(_field(b"\x0a", self.pb.TracePacket(track_descriptor=desc, trusted_packet_sequence_id=1).SerializeToString()))
        return desc.uuid

    def process(self, pid: int) -> int:
        if pid not in self.processes:
            d = self.pb.TrackDescriptor()
            d.process.pid = self.pids.of(pid)
            name = self.lanes.process_names.get(pid)
            if not _fits_int32(pid):
                name = f"{name} (pid {pid})" if name else f"pid {pid}"
            if name:
                d.process.process_name = name
            if pid in self.lanes.process_labels:
                d.process.process_labels.append(self.lanes.process_labels[pid])
            self.processes[pid] = self._add(d)
        return self.processes[pid]

    def thread(self, pid: int, tid: int, name: str | None = None, label: str | None = None) -> int:
        """The thread track of (pid, tid): named `name` when it has one of its own; a tid beyond
        int32 is named even so (`label`, else "thread TID"), so its real tid is still read."""
        if (pid, tid) not in self.threads:
            d = self.pb.TrackDescriptor(parent_uuid=self.process(pid))
            d.thread.pid, d.thread.tid = self.pids.of(pid), self.tids.of(tid)
            if not name and not _fits_int32(tid):
                name = label or f"thread {tid}"
            if name:
                d.thread.thread_name = name
            self.threads[(pid, tid)] = self._add(d)
        return self.threads[(pid, tid)]

    def child(self, parent: int | None, name: str) -> int:
        d = self.pb.TrackDescriptor(name=name)
        if parent is not None:
            d.parent_uuid = parent
        return self._add(d)

    def counter(self, parent: int | None, name: str, key: str, cat: str, unit: int = 0) -> int:
        d = self.pb.TrackDescriptor(name=name, description=key)
        if parent is not None:
            d.parent_uuid = parent
        d.counter.categories.append(cat)
        if unit:
            d.counter.unit = unit
        return self._add(d)


def _slice_packets(
    trace: Trace,
    names: list[str],
    sub: np.ndarray,
    depth: np.ndarray,
    lane_uuid: list[int],
    sub_uuid: dict[tuple[int, int], int],
    annotations: _Annotations,
) -> Iterator[bytes]:
    """Each event's BEGIN and END packets, in time order: at one time, ends before begins, inner
    ends first, outer begins first, an event of no length begun and ended together."""
    n = len(trace)
    if n == 0:
        return
    start, end = trace.start_ns, trace.end_ns
    track = np.array(lane_uuid, dtype=np.int64)[trace.lane]
    over = np.flatnonzero(sub > 0)
    track[over] = [sub_uuid[key] for key in zip(trace.lane[over].tolist(), sub[over].tolist())]
    track_b = [b"\x58" + _varint(u) for u in range(int(track.max()) + 1)]
    name_b = [b"\x50" + _varint(k + 1) for k in range(len(names))]
    cat_b = [b"\x18" + _varint(k + 1) if c else b"" for k, c in enumerate(trace.cats)]
    flows = _FlowFields(trace)
    branch_of = _branch_args(trace)
    args_of = args_text_at(trace)
    order = _packet_order(start, end, trace.dur_ns, depth)
    for lo in range(0, order.size, _SLICE):
        records = order[lo : lo + _SLICE]
        ends = records >= n
        event = np.where(ends, records - n, records)
        ts = _varints(np.where(ends, end[event], start[event]))
        columns = zip(ends.tolist(), event.tolist(), ts, track[event].tolist(), trace.name_id[event].tolist())
        cat_ids = trace.cat_id[event].tolist()
        flow_at = flows.spans(event)
        for k, (is_end, r, t, tr, name) in enumerate(columns):
            if is_end:
                yield _packet(t, _END + track_b[tr])
                continue
            a = args_of(r)
            te = _BEGIN + track_b[tr] + name_b[name] + cat_b[cat_ids[k]]
            if a and a != b"{}":
                te += annotations.encode_text(a)
            if name in branch_of and not _has_arg(a, ADDED_ARG):  # an export's export has it already
                te += annotations.encode(branch_of[name])
            span = flow_at[k]
            if span is not None:
                te += flows.fields(*span, annotations)
            yield _packet(t, te, annotations.take_interned())


def _has_arg(args_text: bytes, key: str) -> bool:
    return bool(args_text) and key in _RAW_ARGS.decode(args_text)


def _branch_args(trace: Trace) -> dict[int, dict[str, Any]]:
    """Per name id of a branch's label ("branch: NAME"), the annotation a Perfetto user filters
    by: "branchscope" {branch, region, mode} (region and mode from the run's RunInfo, if any)."""
    info = trace.run_info
    regions = {b.name: b.region for b in info.branches} if info is not None else {}
    out = {}
    for k, label in enumerate(trace.names):
        name = branch_name(label)
        if name is not None:
            facts = {"branch": name, "region": regions.get(name), "mode": info.mode if info is not None else None}
            out[k] = {ADDED_ARG: {key: v for key, v in facts.items() if v is not None}}
    return out


def _packet_order(start: np.ndarray, end: np.ndarray, dur: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The order of the 2n records (begins 0..n-1, ends n..2n-1): by time; at one time the ends of
    events with a length first (deepest first), then begins (outermost first), each event of no
    length ended right after it begins."""
    n = start.size
    zero = dur == 0
    group = np.concatenate([np.ones(n, dtype=np.int8), np.where(zero, 1, 0).astype(np.int8)])
    depth = depth.astype(np.int32)
    rank = np.concatenate([2 * depth, np.where(zero, 2 * depth + 1, -depth)])
    # lexsort is stable: records equal in every key stay in event order (begins, then ends)
    return np.lexsort((rank, group, np.concatenate([start, end])))


class _FlowFields:
    """Each event's `flow_ids` (the arrows it starts) and `terminating_flow_ids` (those it ends),
    arrow k's id k + 1, and the categories of the arrows it starts (`FLOW_CATEGORIES`): the arrows'
    ends as columns sorted by event, each event's fields made when it is written (a dict of every
    end's bytes took ~100 B per arrow end)."""

    def __init__(self, trace: Trace) -> None:
        flows = trace.flows
        bound = np.flatnonzero((flows.src >= 0) & (flows.dst >= 0))
        events = np.concatenate([flows.src[bound], flows.dst[bound]]).astype(np.int64)
        order = np.argsort(events, kind="stable")  # an event's starts, then its ends, each by id
        self.events = events[order]
        self.ids = np.concatenate([bound, bound])[order] + 1
        self.ending = order >= bound.size
        self.cat_id = np.concatenate([flows.cat_id[bound], flows.cat_id[bound]])[order]
        self.cats = flows.cats

    def spans(self, events: np.ndarray) -> list[tuple[int, int] | None]:
        """Per event of `events`, the range of its arrow ends (None for an event of none)."""
        lo = np.searchsorted(self.events, events, "left").tolist()
        hi = np.searchsorted(self.events, events, "right").tolist()
        return [(a, b) if a < b else None for a, b in zip(lo, hi)]

    def fields(self, lo: int, hi: int, annotations: _Annotations) -> bytes:
        """The flow fields of arrow ends lo..hi-1 (one event's), and the categories of those it starts."""
        ids, ending = self.ids[lo:hi].tolist(), self.ending[lo:hi].tolist()
        out = b"".join((_TERMINATING_FLOW_ID if e else _FLOW_ID) + _pack_u64(i) for i, e in zip(ids, ending))
        cats = {str(i): self.cats[c] for i, e, c in zip(ids, ending, self.cat_id[lo:hi].tolist()) if not e}
        return out + annotations.encode({FLOW_CATEGORIES: cats}) if cats else out


class _MemoryTracks:
    """Per memory series: each event's thread track, and the track of the device's total."""

    def __init__(self, trace: Trace, lanes: ExportLanes, tracks: _Descriptors) -> None:
        self.threads: list[np.ndarray] = []
        self.totals: list[int] = []
        for series in trace.memory:
            pairs, which = np.unique(np.stack([series.pid, series.tid], axis=1), axis=0, return_inverse=True)
            uuids = [tracks.thread(lanes.pid_of(p, series.rank), t) for p, t in pairs.tolist()]
            self.threads.append(np.array(uuids, dtype=np.int64)[which.ravel()])
            known = np.flatnonzero(series.pid != -1)
            first_pid = lanes.pid_of(int(series.pid[known[0]]), series.rank) if known.size else None
            parent = None if first_pid is None else tracks.process(first_pid)
            self.totals.append(tracks.counter(parent, f"memory {series.device}", kineto.TOTAL_ALLOCATED.name, DERIVED_CATEGORY, 3))


def _memory_packets(
    trace: Trace, memory: _MemoryTracks, iids: tuple[bytes, bytes], annotations: _Annotations
) -> Iterator[bytes]:
    """Each allocator event as a "[memory]" instant on its thread's track, and the device's bytes
    allocated then on its (derived) counter track."""
    name_b, cat_b = iids
    for series, threads, total in zip(trace.memory, memory.threads, memory.totals):
        total_b = b"\x58" + _varint(total)
        points = zip(_varint_items(series.ts_ns), items(threads), memory_args(series), items(series.total_bytes))
        for t, thread, args, value in points:
            te = _INSTANT + b"\x58" + _varint(thread) + name_b + cat_b + annotations.encode(args)
            yield _packet(t, te, annotations.take_interned())
            yield _packet(t, _COUNTER + total_b + _DOUBLE_COUNTER + _pack_double(float(value)))


def _counter_packets(trace: Trace, uuids: list[int]) -> Iterator[bytes]:
    """The trace's counters (CPU samples, ...) on their tracks."""
    for c, uuid in zip(trace.counters, uuids):
        track = b"\x58" + _varint(uuid)
        for t, v in zip(_varint_items(c.ts_ns), items(c.values)):
            yield _packet(t, _COUNTER + track + _DOUBLE_COUNTER + _pack_double(v))


def _pool_packets(trace: Trace, uuid: int | None) -> Iterator[bytes]:
    """How many inter-op pool threads compute, at each change (`analyses.interop_occupancy`)."""
    from branchscope.profiling.trace.analyses import interop_occupancy

    if uuid is None:
        return
    pool = interop_occupancy(trace)
    track = b"\x58" + _varint(uuid)
    for t, v in zip(pool.t_ns.tolist(), pool.value.tolist()):
        if t >= 0:
            yield _packet(int(t), _COUNTER + track + _DOUBLE_COUNTER + _pack_double(float(v)))


def _metadata_packet(trace: Trace, uuid: int) -> bytes:
    """The trace's metadata as the reader takes it: one instant on a track of its own."""
    note = _field(b"\x22", _field(b"\x52", METADATA_ARG.encode()) + _value(msgspec.json.encode(trace.metadata).decode()))
    te = _INSTANT + b"\x58" + _varint(uuid) + _field(b"\xba\x01", METADATA_EVENT.encode()) + note
    return _packet(int(trace.start_ns.min()) if len(trace) else 0, te)
