"""A Perfetto trace's TrackEvents as the columns the JSON reader makes: complete events, memory
events, counters, flow endpoints and the trace's metadata, all with numpy over every event at once.

- TYPE_SLICE_BEGIN and TYPE_SLICE_END pair per track, as a stack would (`_pairs`); a begin never
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
from typing import Any

import numpy as np

from branchscope.profiling.trace.decode import _Interner
from branchscope.profiling.trace.perfetto_state import Packets, interned_ids
from branchscope.profiling.trace.perfetto_wire import FIXED64, LEN, VARINT, Scanned, Want, scan

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
    """Every TrackEvent of a trace (one row each, in file order) with what the reader reads of it."""

    packets: Packets
    row: np.ndarray  # the packet of each event
    start: np.ndarray  # int64: where each TrackEvent's bytes begin in the file
    end: np.ndarray
    s: Scanned  # EVENT_FIELDS
    kind: np.ndarray  # int8: BEGIN, END, INSTANT, COUNTER, 0 (none of them)
    uuid: np.ndarray  # uint64: the track
    ts: np.ndarray  # int64 ns
    legacy_dur: np.ndarray  # int64 ns of a legacy 'X' event, -1 for any other

    @property
    def gen(self) -> np.ndarray:
        return self.packets.gen[self.row]

    def texts(self, kind: str, number: int, iid_number: int) -> tuple[list[str], np.ndarray]:
        """Each event's name (`kind` "name") or category ("cat"): a table of texts ("" first, for
        none) and an id into it per event; several categories of an event are joined with ","."""
        table = _Interner()
        table.ids([""])
        out = np.zeros(self.row.size, np.int32)
        for at, ids in (self._inline(table, number), self._interned(table, kind, iid_number)):
            out[at] = ids
        if kind == "cat" and self._several(number, iid_number):
            self._join(table, out, number, iid_number)
        return list(table.table), out

    def _inline(self, table: _Interner, number: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.packets.data
        at, off, ln = self.s.items[number]  # categories (repeated) or a name (sparse)
        off = off.astype(np.int64)
        texts = [data[o:e].decode("utf-8", "replace") for o, e in zip(off.tolist(), (off + ln).tolist())]
        return at, table.ids(texts)

    def _interned(self, table: _Interner, kind: str, number: int) -> tuple[np.ndarray, np.ndarray]:
        if number in self.s.items:
            msg, iid, _ = self.s.items[number]
        else:
            msg = np.flatnonzero(self.s.has[number])
            iid = self.s.value[number][msg]
        return msg, interned_ids(table, self.packets.interned, kind, self.gen[msg], iid)

    def _several(self, number: int, iid_number: int) -> bool:
        msg = np.concatenate([self.s.items[number][0], self.s.items[iid_number][0]])
        return bool(msg.size) and int(np.bincount(msg).max()) > 1

    def _join(self, table: _Interner, out: np.ndarray, number: int, iid_number: int) -> None:
        """Events of several categories: theirs joined with "," in the order written (rare)."""
        texts = list(table.table)
        parts: dict[int, list[str]] = {}
        for f, kind in ((number, None), (iid_number, "cat")):
            msg, value, length = self.s.items[f]
            ids = self._inline(table, f)[1] if kind is None else self._interned(table, kind, f)[1]
            texts = list(table.table)
            for m, k in zip(msg.tolist(), ids.tolist()):
                parts.setdefault(m, []).append(texts[k])
        several = [m for m, p in parts.items() if len(p) > 1]
        out[several] = table.ids([",".join(parts[m]) for m in several])


def read_events(packets: Packets, default_track: np.ndarray) -> Events:
    """The trace's TrackEvents; `default_track`: each packet's default track uuid (0: none)."""
    row, start, end = packets.event_rows, packets.event_start, packets.event_end
    s = scan(packets.buf, start, end, EVENT_FIELDS)
    kind = s.value.pop(_TYPE).astype(np.int8)
    kind[(kind < BEGIN) | (kind > COUNTER)] = 0
    uuid = s.value.pop(_UUID)
    no_uuid = np.flatnonzero(~s.has.pop(_UUID))
    uuid[no_uuid] = default_track[row[no_uuid]].astype(np.uint64)
    del no_uuid
    legacy_dur = np.full(row.size, -1, np.int64)
    _read_legacy(packets.data, start, end, s, kind, legacy_dur)
    return Events(packets, row, start, end, s, kind, uuid, packets.ts[row], legacy_dur)


def _read_legacy(data: bytes, start: np.ndarray, end: np.ndarray, s: Scanned, kind: np.ndarray, dur: np.ndarray) -> None:
    """Events with a `legacy_event` (rare): their phase, and an 'X' event's duration."""
    from branchscope.profiling.trace.perfetto_schema import parse

    for k in np.flatnonzero(s.has[_LEGACY]).tolist():
        legacy = parse("TrackEvent", data[int(start[k]) : int(end[k])]).legacy_event
        if legacy.phase == _COMPLETE_PHASE:
            kind[k], dur[k] = INSTANT, max(legacy.duration_us, 0) * 1000
        elif kind[k] == 0:
            kind[k] = _LEGACY_TYPE.get(legacy.phase, 0)


def pairs(ev: Events) -> tuple[np.ndarray, np.ndarray]:
    """The complete events: the event that begins each (its row in `ev`) and the one that ends it
    (-1: a legacy 'X' event, or a begin never ended). Per track, as a stack pairs them, in numpy."""
    sel = np.flatnonzero((ev.kind == BEGIN) | (ev.kind == END))
    order = sel[np.lexsort((sel, ev.ts[sel], ev.uuid[sel]))]
    u = ev.uuid[order]
    is_begin = ev.kind[order] == BEGIN
    step = np.where(is_begin, 1, -1).astype(np.int64)
    n = order.size
    group = np.concatenate([[0], np.cumsum(u[1:] != u[:-1])]) if n else np.zeros(0, np.int64)
    del u, sel  # (each column here is as long as the trace's events: free what is done with)
    first = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]])) if n else np.zeros(0, np.int64)
    total = np.cumsum(step)
    depth = total - np.repeat(total[first] - step[first], np.diff(np.append(first, n)))
    del total, step
    # The lowest depth so far in its track (0 before any): an end that goes below it closes nothing.
    big = 4 * n + 4
    low = np.minimum(-(np.maximum.accumulate(-depth + group * big) - group * big), 0)
    low_before = np.concatenate([[0], low[:-1]]) if n else low
    low_before[first] = 0
    kept = is_begin | (depth >= low_before)
    del low_before
    order, group, is_begin = order[kept], group[kept], is_begin[kept]
    depth = (depth - low)[kept]
    level = np.where(is_begin, depth, depth + 1)
    at = np.lexsort((np.arange(order.size), level, group))
    group, level = group[at], level[at]
    o, b = order[at], is_begin[at]
    same = np.concatenate([(group[1:] == group[:-1]) & (level[1:] == level[:-1]), [False]])
    del group, level
    closed = b & np.concatenate([~b[1:], [False]]) & same
    begins = o[b]
    ends = np.where(closed[b], np.concatenate([o[1:], [-1]])[b], -1)
    legacy = np.flatnonzero(ev.legacy_dur >= 0)
    return np.concatenate([begins, legacy]), np.concatenate([ends, np.full(legacy.size, -1)])


def flow_ids(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every flow id on an event: (event row, id, terminating), in event order."""
    parts = [(ev.s.items[f], f in (_ENDING, _ENDING_OLD)) for f in (_FLOWS, _FLOWS_OLD, _ENDING, _ENDING_OLD)]
    msg = np.concatenate([p[0][0] for p in parts])
    ids = np.concatenate([p[0][1] for p in parts])
    ending = np.concatenate([np.full(p[0][0].size, p[1]) for p in parts])
    return msg, ids, ending


def counter_values(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counter points: (event row, track uuid, value), the `extra_*` ones included."""
    rows = np.flatnonzero(ev.kind == COUNTER)
    has_double, double = ev.s.at(_DOUBLE_COUNT, rows)
    value = np.where(has_double, double.view(np.float64), ev.s.at(_COUNT, rows)[1].view(np.int64))
    extra_rows, extra_uuid, extra_value = _extra_counters(ev)
    return (
        np.concatenate([rows, extra_rows]), np.concatenate([ev.uuid[rows], extra_uuid]),
        np.concatenate([value.astype(np.float64), extra_value]),
    )  # fmt: skip


def _extra_counters(ev: Events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from branchscope.profiling.trace.perfetto_schema import parse

    rows: list[int] = []
    uuids: list[int] = []
    values: list[float] = []
    has = np.flatnonzero(ev.s.has[_EXTRA] | ev.s.has[_EXTRA_DOUBLE])
    for k in has.tolist():
        te = parse("TrackEvent", ev.packets.data[int(ev.start[k]) : int(ev.end[k])])
        for u_list, v_list in (
            (te.extra_counter_track_uuids, te.extra_counter_values),
            (te.extra_double_counter_track_uuids, te.extra_double_counter_values),
        ):
            for u, v in zip(u_list, v_list):
                rows.append(k)
                uuids.append(u)
                values.append(float(v))
    return np.array(rows, np.int64), np.array(uuids, np.uint64), np.array(values, np.float64)


def annotated(ev: Events, rows: np.ndarray) -> np.ndarray:
    """Whether each event `rows` has debug annotations."""
    return ev.s.has[_ANNOTATIONS][rows]


def event_bytes(ev: Events, k: int) -> Any:
    """Event row k's TrackEvent bytes."""
    return ev.packets.data[int(ev.start[k]) : int(ev.end[k])]
