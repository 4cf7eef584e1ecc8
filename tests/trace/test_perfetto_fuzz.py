"""The Perfetto reader's bounds: random bytes, our traces truncated or with bytes flipped, and absurd
length prefixes each load or fail with `TraceFormatError`, never another exception, a hang or a big
allocation. Examples are few (a few seconds in all); a hang is caught by pytest's timeout."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from branchscope.profiling import TraceFormatError, load_trace
from tests.builders import perfetto_traces as pt
from tests.builders.perfetto_traces import varint
from tests.paths import ROOT

#: Built once: the traces the examples cut and flip.
TRACES = {name: make().data for name, make in pt.ALL.items()}
#: What one load of a file of a few KB may allocate at its peak (Python and numpy memory): far
#: above what a small trace needs, far below what an absurd length prefix would ask for.
PEAK_BYTES = 64 << 20
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def load_or_refuse(path: Path) -> None:
    """Loads `path` (and reads every event's args); a TraceFormatError is a refusal, anything else
    raised fails the test; so does a peak allocation over PEAK_BYTES."""
    tracemalloc.start()
    try:
        trace = load_trace(path)
        for i in range(len(trace)):
            trace.event_args(i)
        trace.flows  # noqa: B018  (bound on first use)
    except TraceFormatError as e:
        assert str(e).strip() and "\n" not in str(e).strip()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < PEAK_BYTES, peak


def field(number: int, payload: bytes, *, length: int | None = None) -> bytes:
    """A length-delimited field `number` holding `payload`, its length `length` if given (a lie)."""
    return varint(number << 3 | 2) + varint(len(payload) if length is None else length) + payload


def _deep(depth: int) -> bytes:
    """TrackEvent.debug_annotations holding one annotation whose dict_entries nest `depth` deep (a
    reader recursing once per level must not overflow its stack)."""
    inner = b""
    for _ in range(depth):
        inner = field(11, inner)  # DebugAnnotation.dict_entries
    return field(4, inner)


#: Hand-made hostile files: each a Trace (field 1 = packet) whose lengths lie, or worse.
ABSURD = {
    "packet claims 2^62 bytes": field(1, b"\x08\x01" * 8, length=2**62),
    "packet claims 2^64-1 bytes": field(1, b"", length=2**64 - 1),
    "varint of 11 bytes": b"\x0a" + b"\xff" * 10 + b"\x01" + b"\x08\x01",
    "nested past its parent": field(1, field(11, field(23, b"x"), length=100)),  # track_event longer than its packet
    "name past the packet": field(1, field(11, varint(23 << 3 | 2) + varint(2**40) + b"abc")),
    "interned name claims 2^62": field(1, field(12, field(2, varint(8) + varint(1) + field(2, b"n", length=2**62)))),
    "packets of nothing, many": field(1, b"") * 20_000,
    "gzip of a lie": gzip.compress(field(1, b"\x08\x01", length=2**62)),
    "descriptor lengths past their parent": field(1, field(60, field(4, field(1, b"", length=7) * 3))),
    # A begin never ended (type 9 = 1, name 23) whose annotation nests 2000 deep, at timestamp 5.
    "debug annotation nested 2000 deep": field(
        1, field(11, varint(9 << 3) + varint(1) + field(23, b"deep") + _deep(2000)) + varint(8 << 3) + varint(5)
    ),
}


@pytest.mark.parametrize("name", sorted(ABSURD))
def test_absurd_lengths_are_refused_without_a_big_allocation(tmp_path: Path, name: str) -> None:
    load_or_refuse(pt.write(tmp_path / "bad.pftrace", ABSURD[name]))


def test_absurd_files_keep_the_process_small(tmp_path: Path) -> None:
    """All the absurd files loaded in a child: its peak RSS (resource) stays within 300 MB of what
    it had before the first load, whatever the C parts (gzip, protobuf) allocate."""
    script = """
import resource, sys
from pathlib import Path
from branchscope.profiling import TraceFormatError, load_trace
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for path in sys.argv[1:]:
    try:
        trace = load_trace(path)
        [trace.event_args(i) for i in range(len(trace))]
    except TraceFormatError:
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    paths = [str(pt.write(tmp_path / f"{k}.pftrace", data)) for k, data in enumerate(ABSURD.values())]
    proc = subprocess.run([sys.executable, "-c", script, *paths], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) < 300 * 1024, proc.stdout  # KiB


@given(data=st.binary(min_size=0, max_size=4096))
@FUZZ
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    load_or_refuse(pt.write(tmp_path / "r.pftrace", data))


@given(data=st.binary(min_size=1, max_size=2048))
@FUZZ
def test_random_bytes_after_a_packet_tag(tmp_path: Path, data: bytes) -> None:
    """Bytes after 0x0a (Trace.packet's tag): what is read as protobuf, not refused as not JSON."""
    load_or_refuse(pt.write(tmp_path / "r.pftrace", b"\x0a" + data))


@given(name=st.sampled_from(sorted(TRACES)), cut=st.floats(0, 1, exclude_max=True), zipped=st.booleans())
@FUZZ
def test_truncated_traces(tmp_path: Path, name: str, cut: float, zipped: bool) -> None:
    data = TRACES[name]
    data = data[: int(cut * len(data))]
    load_or_refuse(pt.write(tmp_path / "t.pftrace", gzip.compress(data) if zipped else data))


@given(name=st.sampled_from(sorted(TRACES)), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                                                      st.integers(1, 255)), min_size=1, max_size=8))  # fmt: skip
@FUZZ
def test_flipped_bytes(tmp_path: Path, name: str, flips: list[tuple[float, int]]) -> None:
    data = bytearray(TRACES[name])
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    load_or_refuse(pt.write(tmp_path / "t.pftrace", bytes(data)))


def test_truncated_gzip_of_a_trace_is_refused_in_one_line(tmp_path: Path) -> None:
    data = gzip.compress(TRACES["gpu"])
    path = pt.write(tmp_path / "t.pftrace.gz", data[: len(data) // 2])
    with pytest.raises(TraceFormatError) as caught:
        load_trace(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_refused_file_is_left_as_it_was(tmp_path: Path) -> None:
    """A refused file is left as it was (nothing written beside it)."""
    path = pt.write(tmp_path / "bad.pftrace", ABSURD["packet claims 2^62 bytes"])
    before = path.read_bytes()
    load_or_refuse(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["bad.pftrace"]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_fuzzed_traces_load_whole(tmp_path: Path, name: str) -> None:
    """The traces cut and flipped above load whole: what is refused once cut is refused by the
    protobuf reader's bounds, not as a file of another kind."""
    assert len(load_trace(pt.write(tmp_path / "t.pftrace", TRACES[name]))) > 0
