"""A Perfetto trace's TrackEvents as the columns the JSON reader makes: complete events, memory
events, counters, flow endpoints and the trace's metadata, with numpy over a batch of events at once
(`EventReader`, fed by `perfetto_state.read_packets`), keeping per event only what they need.

- TYPE_SLICE_BEGIN and TYPE_SLICE_END pair per track, as a stack would (`pairs`); a begin never
  ended lasts to the trace's last timestamp, an end with nothing open is dropped. A `legacy_event`
  of phase 'X' with `duration_us` is a complete event; phases 'B', 'E', 'I' are begin, end, instant.
- A name is `name` or the interned `name_iid`; a category the `categories` or interned
  `category_iids` (several joined with ","), each looked up by (generation, iid) (`perfetto_state`).
- Instants named "[memory]" are memory events (their debug annotations are the JSON's args);
  the instant "branchscope.metadata" on the "branchscope" track holds the trace's metadata as the
  JSON text of its debug annotation "json"; other instants are dropped, as the JSON reader drops
  "i" events.
- TYPE_COUNTER events on counter tracks (`counter_value`, `double_counter_value`, the
  `extra_*counter*` ones) are counter tracks' points.
- `flow_ids` and `terminating_flow_ids` (and their `_old` forms): per id, its first slice is the
  flow's start and its last (or a terminating one) its end, bound as JSON's "s" and "f" (bp "e").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from branchscope.profiling.trace.decode import _Interner
from branchscope.profiling.trace.perfetto_state import Packets, _per_generation, interned_ids
from branchscope.profiling.trace.perfetto_wire import FIXED64, LEN, VARINT, Scanned, Want, offsets, scan

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
_TYPE, _UUID, _NAME_IID, _NAME, _CAT_IIDS, _CATS = 9, 11, 10, 23, 3, 22
_COUNT, _DOUBLE_COUNT, _FLOWS, _ENDING, _FLOWS_OLD, _ENDING_OLD = 30, 44, 47, 48, 36, 42
_ANNOTATIONS, _LEGACY, _EXTRA, _EXTRA_DOUBLE = 4, 6, 31, 45
EVENT_FIELDS = (
    Want(_TYPE, VARINT, dtype="u1"), Want(_UUID, VARINT), Want(_NAME_IID, VARINT), Want(_NAME, LEN, sparse=True),
    Want(_CAT_IIDS, VARINT, True), Want(_CATS, LEN, True), Want(_COUNT, VARINT, sparse=True),
    Want(_DOUBLE_COUNT, FIXED64, sparse=True),
    Want(_FLOWS, FIXED64, True), Want(_ENDING, FIXED64, True), Want(_FLOWS_OLD, VARINT, True),
    Want(_ENDING_OLD, VARINT, True), Want(_ANNOTATIONS, LEN, presence=True), Want(_LEGACY, LEN, presence=True),
    Want(_EXTRA, VARINT, presence=True), Want(_EXTRA_DOUBLE, VARINT, presence=True),
)  # fmt: skip
_LEGACY_TYPE = {ord("B"): BEGIN, ord("E"): END, ord("I"): INSTANT, ord("i"): INSTANT, ord("n"): INSTANT}
_COMPLETE_PHASE = ord("X")


@dataclass
class Events:
    """The TrackEvents a trace's `Trace` is made of (slices' begins and ends, legacy complete events,
    the instants asked for), one row each in file order, with what the reader reads of them; the
    rest (counters, flows, legacy durations) as short lists of their own."""

    packets: Packets
    row: np.ndarray  # int32: the packet of each event
    start: np.ndarray  # where each TrackEvent's bytes begin in the file (`perfetto_wire.offsets`)
    size: np.ndarray  # int32: and how many they are
    kind: np.ndarray  # int8: BEGIN, END, INSTANT (a legacy complete event: INSTANT)
    track: np.ndarray  # int32: the track, into `track_uuids`
    track_uuids: np.ndarray  # uint64, ascending
    name: np.ndarray  # int32: into `names` ("" first, for none)
    cat: np.ndarray  # int32: into `cats` (several categories of an event joined with ",")
    names: list[str]
    cats: list[str]
    legacy: tuple[np.ndarray, np.ndarray]  # (event, duration ns) of legacy 'X' events
    flows: tuple[np.ndarray, np.ndarray, np.ndarray]  # (event, flow id, terminating), in event order
    counters: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # (packet, track uuid, value, cat)

    def uuids(self, rows: np.ndarray) -> np.ndarray:
        """The track uuid of events `rows`."""
        return self.track_uuids[self.track[rows]]

    @property
    def gen(self) -> np.ndarray:
        return self.packets.gen[self.row]

    @property
    def ts(self) -> np.ndarray:
        return self.packets.ts[self.row]

    def end_of(self, rows: np.ndarray) -> np.ndarray:
        """Where the TrackEvents `rows`' bytes end (int64)."""
        return self.start[rows].astype(np.int64) + self.size[rows]


class EventReader:
    """Reads a trace's TrackEvents batch by batch as `read_packets` finds them (`add`), keeping of
    each only what `Events` holds: the per-batch columns of every field are dropped at once."""

    def __init__(self, instants: set[str]) -> None:
        #: the names of the instants kept (the others are dropped, as the JSON reader drops "i" events)
        self.instants = instants
        self.packets: Packets | None = None
        self.names, self.cats = _Interner(), _Interner()
        self.names.ids([""])
        self.cats.ids([""])
        self.n = 0
        self.tracks: dict[int, int] = {}  # uuid -> track id, in the order met
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _PARTS}

    def add(self, packets: Packets, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """The TrackEvents of packets `rows`, at bytes [start, end)."""
        self.packets = packets
        s = scan(packets.buf, start, end, EVENT_FIELDS)
        kind = s.value.pop(_TYPE).astype(np.int8)
        kind[(kind < BEGIN) | (kind > COUNTER)] = 0
        gen = packets.gen[rows]
        uuid = s.value.pop(_UUID)
        no_uuid = np.flatnonzero(~s.has.pop(_UUID))
        uuid[no_uuid] = _per_generation(gen[no_uuid], packets.default_track, 0).astype(np.uint64)
        dur = _read_legacy(packets.data, start, end, s, kind)
        cat = _texts(self.cats, s, packets, gen, "cat", _CATS, _CAT_IIDS)
        self._counters(packets, s, rows, start, end, kind, uuid, cat)
        name = _texts(self.names, s, packets, gen, "name", _NAME, _NAME_IID)
        wanted = np.isin(name, self.names.ids(sorted(self.instants))) if self.instants else np.zeros(kind.size, bool)
        keep = np.flatnonzero((kind == BEGIN) | (kind == END) | ((kind == INSTANT) & (wanted | (dur >= 0))))
        index = np.full(kind.size, -1, np.int64)
        index[keep] = self.n + np.arange(keep.size)
        legacy = np.flatnonzero(dur[keep] >= 0)
        flow_msg, flow_id, ending = _flow_ids(s)
        flow_event = index[flow_msg]
        on = flow_event >= 0
        for key, column in (
            ("row", rows[keep].astype(np.int32)), ("start", start[keep].astype(offsets(packets.buf.size))), ("size", (end - start)[keep].astype(np.int32)),
            ("kind", kind[keep]), ("track", self._track_ids(uuid[keep])), ("name", name[keep]), ("cat", cat[keep]),
            ("legacy_at", legacy + self.n), ("legacy_dur", dur[keep][legacy]),
            ("flow_event", flow_event[on]), ("flow_id", flow_id[on]), ("flow_ending", ending[on]),
        ):  # fmt: skip
            self.parts[key].append(column)
        self.n += keep.size

    def _track_ids(self, uuid: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(uuid, return_inverse=True)
        ids = np.array([self.tracks.setdefault(u, len(self.tracks)) for u in unique.tolist()], np.int32)
        return ids[inverse.reshape(-1)] if unique.size else np.zeros(0, np.int32)

    def _counters(self, packets: Packets, s: Scanned, rows: np.ndarray, start: np.ndarray, end: np.ndarray, kind: np.ndarray, uuid: np.ndarray, cat: np.ndarray) -> None:
        """Counter points: the TYPE_COUNTER events' and the `extra_*` ones'."""
        at = np.flatnonzero(kind == COUNTER)
        has_double, double = s.at(_DOUBLE_COUNT, at)
        value = np.where(has_double, double.view(np.float64), s.at(_COUNT, at)[1].view(np.int64).astype(np.float64))
        extra_at, extra_uuid, extra_value = _extra_counters(packets.data, start, end, s)
        at = np.concatenate([at, extra_at])
        for key, column in (
            ("counter_row", rows[at].astype(np.int32)), ("counter_uuid", np.concatenate([uuid[at[: at.size - extra_at.size]], extra_uuid])),
            ("counter_value", np.concatenate([value, extra_value])), ("counter_cat", cat[at]),
        ):  # fmt: skip
            self.parts[key].append(column)

    def events(self) -> Events:
        """What was read, as `Events` (the batches' columns joined)."""
        assert self.packets is not None
        c = {}
        for k in _PARTS:  # one column at a time, its batches freed once joined
            batches = self.parts.pop(k)
            c[k] = np.concatenate(batches) if batches else np.zeros(0, _PARTS[k])
            del batches
        uuids = np.array(list(self.tracks), np.uint64)
        by_uuid = np.argsort(uuids)  # track ids in the order of their uuids (as `pairs` groups them)
        rank = np.empty(uuids.size, np.int32)
        rank[by_uuid] = np.arange(uuids.size, dtype=np.int32)
        return Events(
            self.packets, c["row"], c["start"], c["size"], c["kind"], rank[c["track"]], uuids[by_uuid], c["name"], c["cat"],
            list(self.names.table), list(self.cats.table), (c["legacy_at"], c["legacy_dur"]),
            (c["flow_event"], c["flow_id"], c["flow_ending"]),
            (c["counter_row"], c["counter_uuid"], c["counter_value"], c["counter_cat"]),
        )  # fmt: skip


#: The columns `EventReader` keeps, and their dtypes.
_PARTS = {
    "row": np.int32, "start": np.int64, "size": np.int32, "kind": np.int8, "track": np.int32, "name": np.int32,
    "cat": np.int32, "legacy_at": np.int64, "legacy_dur": np.int64, "flow_event": np.int64, "flow_id": np.uint64,
    "flow_ending": bool, "counter_row": np.int32, "counter_uuid": np.uint64, "counter_value": np.float64,
    "counter_cat": np.int32,
}  # fmt: skip


def _texts(table: _Interner, s: Scanned, packets: Packets, gen: np.ndarray, kind: str, number: int, iid_number: int) -> np.ndarray:
    """Each event's name (`kind` "name") or category ("cat") as an id in `table`: its text given
    inline or interned; several categories of an event are joined with ","."""
    out = np.zeros(s.n, np.int32)
    for at, ids in (_inline(table, s, packets.data, number), _interned(table, s, packets, gen, kind, iid_number)):
        out[at] = ids
    if kind == "cat" and _several(s, number, iid_number):
        _join(table, s, packets, gen, out, number, iid_number)
    return out


def _inline(table: _Interner, s: Scanned, data: bytes, number: int) -> tuple[np.ndarray, np.ndarray]:
    at, off, ln = s.items[number]  # categories (repeated) or a name (sparse)
    off = off.astype(np.int64)
    texts = [data[o:e].decode("utf-8", "replace") for o, e in zip(off.tolist(), (off + ln).tolist())]
    return at, table.ids(texts)


def _interned(table: _Interner, s: Scanned, packets: Packets, gen: np.ndarray, kind: str, number: int) -> tuple[np.ndarray, np.ndarray]:
    if number in s.items:
        msg, iid, _ = s.items[number]
    else:
        msg = np.flatnonzero(s.has[number])
        iid = s.value[number][msg]
    return msg, interned_ids(table, packets.interned, kind, gen[msg], iid)


def _several(s: Scanned, number: int, iid_number: int) -> bool:
    msg = np.concatenate([s.items[number][0], s.items[iid_number][0]])
    return bool(msg.size) and int(np.bincount(msg).max()) > 1


def _join(table: _Interner, s: Scanned, packets: Packets, gen: np.ndarray, out: np.ndarray, number: int, iid_number: int) -> None:
    """Events of several categories: theirs joined with "," in the order written (rare)."""
    parts: dict[int, list[str]] = {}
    for f, kind in ((number, None), (iid_number, "cat")):
        msg = s.items[f][0]
        ids = _inline(table, s, packets.data, f)[1] if kind is None else _interned(table, s, packets, gen, kind, f)[1]
        texts = list(table.table)
        for m, k in zip(msg.tolist(), ids.tolist()):
            parts.setdefault(m, []).append(texts[k])
    several = [m for m, p in parts.items() if len(p) > 1]
    out[several] = table.ids([",".join(parts[m]) for m in several])


def _read_legacy(data: bytes, start: np.ndarray, end: np.ndarray, s: Scanned, kind: np.ndarray) -> np.ndarray:
    """Events with a `legacy_event` (rare): their phase, and an 'X' event's duration (ns; -1 for
    any other event)."""
    from branchscope.profiling.trace.perfetto_schema import parse

    dur = np.full(kind.size, -1, np.int64)
    for k in np.flatnonzero(s.has[_LEGACY]).tolist():
        legacy = parse("TrackEvent", data[int(start[k]) : int(end[k])]).legacy_event
        if legacy.phase == _COMPLETE_PHASE:
            kind[k], dur[k] = INSTANT, max(legacy.duration_us, 0) * 1000
        elif kind[k] == 0:
            kind[k] = _LEGACY_TYPE.get(legacy.phase, 0)
    return dur


def pairs(ev: Events) -> tuple[np.ndarray, np.ndarray]:
    """The complete events: the event that begins each (its row in `ev`) and the one that ends it
    (-1: a legacy 'X' event, or a begin never ended). Per track, as a stack pairs them, in numpy
    (int32 columns where they fit, each freed once used: they are as long as the trace's slices)."""
    sel = np.flatnonzero((ev.kind == BEGIN) | (ev.kind == END)).astype(np.int32)
    order = sel[np.lexsort((ev.packets.ts[ev.row[sel]], ev.track[sel]))]  # stable: file order in a tie
    del sel
    n = order.size
    if not n:
        return _with_legacy(ev, order, order)
    u = ev.track[order]
    new_track = np.concatenate([[True], u[1:] != u[:-1]])
    del u
    group = np.cumsum(new_track, dtype=np.int32)
    first = np.flatnonzero(new_track)
    del new_track
    is_begin = ev.kind[order] == BEGIN
    step = np.where(is_begin, 1, -1).astype(np.int32)
    depth = np.cumsum(step, dtype=np.int32)
    depth -= np.repeat(depth[first] - step[first], np.diff(np.append(first, n)))
    del step
    # The lowest depth so far in its track (0 before any): an end that goes below it closes nothing.
    big = np.int64(4 * n + 4)
    low = group * big - depth
    np.maximum.accumulate(low, out=low)
    low -= group * big
    np.negative(low, out=low)
    low = np.minimum(low, 0).astype(np.int32)
    low_before = np.concatenate([[0], low[:-1]]).astype(np.int32)
    low_before[first] = 0
    del first
    kept = is_begin | (depth >= low_before)
    del low_before
    order, group, is_begin = order[kept], group[kept], is_begin[kept]
    depth = (depth - low)[kept]
    del low, kept
    depth += ~is_begin  # an end's level is one above the depth it leaves
    at = np.lexsort((depth, group))  # stable: time order within a (track, level)
    group, depth = group[at], depth[at]
    same = np.concatenate([(group[1:] == group[:-1]) & (depth[1:] == depth[:-1]), [False]])
    del group, depth
    o, b = order[at], is_begin[at]
    del order, is_begin, at
    closed = b & np.concatenate([~b[1:], [False]]) & same
    return _with_legacy(ev, o[b], np.where(closed[b], np.concatenate([o[1:], [-1]])[b], -1))


def _with_legacy(ev: Events, begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slices' (begin, end) and the legacy complete events after them (end -1)."""
    legacy = ev.legacy[0]
    return np.concatenate([begins, legacy]).astype(np.int64), np.concatenate([ends, np.full(legacy.size, -1)]).astype(np.int64)


def _flow_ids(s: Scanned) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every flow id on an event: (event, id, terminating), in event order."""
    fields = (_FLOWS, _FLOWS_OLD, _ENDING, _ENDING_OLD)
    msg = np.concatenate([s.items[f][0] for f in fields])
    ids = np.concatenate([s.items[f][1] for f in fields])
    ending = np.concatenate([np.full(s.items[f][0].size, f in (_ENDING, _ENDING_OLD)) for f in fields])
    order = np.argsort(msg, kind="stable")
    return msg[order], ids[order], ending[order]


def _extra_counters(data: bytes, start: np.ndarray, end: np.ndarray, s: Scanned) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `extra_*counter*` points of events (rare): (event, track uuid, value)."""
    from branchscope.profiling.trace.perfetto_schema import parse

    rows: list[int] = []
    uuids: list[int] = []
    values: list[float] = []
    for k in np.flatnonzero(s.has[_EXTRA] | s.has[_EXTRA_DOUBLE]).tolist():
        te = parse("TrackEvent", data[int(start[k]) : int(end[k])])
        for u_list, v_list in (
            (te.extra_counter_track_uuids, te.extra_counter_values),
            (te.extra_double_counter_track_uuids, te.extra_double_counter_values),
        ):
            for u, v in zip(u_list, v_list):
                rows.append(k)
                uuids.append(u)
                values.append(float(v))
    return np.array(rows, np.int64), np.array(uuids, np.uint64), np.array(values, np.float64)
