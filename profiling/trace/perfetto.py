"""A Perfetto protobuf trace (`.pftrace`, `.perfetto-trace`, `.pb`; told by content) read into a
`Trace`, the same one its JSON twin gives: lanes, busy, memory, counters, flows, metadata, args.

The modules, in the order a load runs them (docs/formats.md says what is read and what is not):
`perfetto_wire` (the packets framed, their fields read in lockstep with numpy), `perfetto_state`
(packets read in batches; sequences, interned strings, defaults, clocks), `perfetto_events` (each
batch's TrackEvents, of which only what the `Trace` needs is kept; then slices paired),
`perfetto_tracks` (tracks -> (pid, tid) lanes), `perfetto_args` (debug annotations as `args`, on
demand). protobuf is imported only here, when a Perfetto trace is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.decode import _METADATA_SPELLINGS, _Interner, _thread_codes
from branchscope.profiling.trace.fields import _MAX_ABS_NS
from branchscope.profiling.trace.lanes import GPU_CATEGORIES
from branchscope.profiling.trace.memory_events import _ARGS as _MEMORY_ARGS
from branchscope.profiling.trace.model import CounterTrack, TraceFormatError
from branchscope.profiling.trace.perfetto_args import PerfettoArgs, dict_annotations, int_annotations
from branchscope.profiling.trace.perfetto_events import INSTANT, EventReader, Events, pairs
from branchscope.profiling.trace.perfetto_state import read_packets
from branchscope.profiling.trace.perfetto_tracks import Tracks, read_tracks
from branchscope.profiling.trace.perfetto_wire import WireError

#: The instant that holds the trace's metadata, and its annotation (docs/formats.md).
METADATA_EVENT, METADATA_ANNOTATION = kineto.PERFETTO_METADATA_EVENT.name, kineto.PERFETTO_METADATA_ARG.name
#: The annotation of a slice starting flows that holds their categories {flow id: category}: read
#: as the flows', not as args.
FLOW_CATEGORIES = kineto.PERFETTO_FLOW_CATEGORIES.name
#: Its name's bytes: a trace holding them nowhere (inline or interned) has no such annotation.
_FLOW_CATEGORIES_BYTES = FLOW_CATEGORIES.encode()
#: The category of counters an exporter adds for Perfetto's UI only (not the source trace's): skipped.
DERIVED_COUNTERS = "branchscope.derived"
#: A memory event's annotation naming its allocating thread, where its track names none.
MEMORY_TID = "Tid"
_METADATA_DECODER = msgspec.json.Decoder(float_hook=str)  # as the JSON reader keeps floats
_LOW = 0xFFFFFFFF


def read_perfetto(path: str, data: bytes) -> dict[str, Any]:
    """What `reader` assembles a `Trace` from (the keywords of `reader._assemble`), read from a
    Perfetto trace's bytes; `TraceFormatError` naming the file when they are no Perfetto trace.
    The events' columns are dropped as soon as used: the peak is what the file's events take at once."""
    reader = EventReader({METADATA_EVENT, *kineto.MEMORY_EVENT.spellings})
    try:
        packets = read_packets(data, reader.add)
        tracks = read_tracks(packets.tracks)
    except (WireError, ValueError) as exc:
        raise TraceFormatError(f"{path}: not a readable Perfetto trace: {exc}") from None
    ev = reader.events()
    del reader, packets
    instants = np.flatnonzero(ev.kind == INSTANT)
    instants = instants[~np.isin(instants, ev.legacy[0])]
    metadata, memory_parts, counters = _metadata(ev, instants, tracks), _memory(ev, instants, tracks), _counters(ev, tracks)
    del instants
    begin, end = pairs(ev)
    ev.kind = _DONE
    raw_args = _args(ev, begin, end)
    flow_cats = _flow_categories(ev)
    ev.start = ev.size = _DONE
    start, dur = _times(path, ev, begin, end)
    ev.row = ev.packets.ts = ev.packets.gen = _DONE
    pid, tid = tracks.lanes(ev.uuids(begin))
    ev.track = _DONE
    raw_keys: dict[Any, int] = {}
    thread = _threads(pid, tid, raw_keys)
    del pid, tid
    event_names, name_id = _used(ev.names, ev.name[begin])
    cat_of = ev.cat[begin]
    ev.name = ev.cat = _DONE
    points = _flow_points(ev, begin, start, cat_of, flow_cats)
    event_cats, cat_id = _used(ev.cats, cat_of)
    return dict(
        raw_keys=raw_keys,
        thread=thread,
        names=event_names,
        cats=event_cats,
        name_id=name_id,
        cat_id=cat_id,
        start_ns=start,
        dur_ns=dur,
        raw_args=raw_args,
        metadata=metadata,
        memory_parts=memory_parts,
        counters=counters,
        process_labels=tracks.process_labels,  # the _assemble's keywords, not a trace's keys
        thread_names=tracks.thread_names,
        points=points,
    )


#: What a column of `Events` is set to once read whole (freed: each is as long as the events).
_DONE = np.zeros(0, np.int64)


def _times(path: str, ev: Events, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The complete events' starts and durations (ns): to their end, a legacy event's own, or
    (never ended) to the trace's last timestamp."""
    ts = ev.ts
    start = ts[begin]
    if start.size and int(np.abs(start).max()) >= _MAX_ABS_NS:
        raise TraceFormatError(f"{path}: a timestamp out of range")
    dur = ts[np.maximum(end, 0)] - start
    unended = np.flatnonzero(end < 0)
    dur[unended] = int(ts.max(initial=0)) - start[unended]
    legacy_at, legacy_dur = ev.legacy
    dur[begin.size - legacy_at.size :] = legacy_dur  # `pairs` puts the legacy events last
    return start, dur


def _used(table: list[str], ids: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The texts `ids` use, and the ids into them (a trace's names are those of its events)."""
    used, inverse = np.unique(ids, return_inverse=True)
    return [table[k] for k in used.tolist()], inverse.astype(np.int32)


def _threads(pid: np.ndarray, tid: np.ndarray, raw_keys: dict[Any, int]) -> np.ndarray:
    """(pid, tid) as the JSON reader's thread codes (`decode._thread_codes`)."""
    if not pid.size or (pid.min() > -(1 << 31) and pid.max() < 1 << 31 and tid.min() >= -(1 << 31) and tid.max() < 1 << 31):
        return (pid << 32) | (tid & _LOW)
    keys = _Interner()
    codes = _thread_codes(pid.tolist(), tid.tolist(), keys)
    raw_keys.update(keys.table)
    return codes


def _args(ev: Events, begin: np.ndarray, end: np.ndarray) -> PerfettoArgs:
    spans = np.full((begin.size, 4), -1, np.int32 if len(ev.packets.data) < 1 << 31 else np.int64)
    spans[:, 0], spans[:, 1] = ev.start[begin], ev.end_of(begin)
    ended = np.flatnonzero(end >= 0)
    at = end[ended]
    spans[ended, 2], spans[ended, 3] = ev.start[at], ev.end_of(at)
    return PerfettoArgs(ev.packets.data, spans, ev.packets.gen[ev.row[begin]], ev.packets.interned, _HIDDEN)


#: The annotations that are no args.
_HIDDEN = frozenset({FLOW_CATEGORIES})


def _instant_args(ev: Events, rows: np.ndarray) -> list[dict[str, Any]]:
    """The args of instants `rows` (few: the metadata event)."""
    spans = np.full((rows.size, 4), -1, np.int64)
    spans[:, 0], spans[:, 1] = ev.start[rows], ev.end_of(rows)
    args = PerfettoArgs(ev.packets.data, spans, ev.packets.gen[ev.row[rows]], ev.packets.interned)
    return [msgspec.json.decode(a)["args"] for a in args]


def _named(ev: Events, rows: np.ndarray, name: str) -> np.ndarray:
    return rows[ev.name[rows] == ev.names.index(name)] if name in ev.names else rows[:0]


def _metadata(ev: Events, instants: np.ndarray, tracks: Tracks) -> dict[str, Any]:
    """The trace's top-level JSON keys, from its metadata event (the first), as the JSON reader keeps them."""
    rows = _named(ev, instants, METADATA_EVENT)
    rows = rows[np.isin(ev.uuids(rows), np.array(sorted(tracks.metadata_tracks), np.uint64))]
    for args in _instant_args(ev, rows[:1]):
        value = args.get(METADATA_ANNOTATION)
        try:
            top = _METADATA_DECODER.decode(value) if isinstance(value, str) else None
        except msgspec.DecodeError:
            top = None
        if isinstance(top, dict):
            return {k: v for k, v in top.items() if k in _METADATA_SPELLINGS}
    return {}


def _memory(ev: Events, instants: np.ndarray, tracks: Tracks) -> list[dict[str, np.ndarray]]:
    """The "[memory]" instants as `memory_events` columns: their integer debug annotations are the
    JSON's args, each key read under its first spelling said (`memory_events._ARGS`)."""
    rows = np.concatenate([_named(ev, instants, n) for n in kineto.MEMORY_EVENT.spellings])
    if not rows.size:
        return []
    rows.sort()
    pid, tid = tracks.lanes(ev.uuids(rows))
    said = int_annotations(ev.packets.buf, ev.start[rows].astype(np.int64), ev.end_of(rows), ev.packets.gen[ev.row[rows]], ev.packets.interned)
    if MEMORY_TID in said:
        at, value = said[MEMORY_TID]
        tid[at] = value
    columns = {"ts": ev.packets.ts[ev.row[rows]], "pid": pid, "tid": tid}
    for attr, key, _kind, default in _MEMORY_ARGS:
        values = np.full(rows.size, -1 if attr == "addr" else default or 0, np.int64)
        known = np.zeros(rows.size, bool)
        for spelling in key.spellings:
            at, value = said.get(spelling, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            fresh = ~known[at]
            values[at[fresh]], known[at[fresh]] = value[fresh], True
        columns[attr] = values
        if default is None and attr != "addr":
            columns[f"has_{attr}"] = known
    return [columns]


def _counters(ev: Events, tracks: Tracks) -> list[CounterTrack]:
    """One `CounterTrack` per counter track with points (its events' times on the trace's clock)."""
    row, uuid, value, cat_of = ev.counters
    out = []
    for u in np.unique(uuid).tolist():
        info = tracks.counters.get(u)
        if info is None:
            continue
        at = np.flatnonzero(uuid == u)
        ts = ev.packets.ts[row[at]]
        order = np.argsort(ts, kind="stable")
        cat = info.cat or ev.cats[int(cat_of[at[0]])]
        if cat == DERIVED_COUNTERS:
            continue
        out.append(CounterTrack(name=info.name, pid=info.pid, tid=info.tid, key=info.key, ts_ns=ts[order], values=value[at][order], cat=cat))
    out.sort(key=lambda c: (c.pid, c.tid, c.name, c.key))
    return out


#: Flows' categories a trace says (`_flow_categories`).
_Said = tuple[np.ndarray, np.ndarray, list[str]]


def _flow_categories(ev: Events) -> _Said:
    """The categories an exporter gave flows (`FLOW_CATEGORIES` on the events starting them): the
    flow ids said (uint64, ascending, each once: its first said), their categories (ids into the
    texts also returned). Only the events that start a flow are read, at once
    (`perfetto_args.dict_annotations`)."""
    row, _fid, ending = ev.flows
    rows = np.unique(row[~ending])
    if not rows.size or _FLOW_CATEGORIES_BYTES not in ev.packets.data:  # a search of the file: faster than a scan
        return np.zeros(0, np.uint64), np.zeros(0, np.int32), []
    ids, cat, cats = dict_annotations(
        ev.packets.buf, ev.start[rows].astype(np.int64), ev.end_of(rows), ev.packets.gen[ev.row[rows]], ev.packets.interned, FLOW_CATEGORIES
    )
    ids, first = np.unique(ids, return_index=True)
    return ids, cat[first], cats



def _flow_points(
    ev: Events, begin: np.ndarray, start: np.ndarray, cat_of: np.ndarray, said: _Said
) -> Callable[[np.ndarray, Any], tuple[np.ndarray, ...]] | None:
    """A maker of the flow endpoints' columns (`flow_events.flow_point_columns`'s) from the events'
    lanes (the complete events begun by `begin`, at `start`, of categories `cat_of`; the categories
    `said` by the trace, per flow id, `_flow_categories`); None when no event names a flow."""
    row, fid, ending = ev.flows
    event_of_row = np.full(max(int(begin.max(initial=-1)), int(row.max(initial=-1))) + 1, -1, np.int64)
    event_of_row[begin] = np.arange(begin.size)
    event = event_of_row[row]
    del event_of_row
    keep = event >= 0
    event, fid, ending = event[keep], fid[keep], ending[keep]
    if not event.size:
        return None
    ts = start[event]
    order = np.lexsort((event, ts, fid))
    event, fid, ending, ts = event[order], fid[order], ending[order], ts[order]
    first = np.concatenate([[True], fid[1:] != fid[:-1]])
    last = np.concatenate([fid[1:] != fid[:-1], [True]])
    phase = np.where(first, 0, np.where(last | ending, 2, 1)).astype(np.int8)
    fids, flow_id = np.unique(fid, return_inverse=True)
    cat, cat_names = _categories(fids, flow_id, phase == 2, ev.cats, cat_of[event], said)

    def points(lane: np.ndarray, _lookup: Any) -> tuple[np.ndarray, ...]:
        return (phase, flow_id.astype(np.int64), cat, lane[event].astype(np.int32), ts, np.ones(event.size, bool), cat_names)

    return points


def _categories(
    fids: np.ndarray, flow_id: np.ndarray, at_end: np.ndarray, cats: list[str], event_cat: np.ndarray, said: _Said
) -> tuple[np.ndarray, np.ndarray]:
    """Each endpoint's flow's category (an id into the names also returned): the one the trace says
    (`said`), else kineto's launch -> kernel one where the flow ends on a GPU event, else "flow"."""
    gpu_cat = np.array([c in GPU_CATEGORIES for c in cats], bool)
    ends_on_gpu = np.zeros(fids.size, bool)
    ends_on_gpu[flow_id[at_end]] = gpu_cat[event_cat[at_end]]
    per_flow = np.where(ends_on_gpu, 0, 1).astype(np.int32)
    said_ids, said_cat, said_cats = said
    at = np.minimum(np.searchsorted(fids, said_ids), max(fids.size - 1, 0))
    known = fids[at] == said_ids if fids.size else np.zeros(said_ids.size, bool)
    names = _Interner()
    names.ids([kineto.LAUNCH_FLOW_CATEGORY.name, "flow"])
    per_flow[at[known]] = names.ids(said_cats)[said_cat[known]]
    return per_flow[flow_id], np.array(list(names.table), dtype=object)
