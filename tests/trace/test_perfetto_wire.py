"""The lockstep protobuf wire reader (`perfetto_wire`): varints, fields, framing, and its bounds."""

from __future__ import annotations

import random

import numpy as np
import pytest

from branchscope.profiling.trace import perfetto_wire
from branchscope.profiling.trace.perfetto_wire import (
    FIXED64,
    LEN,
    VARINT,
    Want,
    WireError,
    frame,
    read_varints,
    scan,
)
from tests.builders.perfetto_traces import varint


def field(number: int, wire: int, payload: bytes | int) -> bytes:
    tag = varint(number << 3 | wire)
    if wire == VARINT:
        assert isinstance(payload, int)
        return tag + varint(payload)
    if wire == FIXED64:
        assert isinstance(payload, int)
        return tag + payload.to_bytes(8, "little")
    assert isinstance(payload, bytes)
    return tag + varint(len(payload)) + payload


def as_buffer(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def test_varints_of_every_length_read_as_written_to_the_last_byte_of_the_buffer() -> None:
    rng = random.Random(7)
    values = [0, 1, 127, 128, 300, 2**56 - 1, 2**56, 2**63, 2**64 - 1] + [rng.getrandbits(rng.randint(1, 64)) for _ in range(500)]
    encoded = [varint(v) for v in values]
    data = b"".join(encoded)
    pos = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    got, after = read_varints(as_buffer(data), pos, np.full(pos.size, len(data)))
    assert got.tolist() == values
    assert after.tolist() == [*pos[1:].tolist(), len(data)]


@pytest.mark.parametrize("data", [varint(2**63)[:-1], varint(300)[:1], b"\xff" * 11, b"\xff" * 10 + b"\x01"])
def test_a_varint_cut_short_or_longer_than_ten_bytes_is_refused(data: bytes) -> None:
    with pytest.raises(WireError):
        read_varints(as_buffer(data), np.array([0]), np.array([len(data)]))


def test_a_varint_past_its_message_is_refused_though_the_buffer_goes_on() -> None:
    data = varint(2**40) + b"\x00" * 20
    with pytest.raises(WireError):
        read_varints(as_buffer(data), np.array([0]), np.array([3]))


def test_scan_keeps_the_last_singular_value_every_repeated_one_in_order_and_packed_ones() -> None:
    packed = b"".join(varint(v) for v in (5, 6))
    messages = [
        field(1, VARINT, 3) + field(2, LEN, b"ab") + field(3, VARINT, 10) + field(1, VARINT, 4) + field(3, VARINT, 11),
        field(3, LEN, packed) + field(4, FIXED64, 2**64 - 1) + field(9, LEN, b"skipped"),
        b"",
    ]
    data = b"".join(messages)
    ends = np.cumsum([len(m) for m in messages])
    s = scan(as_buffer(data), ends - [len(m) for m in messages], ends, (Want(1, VARINT), Want(2, LEN), Want(3, VARINT, True), Want(4, FIXED64)))
    assert s.has[1].tolist() == [True, False, False] and int(s.value[1][0]) == 4
    off, n = int(s.value[2][0]), int(s.length[2][0])
    assert data[off : off + n] == b"ab"
    msg, values, _ = s.items[3]
    assert list(zip(msg.tolist(), values.tolist())) == [(0, 10), (0, 11), (1, 5), (1, 6)]
    assert int(s.value[4][1]) == 2**64 - 1


def test_a_message_of_more_fields_than_the_lockstep_rounds_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    message = b"".join(field(1, VARINT, k) + field(2, VARINT, 2**50 + k) for k in range(40)) + field(3, LEN, b"x")
    data = message * 3
    starts = np.arange(3) * len(message)
    wants = (Want(1, VARINT), Want(2, VARINT, True), Want(3, LEN))
    fast = scan(as_buffer(data), starts, starts + len(message), wants)
    monkeypatch.setattr(perfetto_wire, "ROUNDS", 5)
    slow = scan(as_buffer(data), starts, starts + len(message), wants)
    assert fast.value[1].tolist() == slow.value[1].tolist() == [39] * 3
    assert [a.tolist() for a in fast.items[2]] == [a.tolist() for a in slow.items[2]]
    assert slow.length[3].tolist() == [1, 1, 1]


@pytest.mark.parametrize(
    "data",
    [
        field(1, LEN, b"")[:1] + varint(2**62),  # a length far past the end: no allocation of it
        field(1, VARINT, 1)[:1] + b"\x80" * 3,  # a varint running off the end
        bytes([1 << 3 | 3]) + b"\x00",  # a group
        bytes([0 << 3 | 0]) + b"\x00",  # field 0
    ],
)
def test_broken_messages_are_refused(data: bytes) -> None:
    with pytest.raises(WireError):
        scan(as_buffer(data), np.array([0]), np.array([len(data)]), (Want(1, LEN),))


def test_frame_finds_packets_written_the_shortest_way_and_any_other() -> None:
    packets = [b"\x08\x01", b"", b"\x10" + varint(2**40), b"x" * 300]
    short = b"".join(field(1, LEN, p) for p in packets)
    start, end = frame(short)
    assert [short[a:b] for a, b in zip(start.tolist(), end.tolist())] == packets
    # a length written in more bytes than needed, and an unknown top-level field: walked field by field
    odd = b"\x0a\x82\x00" + b"\x08\x01" + field(2, VARINT, 7) + field(1, LEN, b"yz")
    start, end = frame(odd)
    assert [odd[a:b] for a, b in zip(start.tolist(), end.tolist())] == [b"\x08\x01", b"yz"]


@pytest.mark.parametrize("data", [b"\x0a\x05abc", b"\x0a" + varint(2**60), b"\x0b\x00"])
def test_frame_refuses_a_trace_cut_short_or_broken(data: bytes) -> None:
    with pytest.raises(WireError):
        frame(data)


def walk(data: bytes) -> tuple[list[int], list[int]]:
    """The packets' byte ranges read one top-level field at a time: what `frame` must find."""
    starts: list[int] = []
    ends: list[int] = []
    p = 0
    while p < len(data):
        number, wire, value, length, p = perfetto_wire._read_field(memoryview(data), p, len(data))
        if number == 1 and wire == LEN:
            starts.append(value)
            ends.append(value + length)
    return starts, ends


@pytest.mark.parametrize("seed", range(6))
def test_frame_by_chained_headers_agrees_with_a_walk_field_by_field(seed: int) -> None:
    # packet bodies full of 0x0a bytes followed by lengths that lead to other 0x0a bytes (false
    # headers that chain among themselves), lengths of one, two and three bytes, empty packets
    rng = random.Random(seed)
    packets = []
    for _ in range(300):
        size = rng.choice([0, 1, 5, 127, 128, 300, 16_383, 16_384, 20_000]) if rng.random() < 0.2 else rng.randrange(0, 40)
        body = bytearray(rng.choice(b"\x0a\x02\x05\x80\xff\x00") for _ in range(size))
        packets.append(bytes(body))
    data = b"".join(field(1, LEN, p) for p in packets)
    start, end = frame(data)
    assert [data[a:b] for a, b in zip(start.tolist(), end.tolist())] == packets
    assert (start.tolist(), end.tolist()) == walk(data)


def test_frame_refuses_a_last_packet_cut_short_after_whole_ones() -> None:
    data = field(1, LEN, b"\x0a\x01\x0a") * 50 + field(1, LEN, b"x" * 200)[:-1]
    with pytest.raises(WireError, match="past the end"):
        frame(data)


def test_a_sparse_field_keeps_the_last_value_of_each_message_that_has_it() -> None:
    messages = [field(3, VARINT, 7) + field(3, VARINT, 9), b"", field(3, VARINT, 1), field(4, VARINT, 2)]
    data = b"".join(messages)
    ends = np.cumsum([len(m) for m in messages])
    s = scan(as_buffer(data), ends - [len(m) for m in messages], ends, (Want(3, VARINT, sparse=True), Want(4, VARINT, dtype="u1")))
    msg, value, _ = s.items[3]
    assert (msg.tolist(), value.tolist()) == ([0, 2], [9, 1])
    has, at = s.at(3, np.array([0, 1, 2, 3]))
    assert has.tolist() == [True, False, True, False] and at.tolist() == [9, 0, 1, 0]
    assert s.value[4].dtype == np.uint8 and s.value[4].tolist() == [0, 0, 0, 2]


@pytest.mark.parametrize("popcount", [True, False])
def test_varints_of_every_length_read_alike_with_or_without_numpys_popcount(monkeypatch: pytest.MonkeyPatch, popcount: bool) -> None:
    if not popcount:  # numpy before 2.0 has no bitwise_count: a float log2 instead
        monkeypatch.setattr(perfetto_wire, "_POPCOUNT", None)
    values = [0, 1, 127, 128, 300, 2**14, 2**21 - 1, 2**28, 2**35 + 5, 2**42, 2**49 - 1, 2**56, 2**63, 2**64 - 1]
    data = b"".join(varint(v) for v in values)
    pos = np.cumsum([0] + [len(varint(v)) for v in values[:-1]])
    got, after = read_varints(as_buffer(data), pos, np.full(len(values), len(data)))
    assert got.tolist() == values and after.tolist() == (pos + [len(varint(v)) for v in values]).tolist()


def test_frame_across_windows_other_fields_and_long_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    # windows of 64 bytes and 5 candidates: packets cross them, end on them, or are longer than one
    monkeypatch.setattr(perfetto_wire, "_FRAME_SLICE", 64)
    monkeypatch.setattr(perfetto_wire, "_FRAME_CANDIDATES", 5)
    rng = random.Random(7)
    parts = []
    for k in range(200):
        body = bytes(rng.choice(b"\x0a\x01\x7f\x80") for _ in range(rng.choice([0, 3, 40, 63, 64, 200])))
        if k % 17 == 3:
            parts.append(field(2, VARINT, k))  # another top-level field
        if k % 23 == 5:
            short = varint(len(body))  # the same length written in 5 more bytes than needed
            parts.append(b"\x0a" + short[:-1] + bytes([short[-1] | 0x80]) + b"\x80" * 4 + b"\x00" + body)
            continue
        parts.append(field(1, LEN, body))
    data = b"".join(parts)
    start, end = frame(data)
    assert (start.tolist(), end.tolist()) == walk(data)


def test_a_file_of_packet_tags_only_is_framed_in_small_windows() -> None:
    data = b"\x0a\x0a" + b"\x0a" * 10 + b"\x0a\x00" * 3  # a packet of ten 0x0a, three empty ones
    start, end = frame(data)
    assert [data[a:b] for a, b in zip(start.tolist(), end.tolist())] == [b"\x0a" * 10, b"", b"", b""]
