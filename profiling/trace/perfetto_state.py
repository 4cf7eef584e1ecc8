"""A Perfetto trace's packets and the state their sequences carry: interned strings, defaults, clocks.

Every packet's few hot fields are read in lockstep (`perfetto_wire.scan`); the rare packets (track
descriptors, interned data, clock snapshots, packet defaults) are decoded one by one with upb
(`perfetto_schema`). A writer's packets form sequences (`trusted_packet_sequence_id`) whose state
holds until it is cleared (`SEQ_INCREMENTAL_STATE_CLEARED`, `incremental_state_cleared`): a
packet's *generation* is the last packet of its sequence that cleared it (`_generations`), and
interned strings and defaults are looked up by (generation, id).

Timestamps are brought to the trace's one clock (`ClockSnapshot.primary_trace_clock`, BOOTTIME
when none says) by `_timestamps`: a packet's clock is its `timestamp_clock_id`, else its
sequence's default, else BOOTTIME; an incremental clock's timestamps are deltas, summed from the
last snapshot of the sequence; a clock other than the trace's is converted through the latest
snapshot that gives both. A folder of rank traces therefore lands on one clock, as JSON ranks do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from branchscope.profiling.trace.decode import _Interner
from branchscope.profiling.trace.perfetto_schema import parse, text
from branchscope.profiling.trace.perfetto_wire import LEN, VARINT, Scanned, Want, frame, scan

BOOTTIME = 6
#: Clocks numbered from here are scoped to one sequence.
_SEQUENCE_CLOCKS = 64
_CLEARED = 1  # SEQ_INCREMENTAL_STATE_CLEARED
TIMESTAMP, SEQUENCE, FLAGS, STATE_CLEARED, CLOCK, TRACK_EVENT = 8, 10, 13, 41, 58, 11
CLOCK_SNAPSHOT, INTERNED, DEFAULTS, TRACK_DESCRIPTOR = 6, 12, 59, 60
_RARE = (CLOCK_SNAPSHOT, INTERNED, DEFAULTS, TRACK_DESCRIPTOR)
PACKET_FIELDS = (
    Want(TIMESTAMP, VARINT), Want(SEQUENCE, VARINT, dtype="u4"), Want(FLAGS, VARINT, sparse=True),
    Want(STATE_CLEARED, VARINT, sparse=True), Want(CLOCK, VARINT, sparse=True), Want(TRACK_EVENT, LEN),
    *(Want(f, LEN, presence=True) for f in _RARE),
)  # fmt: skip
#: InternedData's tables, by the name the reader looks them up with.
_INTERNED = {"cat": "event_categories", "name": "event_names", "ann": "debug_annotation_names"}


@dataclass
class _Snapshot:
    packet: int
    seq: int
    clocks: dict[int, tuple[int, bool, int]]  # clock id -> (timestamp, incremental, ns per unit)


@dataclass
class Packets:
    """A trace's packets: each one's generation and timestamp (one row per packet), and its
    sequences' state."""

    data: bytes
    buf: np.ndarray  # the file's bytes, as uint8 (no copy)
    gen: np.ndarray  # int64: each packet's generation (module docstring)
    ts: np.ndarray  # int64 ns on the trace's clock (0 where a packet has none); raw until read whole
    #: (kind, generation, iid) -> text, kind one of `_INTERNED`'s or "str" (annotation string values)
    interned: dict[tuple[str, int, int], str] = field(default_factory=dict)
    default_track: dict[int, int] = field(default_factory=dict)  # generation -> track uuid
    tracks: list[Any] = field(default_factory=list)  # TrackDescriptor messages, in file order


#: Packets read at a time: what a round of `read_packets` allocates stays small.
PACKETS_AT_A_TIME = 1 << 15
#: `on_events(packets, rows, start, end)`: the packets `rows` hold TrackEvents at bytes [start, end).
EventsFound = Callable[["Packets", np.ndarray, np.ndarray, np.ndarray], None]


def read_packets(data: bytes, on_events: EventsFound) -> Packets:
    """The packets of a Perfetto `Trace` (WireError, ValueError when it is broken), read
    `PACKETS_AT_A_TIME` at a time: each batch's rare packets (interned data, defaults, tracks,
    clocks) are read before its TrackEvents are handed to `on_events`, so that they are known when
    the events are read; timestamps are brought to the trace's clock once all are read."""
    start, end = frame(data)
    n = start.size
    packets = Packets(data=data, buf=np.frombuffer(data, np.uint8), gen=np.empty(n, np.int64), ts=np.zeros(n, np.int64))
    seq = np.empty(n, np.uint32)
    has_ts = np.zeros(n, bool)
    state = _SequenceState()
    for lo in range(0, n, PACKETS_AT_A_TIME):
        hi = min(lo + PACKETS_AT_A_TIME, n)
        s = scan(packets.buf, start[lo:hi], end[lo:hi], PACKET_FIELDS)
        seq[lo:hi] = s.value.pop(SEQUENCE)
        packets.gen[lo:hi] = state.generations(seq[lo:hi].astype(np.int64), _cleared(s), lo)
        has_ts[lo:hi] = s.has.pop(TIMESTAMP)
        packets.ts[lo:hi] = s.value.pop(TIMESTAMP).view(np.int64)
        at, value, _ = s.items[CLOCK]
        state.clocks.append((at + lo, value.astype(np.int64)))
        _read_rare(packets, state, s, start[lo:hi], end[lo:hi], seq, lo)
        rows = np.flatnonzero(s.has.pop(TRACK_EVENT))
        event_start = s.value.pop(TRACK_EVENT)[rows].astype(np.int64)
        event_end = event_start + s.length.pop(TRACK_EVENT)[rows]
        del s
        on_events(packets, rows + lo, event_start, event_end)
    del start, end
    if state.snapshots:  # else every timestamp is on the trace's clock already (0 where none)
        clock = _per_generation(packets.gen, state.default_clock, BOOTTIME)
        for at, value in state.clocks:
            clock[at] = value
        primary = _primary_clock(state.snapshots)
        packets.ts = _timestamps(packets.ts, has_ts, clock, seq.astype(np.int64), state.snapshots, primary)
    return packets


def _cleared(s: Scanned) -> np.ndarray:
    """Whether each packet clears its sequence's incremental state."""
    cleared = np.zeros(s.n, bool)
    for f, flag in ((FLAGS, _CLEARED), (STATE_CLEARED, 0xFFFFFFFFFFFFFFFF)):
        msg, value, _ = s.items[f]
        cleared[msg[(value & np.uint64(flag)) != 0]] = True
    return cleared


@dataclass
class _SequenceState:
    """What `read_packets` carries from one batch of packets to the next."""

    last_cleared: dict[int, int] = field(default_factory=dict)  # sequence -> its last clearing packet
    default_clock: dict[int, int] = field(default_factory=dict)  # generation -> clock id
    clocks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (packet, clock id) said
    snapshots: list[_Snapshot] = field(default_factory=list)

    def generations(self, seq: np.ndarray, cleared: np.ndarray, lo: int) -> np.ndarray:
        """The generations of packets lo.. (`_generations`, with the batches before)."""
        gen = _generations(seq, cleared)
        mine = gen >= 0
        gen[mine] += lo
        before = np.flatnonzero(~mine)
        if before.size and self.last_cleared:
            keys = np.array(sorted(self.last_cleared), np.int64)
            k = np.clip(np.searchsorted(keys, seq[before]), 0, keys.size - 1)
            found = keys[k] == seq[before]
            values = np.array([self.last_cleared[x] for x in keys.tolist()], np.int64)
            gen[before[found]] = values[k[found]]
        at = np.flatnonzero(cleared)
        self.last_cleared.update(zip(seq[at].tolist(), (at + lo).tolist()))  # the last of each wins
        return gen


def _read_rare(packets: Packets, state: _SequenceState, s: Scanned, start: np.ndarray, end: np.ndarray, seq: np.ndarray, lo: int) -> None:
    """The batch's rare packets (interned data, defaults, track descriptors, clock snapshots), by upb."""
    rare = np.zeros(s.n, bool)
    for f in _RARE:
        rare |= s.has.pop(f)
    data = packets.data
    for k in np.flatnonzero(rare).tolist():
        msg = parse("Packet", data[int(start[k]) : int(end[k])])
        g = int(packets.gen[lo + k])
        if msg.HasField("interned_data"):
            _intern(packets.interned, g, msg.interned_data)
        if msg.HasField("trace_packet_defaults"):
            d = msg.trace_packet_defaults
            if d.HasField("timestamp_clock_id"):
                state.default_clock[g] = d.timestamp_clock_id
            if d.track_event_defaults.HasField("track_uuid"):
                packets.default_track[g] = d.track_event_defaults.track_uuid
        if msg.HasField("track_descriptor"):
            packets.tracks.append(msg.track_descriptor)
        if msg.HasField("clock_snapshot"):
            state.snapshots.append(_snapshot(lo + k, int(seq[lo + k]), msg.clock_snapshot))


def _generations(seq: np.ndarray, cleared: np.ndarray) -> np.ndarray:
    """Each packet's generation: the index of the last packet of its sequence, itself included, that
    cleared the sequence's state; -1 - seq before any did. Numpy over all packets at once."""
    n = seq.size
    if not n:
        return np.zeros(0, np.int64)
    order = np.argsort(seq, kind="stable")
    group = np.concatenate([[0], np.cumsum(seq[order][1:] != seq[order][:-1])])
    mark = np.where(cleared[order], order + 1, 0) + group * (n + 1)
    last = np.maximum.accumulate(mark) - group * (n + 1) - 1  # -1: none yet in its sequence
    gen = np.empty(n, np.int64)
    gen[order] = np.where(last >= 0, last, -1 - seq[order])
    return gen


def _per_generation(gen: np.ndarray, values: dict[int, int], default: int) -> np.ndarray:
    """`values[generation]` of each packet, `default` where its generation has none."""
    if not values:
        return np.full(gen.size, default, np.int64)
    keys = np.array(sorted(values), np.int64)
    at = np.clip(np.searchsorted(keys, gen), 0, keys.size - 1)
    found = keys[at] == gen
    return np.where(found, np.array([values[k] for k in keys.tolist()], np.int64)[at], default)


def interned_ids(
    texts: _Interner, table: dict[tuple[str, int, int], str], kind: str, gen: np.ndarray, iid: np.ndarray
) -> np.ndarray:
    """The id in `texts` of the interned text of each (generation, iid) (uint64 iids) of `kind`
    ("" where none is interned): a lookup per distinct pair, numpy for the rest."""
    if not gen.size:
        return np.zeros(0, np.int32)
    order = np.lexsort((iid, gen))
    g, i = gen[order], iid[order]
    new = np.concatenate([[True], (g[1:] != g[:-1]) | (i[1:] != i[:-1])])
    firsts = np.flatnonzero(new)
    found = [table.get((kind, a, b), "") for a, b in zip(g[firsts].tolist(), i[firsts].tolist())]
    out = np.empty(gen.size, np.int32)
    out[order] = texts.ids(found)[np.cumsum(new) - 1]
    return out


def _intern(table: dict[tuple[str, int, int], str], gen: int, interned: Any) -> None:
    for kind, attr in _INTERNED.items():
        for entry in getattr(interned, attr):
            table.setdefault((kind, gen, entry.iid), text(entry.name))
    for entry in interned.debug_annotation_string_values:
        table.setdefault(("str", gen, entry.iid), text(entry.str))


def _snapshot(packet: int, seq: int, snap: Any) -> _Snapshot:
    clocks = {c.clock_id: (c.timestamp, c.is_incremental, c.unit_multiplier_ns or 1) for c in snap.clocks}
    if snap.HasField("primary_trace_clock"):
        clocks[-1] = (snap.primary_trace_clock, False, 1)  # where the trace says its clock
    return _Snapshot(packet, seq, clocks)


def _primary_clock(snapshots: list[_Snapshot]) -> int:
    return next((s.clocks[-1][0] for s in snapshots if -1 in s.clocks and s.clocks[-1][0]), BOOTTIME)


def _timestamps(
    raw: np.ndarray, has: np.ndarray, clock: np.ndarray, seq: np.ndarray, snapshots: list[_Snapshot], primary: int
) -> np.ndarray:
    """Every packet's timestamp in ns on the trace's clock (module docstring); 0 where it has none."""
    ts = np.where(has, raw, 0)
    if not snapshots:
        return ts
    for c in np.unique(clock[has]).tolist():
        if c == primary:
            continue
        rows = np.flatnonzero(has & (clock == c))
        for s in np.unique(seq[rows]).tolist() if c >= _SEQUENCE_CLOCKS else [None]:
            at = rows if s is None else rows[seq[rows] == s]
            snaps = [x for x in snapshots if c in x.clocks and (s is None or x.seq == s)]
            if any(x.clocks[c][1] for x in snaps):
                ts[at] = _summed(ts[at], at, snaps, c)
            ts[at] = _converted(ts[at], [x for x in snaps if primary in x.clocks], c, primary)
    return ts


def _summed(deltas: np.ndarray, at: np.ndarray, snaps: list[_Snapshot], c: int) -> np.ndarray:
    """An incremental clock's values: each snapshot's value plus the deltas since it."""
    where = np.array([x.packet for x in snaps], np.int64)
    base = np.array([x.clocks[c][0] for x in snaps], np.int64)
    seg = np.searchsorted(where, at, side="right") - 1
    total = np.cumsum(deltas)
    first = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))
    before = np.repeat(total[first] - deltas[first], np.diff(np.append(first, at.size)))
    return np.where(seg >= 0, base[np.maximum(seg, 0)], 0) + total - before


def _converted(values: np.ndarray, snaps: list[_Snapshot], c: int, primary: int) -> np.ndarray:
    """Clock `c`'s values on the trace's clock, through the latest snapshot giving both at or before each."""
    if not snaps:
        return values
    pairs = sorted((x.clocks[c][0], x.clocks[primary][0], x.clocks[c][2]) for x in snaps)
    on_c, on_primary, unit = (np.array(col, np.int64) for col in zip(*pairs))
    k = np.clip(np.searchsorted(on_c, values, side="right") - 1, 0, on_c.size - 1)
    return on_primary[k] + (values - on_c[k]) * unit[k]
