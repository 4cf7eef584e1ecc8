"""Protobuf's wire format read with numpy, many messages in lockstep: no Python step per message.

A Perfetto trace holds hundreds of thousands of small `TracePacket`s. Decoding each with a protobuf
library costs a Python step (about 2 µs) per packet, several times what the JSON reader spends per
event. Here every message of a set (all packets, or all their `TrackEvent`s) is read at once:
cursor k walks message k, and one round reads the next field of every message still open, each
step a numpy operation over all cursors (`scan`). What a round finds of the fields asked for is
kept per message (a singular field: its last value; a repeated one: every value, in order).

The input is untrusted: a varint past its message or longer than 10 bytes, a length past its
message, a group or an unknown wire type raise `WireError` (the reader turns it into a
`TraceFormatError`); nothing is allocated from a length read in the file. A message still open
after `ROUNDS` rounds (one with very many fields) is read on by `_scan_rest`, one field at a time
in Python: linear in its bytes, never a hang.

`frame` splits a whole `Trace` (field 1, `packet`, repeated) into its packets' byte ranges at C
speed: protobuf's upb parser reads a one-field message into its packets, whose lengths give every
offset (a packet's header is its tag byte and the varint of its length).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np


class WireError(ValueError):
    """Bytes that are no protobuf message of the shape read."""


VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
#: Rounds read in lockstep; a message with more fields than this is read on one field at a time.
ROUNDS = 64
_U64 = np.uint64


def read_varints(buf: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each `pos[k]` (uint64) and the position after it; each must end before `end[k]`.
    One-byte varints take a gather; longer ones are read as the 8 bytes from their start in one
    uint64 (`_words`), their length found from its high bits, and the 9th and 10th bytes of the
    longest ones (ns timestamps) gathered after."""
    if (pos >= end).any():
        raise WireError("a varint runs past the end of its message")
    b = buf.take(pos)
    values = (b & 0x7F).astype(_U64)
    cur = pos + 1
    if not b.size or b.max() < 0x80:
        return values, cur
    at = np.flatnonzero(b >= 0x80)
    p = pos[at]
    w = _words(buf, p)
    stop = ~w & _HIGH_BITS
    lowest = stop & (~stop + _U64(1))  # the first byte without its high bit (0: none of the 8)
    length = np.where(lowest == 0, 8, (np.log2(np.maximum(lowest, 1).astype(np.float64)).astype(np.int64) + 1) >> 3)
    w &= np.where(lowest == 0, ~_U64(0), (lowest << _U64(1)) - _U64(1))
    value = w & _U64(0x7F)
    for k in range(1, 8):
        value |= ((w >> _U64(8 * k)) & _U64(0x7F)) << _U64(7 * k)
    long = np.flatnonzero(lowest == 0)
    if long.size:
        length[long], value[long] = _long_tails(buf, p[long], value[long])
    if (p + length > end[at]).any():
        raise WireError("a varint runs past the end of its message")
    values[at], cur[at] = value, p + length
    return values, cur


_HIGH_BITS = _U64(0x8080808080808080)


def _words(buf: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The 8 bytes from each position as a little-endian uint64 (past the buffer's end: zeros)."""
    n = buf.size - 7
    words = np.ndarray(shape=(max(n, 0),), dtype="<u8", buffer=buf, strides=(1,)) if n > 0 else np.zeros(0, "<u8")
    near_end = p >= n
    if not near_end.any():
        return words[p].astype(_U64)
    tail_start = max(buf.size - 8, 0)
    padded = np.concatenate([buf[tail_start:], np.zeros(8, np.uint8)])
    tail = np.ndarray(shape=(padded.size - 7,), dtype="<u8", buffer=padded, strides=(1,))
    out = np.empty(p.size, _U64)
    out[~near_end] = words[p[~near_end]]
    out[near_end] = tail[p[near_end] - tail_start]
    return out


def _tail_byte(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The byte at each position, 0 past the buffer's end (a length check then refuses it)."""
    return np.where(at < buf.size, buf.take(np.minimum(at, buf.size - 1)), 0).astype(np.uint8)


def _long_tails(buf: np.ndarray, p: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and values of varints of 9 or 10 bytes, whose first 8 are in `value`."""
    b8, b9 = _tail_byte(buf, p + 8), _tail_byte(buf, p + 9)
    value = value | ((b8 & 0x7F).astype(_U64) << _U64(56))
    ten = b8 >= 0x80
    if (ten & (b9 >= 0x80)).any():
        raise WireError("a varint longer than 10 bytes")
    value |= np.where(ten, (b9 & 1).astype(_U64) << _U64(63), _U64(0))
    return np.where(ten, 10, 9), value


def _fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The little-endian fixed64 (width 8) or fixed32 (4) at each position, as uint64."""
    words = _words(buf, pos)
    return words if width == 8 else words & _U64(0xFFFFFFFF)


@dataclass(frozen=True)
class Want:
    """A field to keep: its number, the wire type it is written with, and whether it repeats (a
    repeated varint or fixed64 field may also come packed, as one LEN field)."""

    number: int
    wire: int
    repeated: bool = False
    #: Only whether a message has it is read (`Scanned.has`): a run of it is skipped at once.
    presence: bool = False


@dataclass
class Scanned:
    """What `scan` kept of n messages. Singular field f: `value[f]` (uint64; a LEN field's offset
    into the buffer), `length[f]` (LEN fields), `has[f]`. Repeated field f: `items[f]` =
    (message index, value, length) in message order, values in the order written."""

    n: int
    value: dict[int, np.ndarray] = field(default_factory=dict)
    length: dict[int, np.ndarray] = field(default_factory=dict)
    has: dict[int, np.ndarray] = field(default_factory=dict)
    items: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def get(self, number: int, default: int = 0) -> np.ndarray:
        """Field `number`'s values (uint64), `default` where a message lacks it."""
        values = self.value[number]
        return np.where(self.has[number], values, _U64(default)) if default else values


class _Collector:
    """Keeps the fields asked for as rounds find them (`add`), then gives a `Scanned`."""

    def __init__(self, n: int, wants: tuple[Want, ...]) -> None:
        self.wants = {w.number: w for w in wants}
        self.out = Scanned(n)
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self.packed: list[tuple[Want, np.ndarray, np.ndarray, np.ndarray]] = []
        for w in wants:
            if w.repeated:
                self.parts[w.number] = []
            else:
                self.out.has[w.number] = np.zeros(n, bool)
                if not w.presence:
                    self.out.value[w.number] = np.zeros(n, _U64)
                    if w.wire == LEN:
                        self.out.length[w.number] = np.zeros(n, np.int64)

    def add(self, w: Want, wire: int, msg: np.ndarray, value: np.ndarray, length: np.ndarray | None, *, one_per_message: bool = True) -> None:
        """Values of field `w` written with `wire` (`one_per_message`: at most one per message)."""
        f = w.number
        if wire != w.wire:
            if w.repeated and w.wire != LEN and wire == LEN:
                assert length is not None
                self.packed.append((w, msg, value, length))
            return  # a field of another type than declared: read as unknown, as protobuf does
        if length is None:
            length = np.zeros(msg.size, np.int64)
        if w.repeated:
            self.parts[f].append((msg, value, length))
            return
        if not one_per_message:  # the last of a message wins
            last = msg.size - 1 - np.unique(msg[::-1], return_index=True)[1]
            msg, value, length = msg[last], value[last], length[last]
        self.out.has[f][msg] = True
        if not w.presence:
            self.out.value[f][msg] = value
            if w.wire == LEN:
                self.out.length[f][msg] = length

    def result(self, buf: np.ndarray) -> Scanned:
        for w, msg, off, ln in self.packed:
            self.parts[w.number].append(_unpacked(buf, w, msg, off, ln))
        for f, parts in self.parts.items():
            if not parts:
                empty = np.zeros(0, np.int64)
                self.out.items[f] = (empty, np.zeros(0, _U64), empty)
                continue
            msg = np.concatenate([p[0] for p in parts])
            order = np.argsort(msg, kind="stable")
            self.out.items[f] = (msg[order], np.concatenate([p[1] for p in parts])[order], np.concatenate([p[2] for p in parts])[order])
        return self.out


def _unpacked(buf: np.ndarray, w: Want, msg: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed repeated values (rare: Perfetto's writers do not pack) one field at a time."""
    msgs: list[int] = []
    values: list[Any] = []
    for m, o, n in zip(msg.tolist(), off.tolist(), ln.tolist()):
        p, e = int(o), int(o) + int(n)
        while p < e:
            if w.wire == FIXED64:
                if p + 8 > e:
                    raise WireError("a packed fixed64 field of a broken length")
                v, p = int.from_bytes(buf[p : p + 8].tobytes(), "little"), p + 8
            else:
                got, after = read_varints(buf, np.array([p]), np.array([e]))
                v, p = int(got[0]), int(after[0])
            msgs.append(m)
            values.append(v)
    return np.array(msgs, np.int64), np.array(values, _U64), np.zeros(len(msgs), np.int64)


#: Tags below this are counted with `np.bincount` in a round; others (fields past 511) sorted.
_SMALL_TAGS = 1 << 12
#: Fields of one tag skipped at once in a round (`_skip_run`): repeats of a field not read.
_RUN = 64


def _value(buf: np.ndarray, wire: int, q: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The values of fields of wire type `wire` whose tags end at `q`: (value or LEN offset, LEN
    length or None, position after)."""
    if wire == VARINT:
        v, q = read_varints(buf, q, e)
        return v, None, q
    if wire == LEN:
        n, q = read_varints(buf, q, e)
        if (n > (e - q).astype(_U64)).any():
            raise WireError("a length past the end of its message")
        length = n.astype(np.int64)
        return q.astype(_U64), length, q + length
    width = 8 if wire == FIXED64 else 4
    if (q + width > e).any():
        raise WireError("a fixed-width field past the end of its message")
    return _fixed(buf, q, width), None, q + width


def _check_tag(tag: int) -> tuple[int, int]:
    number, wire = tag >> 3, tag & 7
    if number == 0 or number >= 1 << 29 or wire not in (VARINT, FIXED64, LEN, FIXED32):
        raise WireError("a field numbered 0 or out of range, a group or an unknown wire type")
    return number, wire


def _skip_run(buf: np.ndarray, tag: int, wire: int, q: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Past the fields that follow at `q` with the same one-byte tag (up to `_RUN` of them)."""
    if tag >= 0x80:
        return q
    for _ in range(_RUN):
        more = np.flatnonzero(q < e)
        more = more[buf.take(q[more]) == tag]
        if not more.size:
            break
        _, _, q[more] = _value(buf, wire, q[more] + 1, e[more])
    return q


def _round(buf: np.ndarray, idx: np.ndarray, pos: np.ndarray, end: np.ndarray, keep: _Collector) -> np.ndarray:
    """Reads the next field of each message `idx` (cursor at `pos`), keeps what is wanted, and
    returns the cursors after it: one pass per distinct tag, a field not read skipped with its run."""
    tag, p = read_varints(buf, pos, end)
    if tag.max() < _SMALL_TAGS:
        present = np.flatnonzero(np.bincount(tag.astype(np.intp)))
    else:
        present = np.unique(tag)
    for t in present.tolist():
        number, wire = _check_tag(t)
        at: Any = slice(None) if present.size == 1 else np.flatnonzero(tag == t)
        q, e = p[at], end[at]
        value, length, q = _value(buf, wire, q, e)
        w = keep.wants.get(number)
        if w is not None:
            keep.add(w, wire, idx[at], value, length)
        if w is None or w.presence:
            q = _skip_run(buf, t, wire, q, e)
        p[at] = q
    return p


def scan(buf: np.ndarray, start: np.ndarray, end: np.ndarray, wants: tuple[Want, ...]) -> Scanned:
    """The fields `wants` of the messages `buf[start[k]:end[k]]`, all read in lockstep (module docstring)."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    keep = _Collector(start.size, wants)
    for lo in range(0, start.size, _CHUNK):
        hi = min(lo + _CHUNK, start.size)
        _scan_chunk(buf, lo + np.flatnonzero(start[lo:hi] < end[lo:hi]), start[lo:hi].copy(), end[lo:hi], lo, keep)
    return keep.result(buf)


#: Messages read in lockstep at a time: what a round allocates stays small (and in the CPU's cache).
_CHUNK = 1 << 16


def _scan_chunk(buf: np.ndarray, idx: np.ndarray, pos: np.ndarray, end: np.ndarray, lo: int, keep: _Collector) -> None:
    """`scan` of the messages lo.. (`pos` and `end` theirs, `idx` those not empty)."""
    for _ in range(ROUNDS):
        if not idx.size:
            return
        p = _round(buf, idx, pos[idx - lo], end[idx - lo], keep)
        pos[idx - lo] = p
        idx = idx[p < end[idx - lo]]
    if idx.size:
        _scan_rest(buf, idx, pos, end, keep, lo)


def _read_field(data: memoryview, p: int, e: int) -> tuple[int, int, int, int, int]:
    """One field at `p` read in Python: (number, wire type, value or LEN offset, LEN length, position after)."""
    tag, p = _varint_at(data, p, e)
    number, wire = _check_tag(tag)
    if wire == VARINT:
        value, p = _varint_at(data, p, e)
        return number, wire, value, 0, p
    if wire == LEN:
        n, p = _varint_at(data, p, e)
        if n > e - p:
            raise WireError("a length past the end of its message")
        return number, wire, p, n, p + n
    width = 8 if wire == FIXED64 else 4
    if p + width > e:
        raise WireError("a fixed-width field past the end of its message")
    return number, wire, int.from_bytes(data[p : p + width], "little"), 0, p + width


def _varint_at(data: memoryview, p: int, e: int) -> tuple[int, int]:
    value = shift = 0
    for k in range(10):
        if p + k >= e:
            raise WireError("a varint runs past the end of its message")
        b = data[p + k]
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value & ((1 << 64) - 1), p + k + 1
    raise WireError("a varint longer than 10 bytes")


def _scan_rest(buf: np.ndarray, idx: np.ndarray, pos: np.ndarray, end: np.ndarray, keep: _Collector, lo: int) -> None:
    """Messages with more than `ROUNDS` runs of fields, read on one field at a time (linear in their bytes)."""
    data = buf.data
    rows: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for k in idx.tolist():
        p, e = int(pos[k - lo]), int(end[k - lo])
        while p < e:
            number, wire, value, length, p = _read_field(data, p, e)
            if number in keep.wants:
                rows.setdefault((number, wire), []).append((k, value, length))
    for (number, wire), found in rows.items():
        msgs, values, lengths = (list(c) for c in zip(*found))
        keep.add(
            keep.wants[number], wire, np.array(msgs, np.int64), np.array(values, _U64),
            np.array(lengths, np.int64), one_per_message=False,
        )  # fmt: skip


# ---- a Trace's packets ---------------------------------------------------------------------------


@cache
def _lean_trace() -> Any:
    """A message class of one field, `repeated bytes packet = 1`: a `Trace` read without its packets' insides."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="branchscope_lean_trace.proto", package="branchscope_lean", syntax="proto2")
    message = proto.message_type.add(name="LeanTrace")
    message.field.add(
        name="packet", number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("branchscope_lean.LeanTrace"))


def _varint_size(n: np.ndarray) -> np.ndarray:
    size = np.ones(n.size, np.int64)
    for k in range(1, 10):
        size += n >= (1 << (7 * k))
    return size


def frame(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges (start, end) of a `Trace`'s packets. The lengths come from upb; the offsets
    from the lengths when the file holds nothing but packets each framed the shortest way (every
    writer's form), else from a walk over the fields one at a time."""
    from google.protobuf.message import DecodeError

    try:
        packets = _lean_trace().FromString(data).packet
    except DecodeError as exc:
        raise WireError(f"not a protobuf trace ({exc})") from None
    lengths = np.fromiter(map(len, packets), dtype=np.int64, count=len(packets))
    del packets
    header = 1 + _varint_size(lengths)
    ends = np.cumsum(header + lengths)
    if ends.size and int(ends[-1]) == len(data):
        return ends - lengths, ends
    return _walk(np.frombuffer(data, np.uint8))


def _walk(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`frame`'s byte ranges for a Trace with other fields or longer headers: one field at a time."""
    data = buf.data
    starts: list[int] = []
    ends: list[int] = []
    p = 0
    while p < buf.size:
        number, wire, value, length, p = _read_field(data, p, buf.size)
        if number == 1 and wire == LEN:
            starts.append(value)
            ends.append(value + length)
    return np.array(starts, np.int64), np.array(ends, np.int64)
