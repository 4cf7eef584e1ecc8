"""Hostile trace inputs: zip bombs, endless and blocking files, absurd timestamps.

Every one must end in a `TraceFormatError` (or, from the CLI, one `error: …` line and exit 2) with
memory bounded by what the reader needs, never a hang, a MemoryError, a traceback, or a window that
draws nothing. Files that could hang are only ever read in a subprocess with a timeout, and bombs
are read in a child process whose address space is limited, so that an unbounded read would fail
there (a behaviour, not a timing).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from profiling import TraceFormatError, load_trace

ROOT = Path(__file__).resolve().parent.parent
BRANCHSCOPE = Path(sys.executable).with_name("branchscope")
MIB = 1 << 20
#: A bomb inflates to this much (the compressed files are a few MB).
BOMB_MIB = 2048
#: Address space the reading child may add to what it has after its imports.
CHILD_HEADROOM_MIB = 768
#: What "small" means for the peak RSS of a child refusing a 2 GiB bomb.
SMALL_PEAK_MIB = 320


# ---- helpers ---------------------------------------------------------------------------------


def gzip_bomb(path: Path, prefix: bytes, filler: bytes, count: int, suffix: bytes = b"") -> Path:
    """A valid gzip file of `prefix + filler * count + suffix`, built without ever holding it.

    After a full flush deflate starts afresh, so the compressed form of `filler` is the same
    bytes every time and can be repeated: 2 GiB of zeros take 2 MB and half a second.
    """
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = co.compress(prefix) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(filler) + co.flush(zlib.Z_FULL_FLUSH)
    tail = co.compress(suffix) + co.flush(zlib.Z_FINISH)
    crc = zlib.crc32(prefix)
    for _ in range(count):
        crc = zlib.crc32(filler, crc)
    crc = zlib.crc32(suffix, crc)
    size = len(prefix) + len(filler) * count + len(suffix)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head)
        for _ in range(count):
            f.write(block)
        f.write(tail + struct.pack("<II", crc, size & 0xFFFFFFFF))
    return path


_LIMITED_CHILD = r"""
import json, resource, sys
import psutil
from profiling import TraceFormatError, load_trace

limit = psutil.Process().memory_info().vms + int(sys.argv[2]) * (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    trace = load_trace(sys.argv[1])
    outcome = f"loaded {len(trace)} events"
except TraceFormatError as exc:
    outcome = f"error: {exc}"
print(json.dumps({"outcome": outcome, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def load_in_limited_child(path: Path, headroom_mib: int = CHILD_HEADROOM_MIB) -> dict:
    """`load_trace(path)` in a child whose address space may grow by `headroom_mib` only."""
    proc = subprocess.run(
        [sys.executable, "-c", _LIMITED_CHILD, str(path), str(headroom_mib)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed `branchscope` command (the module when not installed), never left hanging."""
    cmd = [str(BRANCHSCOPE)] if BRANCHSCOPE.exists() else [sys.executable, "-m", "app.cli"]
    return subprocess.run(
        cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def _doc(events: list) -> bytes:
    return json.dumps({"traceEvents": events}).encode()


def _x(ts, tid: int = 1, dur=1, name: str = "op") -> dict:
    return {"ph": "X", "name": name, "cat": "cpu_op", "pid": 1, "tid": tid, "ts": ts, "dur": dur}


# ---- zip bombs and endless content -----------------------------------------------------------

BOMBS = {
    # name: (prefix, 1 MiB filler, suffix, what the error says)
    "zeros": (b"", b"\0" * MIB, b"", "0x00"),
    "json_then_zeros": (b'{"traceEvents": [', b"\0" * MIB, b"]}", "0x00"),
    "json_then_binary_junk": (b'{"traceEvents": [', bytes(range(256)) * 4096, b"]}", "not valid JSON"),
    # legal JSON text, all of it: one string of 2 GiB, and a valid document padded with spaces
    "json_then_one_long_string": (b'{"traceEvents": [{"name": "', b"x" * MIB, b'"}]}', "MiB without"),
    "valid_json_padded_with_spaces": (b'{"traceEvents": [', b" " * MIB, b"]}", "MiB without"),
    # a valid document of 700 million empty events: the text is small, decoding it is not
    "valid_json_of_empty_events": (b'{"traceEvents": [{}', b",{}" * (MIB // 3) + b",", b"{}]}", "memory"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_gzip_bomb_fails_early_with_small_memory(tmp_path: Path, name: str) -> None:
    prefix, filler, suffix, needle = BOMBS[name]
    path = gzip_bomb(tmp_path / f"{name}.json.gz", prefix, filler, BOMB_MIB * MIB // len(filler), suffix)
    assert path.stat().st_size < 40 * MIB
    result = load_in_limited_child(path)
    assert result["outcome"].startswith("error: "), result
    assert str(path) in result["outcome"] and needle in result["outcome"], result
    assert result["peak_mib"] < SMALL_PEAK_MIB, result


def test_sparse_plain_file_of_zeros_fails_early_with_small_memory(tmp_path: Path) -> None:
    path = tmp_path / "sparse.json"
    with open(path, "wb") as f:
        f.truncate(4 << 30)  # 4 GiB that take no disk
    result = load_in_limited_child(path)
    assert result["outcome"].startswith("error: ") and "0x00" in result["outcome"], result
    assert result["peak_mib"] < SMALL_PEAK_MIB, result


def test_a_real_trace_still_loads_within_its_memory(shared_traces: Path) -> None:
    path = shared_traces / "hta_gpu_memory_2streams.json.gz"  # 54 MB of JSON
    result = load_in_limited_child(path)
    assert result["outcome"] == f"loaded {len(load_trace(path))} events", result


def test_control_byte_inside_a_string_is_refused_where_it_is(tmp_path: Path) -> None:
    text = _doc([_x(1, name="a-b")]).replace(b"a-b", b"a\x01b")  # json.dumps would escape it
    path = tmp_path / "ctrl.json"
    path.write_bytes(text)
    where = text.index(b"\x01")
    with pytest.raises(TraceFormatError, match=f"0x01 at byte {where}"):
        load_trace(path)


@pytest.mark.parametrize("first", [b"\x1f\x8b", b"\xef\xbb\xbf{", b"x", b'"a"', b"1"])
def test_text_that_does_not_start_like_a_trace_is_refused(tmp_path: Path, first: bytes) -> None:
    path = tmp_path / "t.json"
    # gzip magic in the inflated text (a gzip of a gzip) is not JSON either
    path.write_bytes(zlib_gzip(first + b" " * 10) if first == b"\x1f\x8b" else first + b'{"traceEvents": []}')
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        load_trace(path)


def zlib_gzip(data: bytes) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def test_gzip_members_padding_and_whitespace_load_as_before(tmp_path: Path) -> None:
    text = _doc([_x(i) for i in range(50)])
    variants = {
        "two_members.json.gz": zlib_gzip(text[:40]) + zlib_gzip(text[40:]),
        "zero_padded.json.gz": zlib_gzip(text) + b"\0" * 512,
        "pretty.json": json.dumps(json.loads(text), indent="\t").replace("\n", "\r\n").encode(),
        "leading_space.json": b" \n\t\r" * 1000 + text,
    }
    for name, content in variants.items():
        (tmp_path / name).write_bytes(content)
        assert len(load_trace(tmp_path / name)) == 50, name


# ---- files that are not regular files --------------------------------------------------------


def _special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "trace.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()  # the socket file stays
    link = tmp_path / "link-to-fifo.json"
    link.symlink_to(fifo)
    return {"fifo": fifo, "socket": sock_path, "symlink_to_fifo": link, "dev_zero": Path("/dev/zero")}


_LOAD_CHILD = r"""
import sys
from profiling import TraceFormatError, load_trace
try:
    load_trace(sys.argv[1])
except TraceFormatError as exc:
    print(exc)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX only")
def test_special_files_are_refused_by_load_trace_without_opening_them(tmp_path: Path) -> None:
    for kind, path in _special_files(tmp_path).items():
        # in a child: a FIFO opened for reading would block this test forever
        proc = subprocess.run(
            [sys.executable, "-c", _LOAD_CHILD, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (kind, proc.stderr[-2000:])
        assert str(path) in proc.stdout and "not a regular file" in proc.stdout, (kind, proc.stdout)


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX only")
def test_inspect_refuses_special_files_in_one_line_and_exit_2(tmp_path: Path) -> None:
    for _kind, path in _special_files(tmp_path).items():
        assert_one_error_line(cli("inspect", str(path)), str(path), "not a regular file")
        assert_one_error_line(cli("inspect", "--json", str(path)), "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_open_refuses_a_fifo_in_one_line_and_exit_2(tmp_path: Path) -> None:
    fifo = _special_files(tmp_path)["fifo"]
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    # with a display (offscreen counts as one) and without --screenshot: must not open a window
    assert_one_error_line(cli("open", str(fifo), env=env), str(fifo), "not a regular file")
    shot = tmp_path / "shot.png"
    assert_one_error_line(cli("open", str(fifo), "--screenshot", str(shot), env=env), "not a regular file")
    assert not shot.exists()


def test_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="is a folder"):
        load_trace(tmp_path)
    assert_one_error_line(cli("inspect", str(tmp_path)), "is a folder")


def test_a_dropped_fifo_is_not_opened_as_a_model(tmp_path: Path) -> None:
    from app.main_window import is_model_file

    fifo = _special_files(tmp_path)["fifo"]
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from app.main_window import is_model_file; "
         "print(is_model_file(sys.argv[1]))", str(fifo)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )  # fmt: skip
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]
    assert is_model_file(str(tmp_path / "m.py"))  # named .py: a model, without opening it


# ---- timestamps ------------------------------------------------------------------------------

EPOCH_US = 1_700_000_000_000_000  # µs since 1970, late 2023
#: The reader's limit is 2**61 ns; the largest µs it takes, and that same far in the past.
EDGE_US = (1 << 61) // 1000 - 1

STRAY = {
    # name: events
    "zero_and_epoch": [_x(0, tid=1)] + [_x(EPOCH_US + i, tid=2 + i) for i in range(3)],
    "zero_and_epoch_nested": [_x(0, tid=1), _x(EPOCH_US, tid=1, dur=10), _x(EPOCH_US + 1, tid=1, dur=2)]
    + [_x(EPOCH_US + i, tid=2 + i) for i in range(40)],
    "negative_and_epoch": [_x(-EPOCH_US, tid=t) for t in range(3)] + [_x(EPOCH_US, tid=t) for t in range(3)],
    "both_edges": [_x(-EDGE_US, tid=t, dur=1) for t in range(4)] + [_x(EDGE_US, tid=t, dur=0) for t in range(4)],
    "edge_with_long_event": [_x(-EDGE_US, tid=1, dur=EDGE_US), _x(EDGE_US - 5, tid=2, dur=4), _x(0, tid=3)],
    "float_epoch": [_x(0.5, tid=1), _x(1.7e15, tid=2), _x(1.7e15 + 0.25, tid=3), _x(1.7e15 + 7.125, tid=4)],
}
REFUSED = {
    "ts_1e300": [_x(0), _x(1e300, tid=2)],
    "ts_minus_1e300": [_x(0), _x(-1e300, tid=2)],
    "dur_1e300": [_x(0, dur=1e300)],
    "ts_nan_string": [_x(0), _x("NaN", tid=2)],
    "ts_inf_string": [_x(0), _x("Infinity", tid=2)],
    "ts_minus_inf_string": [_x(0), _x("-inf", tid=2)],
    "ts_1e400_string": [_x(0), _x("1e400", tid=2)],
    "ts_hex_string": [_x(0), _x("0x10", tid=2)],
    "ts_past_the_edge": [_x(0), _x(EDGE_US + 1, tid=2)],
}


@pytest.mark.parametrize("name", sorted(STRAY))
def test_stray_timestamps_load(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(_doc(STRAY[name]))
    trace = load_trace(path)
    assert len(trace) == len(STRAY[name])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_absurd_timestamps_are_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(_doc(REFUSED[name]))
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_inspect_on_stray_and_absurd_timestamps(tmp_path: Path) -> None:
    for name, events in {**STRAY, **REFUSED}.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(_doc(events))
        proc = cli("inspect", "--json", str(path))
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-3000:])
        if name in STRAY:
            assert proc.returncode == 0, (name, proc.stderr)
            doc = json.loads(proc.stdout)
            assert doc["events"] == len(events)
        else:
            assert_one_error_line(proc, str(path))
