"""A trace's JSON text decoded into numpy columns: speed is the point of this module.

Users open traces of hundreds of MB to 1 GB. msgspec splits the text into one `msgspec.Raw` slice
per event (a fast scan, `_split_events`), then decodes them `_CHUNK` at a time into small typed
structs (far cheaper than dicts), whose fields become numpy columns through `map`/`attrgetter` and
numpy, never a Python loop over events; decimal timestamps are read from their digits by numpy
(`fields`), exact to the ns. From `PARALLEL_MIN_EVENTS` events on, a forked child decodes the
second half on another core (`forked`; its columns come back through a pipe, `_Part.write_to`)
while this process decodes the first; the two parts are then merged (`_merge_parts`). Complete
events' `args` are not decoded: each keeps its whole text, read on demand (hover, details); the
few kinds needed at load time (memory, counters, metadata) are decoded then.

The top level is an object with `traceEvents` or a bare event array; kineto writes the path it
exports to into the last key, "traceName", unescaped (`_without_raw_trace_name`). What the
columns mean (lanes, memory, counters, flows) is read elsewhere: `lanes`, `memory_events`,
`counters`, `flow_events`.
"""

from __future__ import annotations

import io
import itertools
import re
import time
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Literal, NamedTuple

import msgspec
import numpy as np

from branchscope.profiling.trace import forked, kineto
from branchscope.profiling.trace.fields import _ns_column, _real_id
from branchscope.profiling.trace.memory_events import _memory_columns
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.text import _first_byte


class _Event(msgspec.Struct, gc=False):
    """What the load reads of every event. `args` are read from the event's own text when needed
    (`_WithArgs`, `Trace.event_args`), never at load for complete events."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Any = None
    dur: Any = None


class _WithArgs(_Event, gc=False):
    args: msgspec.Raw = msgspec.Raw()  # empty when absent


#: The top-level keys kept as `Trace.metadata`, every spelling of each (`kineto.METADATA_KEYS`).
_METADATA_SPELLINGS = tuple(s for k in kineto.METADATA_KEYS for s in k.spellings)
_EVENTS_ATTRS = kineto.spelling_attrs("events", kineto.TRACE_EVENTS)
#: A trace file's top level: its events (`events`, `events_1`, … per spelling) and the metadata
#: kept, the n-th of `_METADATA_SPELLINGS` as `m{n}`.
_TraceFile = msgspec.defstruct(
    "_TraceFile",
    [
        *kineto.struct_fields("events", kineto.TRACE_EVENTS, list[msgspec.Raw] | None, None),
        *[(f"m{n}", Any, msgspec.field(default=None, name=s)) for n, s in enumerate(_METADATA_SPELLINGS)],
    ],
)


#: float_hook=str keeps a float's digits so that ns decimals of µs timestamps survive: a float64 µs
#: timestamp near 1.7e15 resolves only 0.25 µs; the text resolves 1 ns.
_FILE_DECODER = msgspec.json.Decoder(_TraceFile, float_hook=str)
_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT_DECODER = msgspec.json.Decoder(_Event, float_hook=str)
_WITH_ARGS_DECODER = msgspec.json.Decoder(_WithArgs, float_hook=str)
#: Events decoded into structs at a time. The file is first split into one Raw slice per event
#: (a fast scan), then decoded chunk by chunk, so only one chunk of structs is alive at once:
#: this keeps peak memory near 1.5x the JSON instead of 3.5x. A chunk small enough to stay in
#: the CPU's cache while its columns are taken is 1.7x faster than one of 32768 events.
_CHUNK = 4096
_ANY_DECODER = msgspec.json.Decoder()


def _split_events(path: str, data: bytes) -> tuple[list[msgspec.Raw], dict[str, Any]]:
    """The text as one `msgspec.Raw` per event, and the trace's other top-level keys (the
    `_TraceFile` fields that are there). Raises msgspec's errors, and `TraceFormatError` for JSON
    that is no trace."""
    metadata: dict[str, Any] = {}
    if _first_byte(data) == b"[":
        return _LIST_DECODER.decode(data), metadata  # the bare-array form of the Chrome format
    try:
        top = _FILE_DECODER.decode(data)
    except msgspec.DecodeError:
        repaired = _without_raw_trace_name(data)
        if repaired is None:
            raise
        data, name, spelling = repaired
        metadata[spelling] = name
        top = _FILE_DECODER.decode(data)
    events = next((e for e in map(getattr, [top] * len(_EVENTS_ATTRS), _EVENTS_ATTRS) if e is not None), None)
    if events is None:
        raise TraceFormatError(f"{path}: JSON has no '{kineto.TRACE_EVENTS.name}' list: not a profiler trace")
    for n, spelling in enumerate(_METADATA_SPELLINGS):
        value = getattr(top, f"m{n}")
        if value is not None:
            metadata[spelling] = value
    return events, metadata


#: Where kineto's last key, "traceName", is looked for: the end of the text.
_TRACE_NAME_TAIL = 1 << 16
_TRACE_NAME_VALUE = re.compile(rb'\s*:\s*"')


def _without_raw_trace_name(data: bytes) -> tuple[bytes, str, str] | None:
    """kineto writes the path it exports to into the trace's last key, "traceName", unescaped: a
    trace saved under a name holding `"` or `\\` is not JSON. Such a text without that key, the
    name as written and the key's spelling; None when the text does not end that way (the error
    stands)."""
    tail_start = max(0, len(data) - _TRACE_NAME_TAIL)
    tail = data[tail_start:]
    for spelling in kineto.TRACE_NAME.spellings:
        quoted = f'"{spelling}"'.encode()
        key = tail.rfind(quoted)
        if key < 0 or not tail[:key].rstrip().endswith(b","):
            continue
        m = _TRACE_NAME_VALUE.match(tail, key + len(quoted))
        rest = tail[m.end() :].rstrip() if m else b""
        if not (rest.endswith(b"}") and rest[:-1].rstrip().endswith(b'"')):
            continue
        name = rest[:-1].rstrip()[:-1]
        comma = tail_start + tail[:key].rstrip().rfind(b",")
        return data[:comma] + b"}", name.decode("utf-8", errors="replace"), spelling
    return None


class _Interner:
    """Running value -> id table across chunks; dict.fromkeys and map keep the loops in C."""

    def __init__(self) -> None:
        self.table: dict[Any, int] = {}

    def ids(self, values: list[Any]) -> np.ndarray:
        table = self.table
        for v in dict.fromkeys(values):
            if v not in table:
                table[v] = len(table)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))


#: What the load does with an event, by its phase ("[memory]" events are told by name).
_COMPLETE, _META, _COUNTER, _FLOW, _MEMORY = 1, 2, 3, 4, 5
_KIND_OF_PHASE = {
    ph: kind
    for k, kind in (
        (kineto.PHASE_COMPLETE, _COMPLETE), (kineto.PHASE_METADATA, _META), (kineto.PHASE_COUNTER, _COUNTER),
        (kineto.PHASE_FLOW_START, _FLOW), (kineto.PHASE_FLOW_STEP, _FLOW), (kineto.PHASE_FLOW_END, _FLOW),
    )
    for ph in k.spellings
}  # fmt: skip
_MEMORY_NAMES = frozenset(kineto.MEMORY_EVENT.spellings)
_get_ph, _get_name = attrgetter("ph"), attrgetter("name")
#: From this many events on, a forked child decodes the second half while this process decodes the
#: first (`forked.ForkedCall`): below it, forking and sending columns back cost more than they save.
PARALLEL_MIN_EVENTS = 150_000
#: The least time the reader waits for its child to begin sending, once its own half is done.
CHILD_WAIT_FLOOR_S = 5.0


def _picked(items: list[Any], index: np.ndarray) -> list[Any]:
    return list(map(items.__getitem__, index.tolist()))


# ---- the columns of complete events ----------------------------------------------------------


class _Chunk:
    """A chunk's complete events (of real processes) and their positions in the trace's event
    list; `values(field)` takes a field's values of them all once, however many columns read it."""

    __slots__ = ("events", "at", "_values")

    def __init__(self, events: list[_Event], at: np.ndarray) -> None:
        self.events = events
        self.at = at
        self._values: dict[str, list[Any]] = {}

    def values(self, field: str) -> list[Any]:
        got = self._values.get(field)
        if got is None:
            got = self._values[field] = list(map(attrgetter(field), self.events))
        return got


def _renumbered(column: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """A later part's column of ids into its own table, as ids into the merged table (`ids[k]`
    is the merged id of the part's value k)."""
    return ids[column] if ids.size else column


class _Column(NamedTuple):
    """A column of complete events (see `COLUMNS`)."""

    name: str
    dtype: np.dtype[Any]
    #: A chunk's values, from its events (`_Chunk.values`) and the column's running table.
    decode: Callable[[_Chunk, _Interner], np.ndarray]
    #: For a column of ids, the type of the values they stand for: each part holds its own table
    #: of them (sent by the forked child with the part), merged by `_merge_parts`. None: the
    #: column holds its values.
    table: Any = None
    #: How a later part's ids become ids into the merged table.
    renumber: Callable[[np.ndarray, np.ndarray], np.ndarray] = _renumbered


#: An event's thread in one int64 (`_thread_codes`): its pid in the high half and its tid in the
#: low half, where both were written as ints that fit 32 bits (nearly every trace). Else the high
#: half is `_AS_WRITTEN` (a pid never packed) and the low half the id of (pid, tid) as written.
_AS_WRITTEN = -(1 << 31)
_LOW = 0xFFFFFFFF


def _thread_codes(pids: list[Any], tids: list[Any], keys: _Interner) -> np.ndarray:
    """Events' threads as codes (see `_AS_WRITTEN`): a million threads written as ints cost no
    Python object each, and 8 bytes an event. Threads written otherwise (a string id, "stream
    7", an int past 32 bits) are interned as written into `keys`."""
    n = len(pids)
    if n and list(map(type, pids)).count(int) == n and list(map(type, tids)).count(int) == n:
        try:
            p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
        except OverflowError:
            pass
        else:
            if _AS_WRITTEN < p.min() and p.max() < 1 << 31 and _AS_WRITTEN <= t.min() and t.max() < 1 << 31:
                return (p << 32) | (t & _LOW)
    return (np.int64(_AS_WRITTEN) << 32) | keys.ids(list(zip(pids, tids))).astype(np.int64)


def _renumbered_threads(column: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`_renumbered` for thread codes: only the threads interned as written take the new ids."""
    if ids.size:
        column = column.copy()
        written = np.flatnonzero((column >> 32) == _AS_WRITTEN)
        column[written] = (np.int64(_AS_WRITTEN) << 32) | ids[column[written] & _LOW].astype(np.int64)
    return column


def _split_thread_codes(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (`_thread_codes`) as pid, tid (both 0 for a thread written otherwise) and key id
    (-1 for a thread given by its code)."""
    pid = code >> 32
    low = code & _LOW
    written = pid == _AS_WRITTEN
    tid = np.where(written, 0, (low ^ 0x80000000) - 0x80000000)
    return np.where(written, 0, pid), tid, np.where(written, low, -1)


def _durations(chunk: _Chunk, _table: _Interner) -> np.ndarray:
    durations = chunk.values("dur")
    if None in durations:
        durations = [0 if d is None else d for d in durations]
    return _ns_column(durations, "duration")


_INT32, _INT64 = np.dtype(np.int32), np.dtype(np.int64)
#: The columns that complete events decode to, each declared here once: its name (in `_Part.columns`
#: and in what `_merge_parts` returns), dtype, how a chunk of events decodes to it, and for a column
#: of ids the type of its table. Decoding, sending a part from the forked child and merging parts
#: go by this table: a new column is one entry here (and a field of `_Event`, if it reads one not
#: read yet), then the code that uses it (`reader._build`).
COLUMNS: tuple[_Column, ...] = (
    # (pid, tid): a code, or the id of the pair as written (`_thread_codes`)
    _Column(
        "thread", _INT64, lambda ch, keys: _thread_codes(ch.values("pid"), ch.values("tid"), keys),
        table=list[tuple[int | str, int | str]], renumber=_renumbered_threads,
    ),  # fmt: skip
    _Column("name_id", _INT32, lambda ch, names: names.ids(ch.values("name")), table=list[str]),
    _Column("cat_id", _INT32, lambda ch, cats: cats.ids(ch.values("cat")), table=list[str]),
    _Column("start", _INT64, lambda ch, _: _ns_column(ch.values("ts"), "timestamp")),
    _Column("dur", _INT64, _durations),
    # the event's position in the trace's event list: its text, kept for `args`
    _Column("index", _INT64, lambda ch, _: ch.at),
)


# ---- one range of events, and the forked child's half ----------------------------------------


class _Part(msgspec.Struct, gc=False):
    """What one range of a trace's events decodes to: complete events as `COLUMNS` (ids into the
    part's own tables), `[memory]` events as columns, and where the other events are (positions in
    the trace's event list) for the few that are read later. The forked child sends it through a
    pipe (`write_to`, `read_from`): a msgpack header, then each array's bytes as they are. No
    pickle, nothing that runs code, no copy of the columns on either side."""

    tables: dict[str, list[Any]]  # per column of ids (`_Column.table`), the values they stand for
    columns: dict[str, np.ndarray]  # `COLUMNS`, one value per complete event
    memory: dict[str, np.ndarray]  # `_memory_columns`, empty without [memory] events
    at: dict[str, np.ndarray]  # positions of the "meta", "counter" and "flow" events

    def _arrays(self) -> list[tuple[_Group, str, np.ndarray]]:
        return [(group, k, v) for group in _GROUPS for k, v in getattr(self, group).items()]

    def write_to(self, pipe: io.BufferedWriter) -> None:
        arrays = self._arrays()
        header = msgspec.msgpack.encode(
            {"tables": self.tables, "arrays": [(group, k, v.dtype.str, v.size) for group, k, v in arrays]}
        )
        pipe.write(len(header).to_bytes(8, "little"))
        pipe.write(header)
        for _, _, v in arrays:
            pipe.write(np.ascontiguousarray(v).data.cast("B"))

    @classmethod
    def read_from(cls, pipe: io.BufferedReader) -> _Part:
        header = _PART_HEADER.decode(_read_exact(pipe, int.from_bytes(_read_exact(pipe, 8), "little")))
        groups: dict[_Group, dict[str, np.ndarray]] = {group: {} for group in _GROUPS}
        for group, name, dtype, size in header.arrays:
            array = np.empty(size, dtype=np.dtype(dtype))
            _read_exact(pipe, array.nbytes, into=array.data.cast("B"))
            groups[group][name] = array
        tables = {
            c.name: msgspec.msgpack.decode(header.tables[c.name], type=c.table) for c in COLUMNS if c.table is not None
        }
        return cls(tables=tables, columns=groups["columns"], memory=groups["memory"], at=groups["at"])


_Group = Literal["columns", "memory", "at"]
_GROUPS: tuple[_Group, ...] = ("columns", "memory", "at")


class _PartHeader(msgspec.Struct):
    tables: dict[str, msgspec.Raw]  # each decoded as its column's `_Column.table`
    arrays: list[tuple[_Group, str, str, int]]


_PART_HEADER = msgspec.msgpack.Decoder(_PartHeader)


def _read_exact(pipe: io.BufferedReader, n: int, into: memoryview | None = None) -> bytes:
    """n bytes from the pipe (into `into` when given); EOFError if it ends first."""
    buf = into if into is not None else memoryview(bytearray(n))
    got = 0
    while got < n:
        k = pipe.readinto(buf[got:])
        if not k:
            raise EOFError(f"the pipe ended after {got} of {n} bytes")
        got += k
    return b"" if into is not None else bytes(buf)


def _joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def _decode_range(raw_events: list[Any], lo: int, hi: int, report: Callable[[float], None]) -> _Part:
    """Decode events lo..hi-1 of the trace, `_CHUNK` at a time (see `_CHUNK`); `report(fraction)`
    before each chunk. Reads `raw_events` and never changes it (a forked child runs this too)."""
    memory_parts: list[dict[str, np.ndarray]] = []
    meta_at: list[np.ndarray] = []
    counter_at: list[np.ndarray] = []
    flow_at: list[np.ndarray] = []
    interners = [_Interner() for _ in COLUMNS]
    # Each column is written chunk by chunk into one array as long as the range, of which only the
    # rows written (complete events) are touched and take memory. Arrays per chunk, joined at the
    # end, cost a copy and left holes in the heap between the chunks' temporaries (a few MB of RSS).
    out = [np.empty(hi - lo, dtype=c.dtype) for c in COLUMNS]
    rows = 0
    for c in range(lo, hi, _CHUNK):
        report((c - lo) / (hi - lo))
        chunk_raws = raw_events[c : min(c + _CHUNK, hi)]
        chunk = list(map(_EVENT_DECODER.decode, chunk_raws))
        # Sort events by kind with maps and numpy rather than a Python loop over events.
        kinds = np.fromiter(
            map(_KIND_OF_PHASE.get, map(_get_ph, chunk), itertools.repeat(0)), dtype=np.int8, count=len(chunk)
        )
        flow_at.append(np.flatnonzero(kinds == _FLOW) + c)
        # Instant, metadata and counter events: "[memory]" by name (flows are never memory).
        other = np.flatnonzero((kinds != _COMPLETE) & (kinds != _FLOW))
        if other.size:
            others = _picked(chunk, other)
            is_memory = np.fromiter(map(_MEMORY_NAMES.__contains__, map(_get_name, others)), dtype=bool, count=len(others))
            other_kind = kinds[other]
            other_kind[is_memory] = _MEMORY
            if is_memory.any():
                memory_parts.append(_memory_columns(_picked(chunk_raws, other[is_memory])))
            meta_at.append(other[other_kind == _META] + c)
            counter_at.append(other[other_kind == _COUNTER] + c)
        at = np.flatnonzero(kinds == _COMPLETE)
        complete = _Chunk(_picked(chunk, at), at + c)
        del chunk, chunk_raws
        try:
            np.array(complete.values("pid"), dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            # Pseudo processes ("Spans", "Traces") have string pids: not real lanes.
            events = complete.events
            real = [k for k, e in enumerate(events) if type(e.pid) is int or _real_id(e.pid) is not None]
            complete = _Chunk(_picked(events, np.array(real, dtype=np.int64)), complete.at[real])
        n = len(complete.events)
        for column, interner, values in zip(COLUMNS, interners, out):
            values[rows : rows + n] = column.decode(complete, interner)
        rows += n
        del complete
    memory = {k: np.concatenate([m[k] for m in memory_parts]) for k in memory_parts[0]} if memory_parts else {}
    return _Part(
        tables={c.name: list(kept.table) for c, kept in zip(COLUMNS, interners) if c.table is not None},
        columns={c.name: values[:rows] for c, values in zip(COLUMNS, out)},
        memory=memory,
        at={
            "meta": _joined(meta_at, np.int64),
            "counter": _joined(counter_at, np.int64),
            "flow": _joined(flow_at, np.int64),
        },
    )


def _decode_events(raw_events: list[Any], report: Callable[[str, float], None]) -> list[_Part]:
    """All events as parts in order: one, or with a large trace and a second core, two (the
    second decoded by a forked child, or here when the child fails: then errors are ours)."""
    total = len(raw_events)
    helper = None
    if total >= PARALLEL_MIN_EVENTS and forked.cores() >= 2:
        mid = total // 2
        helper = forked.ForkedCall.start(lambda pipe: _decode_range(raw_events, mid, total, lambda _f: None).write_to(pipe))
    if helper is None:
        return [_decode_range(raw_events, 0, total, lambda f: report("events", f))]
    try:
        started = time.monotonic()
        first = _decode_range(raw_events, 0, mid, lambda f: report("events", 0.9 * f))
        report("events", 0.9)
        # The child's half is as large as ours: past twice our time (and a floor) it is stuck or
        # starved, and we do its half ourselves rather than wait on.
        waited = max(2 * (time.monotonic() - started), CHILD_WAIT_FLOOR_S)
        second = helper.result(_Part.read_from, waiting=lambda: report("events", 0.9), timeout=waited)
        if second is None:
            second = _decode_range(raw_events, mid, total, lambda f: report("events", 0.9 + 0.1 * f))
        return [first, second]
    finally:
        helper.stop()


def _merge_parts(parts: list[_Part]) -> tuple[dict[str, dict[Any, int]], dict[str, np.ndarray]]:
    """One set of tables (value -> id, per column of ids) and `COLUMNS` from parts in order: each
    later part's ids are mapped into the first part's tables (grown by the values it lacks)."""
    tables = {name: {v: i for i, v in enumerate(values)} for name, values in parts[0].tables.items()}
    columns: dict[str, list[np.ndarray]] = {c.name: [parts[0].columns[c.name]] for c in COLUMNS}
    for part in parts[1:]:
        for c in COLUMNS:
            col = part.columns[c.name]
            if c.table is not None:
                table = tables[c.name]
                ids = np.array([table.setdefault(v, len(table)) for v in part.tables[c.name]], dtype=np.int32)
                col = c.renumber(col, ids)
            columns[c.name].append(col)
    return tables, {k: np.concatenate(v) for k, v in columns.items()}


def _decode_args(events: list[_WithArgs]) -> list[Any]:
    """Decode many events' args in one call: one JSON array is far cheaper than N decodes."""
    if not events:
        return []
    blob = b"[" + b",".join(bytes(e.args) or b"null" for e in events) + b"]"
    return _ANY_DECODER.decode(blob)
