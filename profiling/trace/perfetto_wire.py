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

`frame` splits a whole `Trace` (field 1, `packet`, repeated) into its packets' byte ranges with
numpy and no copy of the file: the chain of candidate headers (bytes 0x0a) from byte 0, found by
doubling a window at a time; a field of another kind where the chain stops is read on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    length = np.where(lowest == 0, 8, _bytes_to(lowest))
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


def _bytes_to(lowest: np.ndarray) -> np.ndarray:
    """How many bytes up to and including the one whose top bit `lowest` is (one bit set, or 0),
    from its count of trailing zeros: an integer popcount where numpy has it (2.0+), else log2."""
    if _POPCOUNT is not None:
        return (_POPCOUNT(np.maximum(lowest, _U64(1)) - _U64(1)).astype(np.int64) + 1) >> 3
    return (np.log2(np.maximum(lowest, 1).astype(np.float64)).astype(np.int64) + 1) >> 3


_POPCOUNT = getattr(np, "bitwise_count", None)


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
    #: A singular field few messages have: kept as `Scanned.items` (the last of each message), not
    #: as columns as long as the messages.
    sparse: bool = False
    #: The dtype its values are kept in (a singular field's column; larger values saturate).
    dtype: str = "u8"


@dataclass
class Scanned:
    """What `scan` kept of n messages. Singular field f: `value[f]` (`Want.dtype`, uint64 unless
    said; a LEN field's offset into the buffer), `length[f]` (LEN fields), `has[f]`. Repeated or
    sparse field f: `items[f]` = (message index, value, length) in message order, values (uint64)
    in the order written (a sparse field: the last of each message)."""

    n: int
    value: dict[int, np.ndarray] = field(default_factory=dict)
    length: dict[int, np.ndarray] = field(default_factory=dict)
    has: dict[int, np.ndarray] = field(default_factory=dict)
    items: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def get(self, number: int, default: int = 0) -> np.ndarray:
        """Field `number`'s values (uint64), `default` where a message lacks it."""
        values = self.value[number]
        return np.where(self.has[number], values, _U64(default)) if default else values

    def at(self, number: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sparse field `number` of messages `rows` (ascending): whether each has it, and its value (uint64)."""
        msg, value, _ = self.items[number]
        k = np.minimum(np.searchsorted(msg, rows), max(msg.size - 1, 0))
        has = msg[k] == rows if msg.size else np.zeros(rows.size, bool)
        return has, np.where(has, value[k] if msg.size else _U64(0), _U64(0))


class _Collector:
    """Keeps the fields asked for as rounds find them (`add`), then gives a `Scanned`."""

    def __init__(self, n: int, wants: tuple[Want, ...]) -> None:
        self.wants = {w.number: w for w in wants}
        self.out = Scanned(n)
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self.packed: list[tuple[Want, np.ndarray, np.ndarray, np.ndarray]] = []
        for w in wants:
            if w.repeated or w.sparse:
                self.parts[w.number] = []
            else:
                self.out.has[w.number] = np.zeros(n, bool)
                if not w.presence:
                    self.out.value[w.number] = np.zeros(n, w.dtype)
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
        if w.repeated or w.sparse:
            self.parts[f].append((msg, value, length))
            return
        if not one_per_message:  # the last of a message wins
            last = msg.size - 1 - np.unique(msg[::-1], return_index=True)[1]
            msg, value, length = msg[last], value[last], length[last]
        self.out.has[f][msg] = True
        if not w.presence:
            column = self.out.value[f]
            self.out.value[f][msg] = value if column.dtype == _U64 else np.minimum(value, _U64(np.iinfo(column.dtype).max))
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
            msg = msg[order]
            if self.wants[f].sparse:  # the last of each message
                last = np.concatenate([msg[1:] != msg[:-1], [True]])
                order, msg = order[last], msg[last]
            self.out.items[f] = (msg, np.concatenate([p[1] for p in parts])[order], np.concatenate([p[2] for p in parts])[order])
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

#: The window of the file `frame` chains packets in at a time: bytes, and candidate headers at most.
_FRAME_SLICE, _FRAME_CANDIDATES = 1 << 20, 1 << 16
_PACKET_TAG = 0x0A  # field 1 (packet), LEN
#: The most bytes of a packet's length varint (2^35 bytes): a longer one is no packet header here.
_LENGTH_BYTES = 5


def frame(data: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges (start, end) of a `Trace`'s packets, found with numpy, no copy of the file.

    Every byte 0x0a (field 1, LEN: a packet's tag) is a candidate header, and its length varint
    gives where the next header would be (`_chain_links`). The packets are the chain of candidates
    from byte 0 (`_chain_from_start`, by doubling: a few passes over the candidates, not one step
    per packet), found a window of the file at a time (`_FRAME_SLICE` bytes, `_FRAME_CANDIDATES`
    candidates at most: what it allocates stays small whatever the file holds). Where the chain
    stops at a byte that is no such header (another top-level field, a length written in more than
    `_LENGTH_BYTES` bytes), that field is read on its own (`_read_field`) and the chain goes on."""
    buf = np.frombuffer(data, np.uint8)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    p = 0
    while p < buf.size:
        stop = _frame_window(buf, p, starts, ends)
        if stop > p:
            p = stop
            continue
        number, wire, value, length, p = _read_field(buf.data, p, buf.size)
        if number == 1 and wire == LEN:
            starts.append(np.array([value], offsets(buf.size)))
            ends.append(np.array([value + length], offsets(buf.size)))
    if not starts:
        return np.zeros(0, offsets(buf.size)), np.zeros(0, offsets(buf.size))
    start = np.concatenate(starts)
    del starts
    return start, np.concatenate(ends)


def _frame_window(buf: np.ndarray, p: int, starts: list[np.ndarray], ends: list[np.ndarray]) -> int:
    """The packets chained from a header at byte `p` within one window, added to `starts` and
    `ends`; where the chain stops (`p`: no header there)."""
    hi = min(p + _FRAME_SLICE, buf.size)
    cand = np.flatnonzero(buf[p:hi] == _PACKET_TAG)[:_FRAME_CANDIDATES] + p
    if not cand.size or cand[0] != p:
        return p
    nbytes, after, nxt = _chain_links(buf, cand)
    path = _chain_from_start(nxt)
    del nxt
    last = int(path[-1])
    if not nbytes[last] or after[last] > buf.size:  # no length there, or one past the file: read on its own
        path, stop = path[:-1], int(cand[last])
    else:
        stop = int(after[last])
    dtype = offsets(buf.size)
    starts.append((cand[path] + 1 + nbytes[path]).astype(dtype))
    ends.append(after[path].astype(dtype))
    return stop


def offsets(size: int) -> type:
    """The dtype of byte offsets into a file of `size` bytes: int32 below 2 GiB (half the memory)."""
    return np.int32 if size < 1 << 31 else np.int64


def _chain_links(buf: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each candidate header: the bytes of its length varint (uint8; 0: none readable), where
    its packet would end (int64), and the index of the candidate there (int32; `cand.size`: none,
    the chain stops there)."""
    at = cand + 1
    nbytes, length = _lengths(buf, at)
    after = at + nbytes + length
    after[nbytes == 0] = buf.size + 1  # no header: past the file, the chain stops there
    k = np.searchsorted(cand, after)
    hit = k < cand.size
    hit[hit] = cand[k[hit]] == after[hit]
    return nbytes, after, np.where(hit, k, cand.size).astype(np.int32)


def _lengths(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The length varint at each position (of at most `_LENGTH_BYTES` bytes): its bytes (0: none
    there, or a longer one) and value (clipped past the file's size). One or two bytes by gathers,
    longer ones from 8 bytes read at once."""
    one = _tail_byte(buf, at)
    two = _tail_byte(buf, at + 1)
    n = np.where(one < 0x80, 1, np.where(two < 0x80, 2, 0)).astype(np.uint8)
    length = (one & 0x7F).astype(np.int64) | ((two & 0x7F).astype(np.int64) << 7) * (n == 2)
    n[at >= buf.size] = 0
    n[(at + 1 >= buf.size) & (n == 2)] = 0
    long = np.flatnonzero((n == 0) & (at < buf.size))
    if long.size:
        words = _words(buf, at[long])
        stop = ~words & _U64(0x8080808080)  # the last byte: the first without its high bit
        lowest = stop & (~stop + _U64(1))
        size = np.where(lowest == 0, 0, _bytes_to(lowest))
        words &= np.where(lowest == 0, _U64(0), (lowest << _U64(1)) - _U64(1))
        value = words & _U64(0x7F)
        for k in range(1, _LENGTH_BYTES):
            value |= ((words >> _U64(8 * k)) & _U64(0x7F)) << _U64(7 * k)
        size[at[long] + size > buf.size] = 0
        n[long], length[long] = size, np.minimum(value, _U64(buf.size + 1)).astype(np.int64)
    return n, length


def _chain_from_start(nxt: np.ndarray) -> np.ndarray:
    """The candidates on the chain from candidate 0, in order. By doubling: `jump` leads 2^k links
    on, and the first 2^(k+1) of the chain are the first 2^k and where `jump` leads each."""
    none = nxt.size
    jump = np.append(nxt, np.int32(none))  # the chain's end leads to itself
    path = np.zeros(1, np.int32)
    while True:
        ahead = jump.take(path, mode="clip")
        on = ahead < none
        path = np.concatenate([path, ahead[on]])
        if not on.all():
            return path
        jump = jump.take(jump, mode="clip")  # (every index is in range: no check needed)
