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

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from branchscope.app.pages.run_page import RunPage
from branchscope.profiling import Trace, TraceFormatError, load_trace
from tests.builders.runs import write_small_trace
from tests.paths import ROOT

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
from branchscope.profiling import TraceFormatError, load_trace

limit = psutil.Process().memory_info().vms + int(sys.argv[2]) * (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    trace = load_trace(sys.argv[1])
    outcome = f"loaded {len(trace)} events"
except TraceFormatError as exc:
    outcome = f"error: {exc}"
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a big pytest
# process would report its parent's size; VmHWM belongs to this address space only.
try:
    with open("/proc/self/status") as f:
        peak_kib = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"outcome": outcome, "peak_mib": peak_kib / 1024}))
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
    cmd = [str(BRANCHSCOPE)] if BRANCHSCOPE.exists() else [sys.executable, "-m", "branchscope.app.cli"]
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
from branchscope.profiling import TraceFormatError, load_trace
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
    from branchscope.app.main_window import is_model_file

    fifo = _special_files(tmp_path)["fifo"]
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from app.main_window import is_model_file; "
         "print(is_model_file(sys.argv[1]))", str(fifo)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )  # fmt: skip
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]
    (tmp_path / "m.py").write_text("")
    assert is_model_file(str(tmp_path / "m.py"))  # a file named .py: a model, without opening it


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


# ---- through the timeline --------------------------------------------------------------------


@pytest.fixture
def views(qtbot):
    from branchscope.widgets.memory_view import MemoryView
    from branchscope.widgets.pool_usage import PoolUsageView
    from branchscope.widgets.time_axis import TimeAxis
    from branchscope.widgets.timeline import TimelineView

    axis = TimeAxis()
    made = [TimelineView(axis=axis), PoolUsageView(axis=axis), MemoryView(axis=axis)]
    for v in made:
        qtbot.addWidget(v)
        v.resize(1000, 400)
        v.show()
    return made


def _shown_events(view) -> int:
    """How many events the last frame drew: each visible event gets at least one pixel column."""
    rows = np.array([r for lr in view.lane_rows for r in lr.rows], dtype=np.int64)
    lo, hi = view.axis.lo, view.axis.hi
    vis = view.lod.visible(rows, lo, hi, (hi - lo) / view.plot_width())
    return int(vis.index.size) if vis.raw else int(vis.level.rep[vis.index].size)


def _show_all(views, trace: Trace) -> None:
    for v in views:
        v.set_trace(trace)
        v.grab()  # paints; pytest-qt fails the test on an exception in paintEvent


@pytest.mark.parametrize("name", sorted(STRAY))
def test_the_timeline_draws_every_event_of_a_stray_timestamp_trace(views, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(_doc(STRAY[name]))
    trace = load_trace(path)
    timeline = views[0]
    _show_all(views, trace)
    timeline.resize(1000, timeline.content_height + 60)  # every lane on screen
    timeline.grab()
    assert timeline.lod is not None and timeline.lod.trace is trace
    assert sorted(timeline.painted_lanes) == list(range(len(trace.lanes)))
    assert _shown_events(timeline) == len(trace)  # 40 lanes of one event each: all there
    # zoomed in as far as it goes on each event: drawn, and the hover finds it
    for i in range(len(trace)):
        timeline.zoom_to_event(i)
        for _ in range(30):
            timeline.axis.zoom(0.25, timeline.axis.lo + (timeline.axis.hi - timeline.axis.lo) / 2)
        timeline.grab()
        rect = timeline.event_rect(i)
        assert rect is not None and rect.width() >= 1
        assert timeline.axis.hi > timeline.axis.lo
        assert timeline.event_at(rect.center()) == i  # hit-testing is exact out there too


def test_the_timeline_indexes_the_next_trace_after_a_stray_one(views, tmp_path: Path) -> None:
    normal = tmp_path / "normal.json"
    normal.write_bytes(_doc([_x(10 + i, tid=1 + i % 3) for i in range(20)]))
    stray = tmp_path / "stray.json"
    stray.write_bytes(_doc(STRAY["zero_and_epoch"]))
    for path in (normal, stray, normal):
        trace = load_trace(path)
        _show_all(views, trace)
        assert views[0].lod.trace is trace and _shown_events(views[0]) == len(trace)


timestamps = st.one_of(
    st.sampled_from([0, 1, -1, EPOCH_US, -EPOCH_US, EDGE_US, -EDGE_US, 1.7e15, 0.001, 1e300, "NaN", "1e400"]),
    st.integers(-EDGE_US, EDGE_US),
    st.floats(-2e15, 2e15, allow_nan=False),
)
durations = st.one_of(st.sampled_from([0, 1, 0.5, EPOCH_US, EDGE_US]), st.integers(0, 10**9))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(
        st.tuples(timestamps, durations, st.integers(1, 6)).map(lambda t: _x(t[0], tid=t[2], dur=t[1])),
        min_size=1,
        max_size=12,
    )
)
def test_any_trace_the_reader_takes_is_drawn(views, tmp_path: Path, events: list) -> None:
    path = tmp_path / "h.json"
    path.write_bytes(_doc(events))
    try:
        trace = load_trace(path)
    except TraceFormatError:
        return
    _show_all(views, trace)
    assert views[0].lod.trace is trace
    assert _shown_events(views[0]) == len(trace)


# ---- the level-of-detail index over spans of centuries (Qt-free) -----------------------------


def _spread_trace(seed: int, n: int = 3000, lanes: int = 40):
    """Clusters of events at both ends of what the reader takes, at 0 and at epoch time."""
    from branchscope.profiling.trace.model import Lane, build_trace

    rng = np.random.default_rng(seed)
    edge = (1 << 61) - 10**8
    base = rng.choice(np.array([-edge, 0, EPOCH_US * 1000, edge], dtype=np.int64), n)
    start = base + rng.integers(0, 50_000_000, n)
    dur = rng.lognormal(np.log(30_000), 1.5, n).astype(np.int64)
    dur[rng.random(n) < 0.05] = 0  # instants too
    return build_trace(
        path="spread",
        start_ns=start,
        dur_ns=dur,
        lane=rng.integers(0, lanes, n),
        name_id=np.zeros(n, np.int32),
        cat_id=np.zeros(n, np.int32),
        names=["op"],
        cats=["cpu_op"],
        lanes=[Lane(i, "cpu", 1, i, f"t{i}", "other") for i in range(lanes)],
    )


def _windows(lod) -> list[tuple[float, float]]:
    """Windows on each cluster at several zooms, and the whole span, as float ns from the start."""
    out = [(0.0, float(lod.span_ns))]
    for centre in np.unique((lod.trace.start_ns - lod.t0) // (1 << 40)):
        c = float(int(centre) << 40) + 25e6
        out += [(c - w, c + w) for w in (3e7, 1e6, 2e4)]
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_lod_finds_exactly_the_visible_events_across_a_huge_span(seed: int) -> None:
    import math

    from branchscope.widgets.lod import TimelineLod

    trace = _spread_trace(seed)
    lod = TimelineLod(trace)
    assert lod.shift > 0  # rows x span would overflow int64 keys
    rows = np.arange(lod.n_rows)
    row_of = lod.row_base[trace.lane] + np.minimum(trace.depth, lod.row_cap - 1)
    s = trace.start_ns - lod.t0
    e = s + trace.dur_ns
    for lo, hi in _windows(lod):
        vis = lod.visible(rows, lo, hi, (hi - lo) / 800, exact_budget=10**9)
        assert vis.raw
        lo_i = math.floor(lo) - int(math.ulp(lo))  # the window stands for any time within a float step
        hi_i = math.ceil(hi) + int(math.ulp(hi))
        instant = s == e
        expected = np.flatnonzero(((e > lo_i) | (instant & (s >= lo_i))) & ((s < hi_i) | (instant & (s <= hi_i))))
        got = vis.level.rep[vis.index]
        assert sorted(got.tolist()) == sorted(expected.tolist())
        assert (row_of[got] == rows[vis.row_pos]).all()
        assert (vis.start_rel == s[got]).all() and (vis.end_rel == e[got]).all()  # exact times


@pytest.mark.parametrize("seed", [0, 1])
def test_lod_runs_cover_every_pixel_the_events_cover_across_a_huge_span(seed: int) -> None:
    from branchscope.widgets.lod import TimelineLod, rasterize

    trace = _spread_trace(seed)
    lod = TimelineLod(trace)
    assert all(level.threshold_ns >= 1 << lod.shift for level in lod.levels[1:])
    rows = np.arange(lod.n_rows)
    row_of = lod.row_base[trace.lane] + np.minimum(trace.depth, lod.row_cap - 1)
    s = (trace.start_ns - lod.t0).astype(np.float64)
    e = s + trace.dur_ns
    width = 400
    for lo, hi in _windows(lod):
        nspp = (hi - lo) / width
        vis = lod.visible(rows, lo, hi, nspp, exact_budget=0)
        x0 = np.clip(np.floor((vis.start_rel - lo) / nspp), 0, width - 1).astype(np.int64)
        x1 = np.maximum(np.clip(np.ceil((vis.end_rel - lo) / nspp), 0, width).astype(np.int64), x0 + 1)
        _, cov = rasterize(vis.row_pos, x0, x1, np.ones(x0.size, np.uint32), rows.size, width, 0)
        for i in np.flatnonzero((e >= lo) & (s <= hi)):
            a = int(np.clip(np.floor((s[i] - lo) / nspp), 0, width - 1))
            b = max(a + 1, int(np.clip(np.ceil((e[i] - lo) / nspp), 0, width)))
            assert cov[row_of[i], a:b].all(), (lo, hi, i)


# ---- the window: a trace it cannot show leaves it as it was ----------------------------------



_small_trace = write_small_trace


def test_the_window_shows_a_stray_timestamp_trace_after_another(window, tmp_path: Path) -> None:
    first = _small_trace(tmp_path / "first.json")
    stray = tmp_path / "stray.json"
    stray.write_bytes(_doc(STRAY["zero_and_epoch"]))
    assert window.open_trace_files([str(first), str(stray)]) == 2
    assert window.run_list.current == 1 and window.page(RunPage).timeline.lod.trace is window.run_list.entries[1].trace
    window.grab()
    assert _shown_events(window.page(RunPage).timeline) == 4
    assert window.message_box is None


@pytest.mark.parametrize("failing", ["timeline", "pool"])
def test_a_view_that_cannot_show_a_trace_leaves_every_view_as_it_was(window, tmp_path, monkeypatch, failing):

    first = _small_trace(tmp_path / "first.json", "fork")
    assert window.open_trace_files([str(first)]) == 1
    shown = window.run_list.entries[0].trace
    window.page(RunPage).workspace.axis.set_view(1000.0, 5000.0)
    title, lod = window.windowTitle(), window.page(RunPage).timeline.lod
    import branchscope.widgets.pool_usage
    import branchscope.widgets.timeline

    widgets = branchscope.widgets
    module, name = (widgets.timeline, "_derive") if failing == "timeline" else (widgets.pool_usage, "_pool_data")
    real = getattr(module, name)

    def fail_on_second(trace, *args):
        if "second" in trace.path:
            raise ValueError("this view cannot show it")
        return real(trace, *args)

    monkeypatch.setattr(module, name, fail_on_second)
    second = _small_trace(tmp_path / "second.json", "sequential")
    assert window.open_trace_files([str(second)]) == 0
    box = window.message_box
    assert box is not None and box.isVisible()
    assert str(second) in box.text() and "this view cannot show it" in box.text()
    # nothing half-set: every view, the list and the title still show the first trace
    assert window.run_list.entries == window.run_list.entries[:1] and window.runs_table.rowCount() == 1
    assert window.run_list.current == 0 and window.runs.currentIndex().row() == 0
    assert window.page(RunPage).timeline.trace is shown and window.page(RunPage).timeline.lod is lod
    assert window.page(RunPage).workspace.panel("pool").trace is shown and window.page(RunPage).workspace.panel("memory").trace is shown and window.side_panel.details._trace is shown
    assert (window.page(RunPage).workspace.axis.lo, window.page(RunPage).workspace.axis.hi) == (1000.0, 5000.0)
    assert window.windowTitle() == title
    window.grab()  # and it still draws
    # the window goes on: a trace the views can show opens
    third = _small_trace(tmp_path / "third.json", "sequential")
    assert window.open_trace_files([str(third)]) == 1 and window.run_list.current == 1


def test_a_view_that_fails_while_showing_rolls_every_view_back(window, tmp_path, monkeypatch) -> None:
    first = _small_trace(tmp_path / "first.json", "fork")
    assert window.open_trace_files([str(first)]) == 1
    shown = window.run_list.entries[0].trace
    real = window.page(RunPage).workspace.panel("memory").set_trace

    def fail_on_second(trace):
        if trace is not None and "second" in trace.path:
            raise RuntimeError("memory view broke")
        real(trace)

    monkeypatch.setattr(window.page(RunPage).workspace.panel("memory"), "set_trace", fail_on_second)
    second = _small_trace(tmp_path / "second.json", "sequential")
    assert window.open_trace_files([str(second)]) == 0
    assert "memory view broke" in window.message_box.text()
    assert window.page(RunPage).timeline.trace is shown and window.page(RunPage).workspace.panel("pool").trace is shown and window.page(RunPage).workspace.panel("memory").trace is shown
    assert window.page(RunPage).timeline.lod.trace is shown


_FAILING_PAINT = r"""
import sys
import branchscope.widgets.memory_view as memory_view

def boom(self, painter):
    raise ValueError("the memory view cannot draw this")

memory_view.MemoryView._paint = boom
from branchscope.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_screenshot_fails_in_one_line_when_a_view_cannot_draw(tmp_path: Path) -> None:
    trace = _small_trace(tmp_path / "t.json")
    shot = tmp_path / "shot.png"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", _FAILING_PAINT, "open", str(trace), "--screenshot", str(shot)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cannot draw this" in lines[0], proc.stderr
    assert not shot.exists()


def test_screenshot_of_a_stray_timestamp_trace_draws_it(tmp_path: Path) -> None:
    stray = tmp_path / "stray.json"
    stray.write_bytes(_doc(STRAY["zero_and_epoch"]))
    shot = tmp_path / "shot.png"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    proc = cli("open", str(stray), "--screenshot", str(shot), env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert shot.is_file()


def test_an_error_in_a_slot_or_a_paint_is_shown_once(window, qtbot) -> None:
    try:
        raise ValueError("drawing failed")
    except ValueError as exc:
        for _ in range(3):  # a view raising on every repaint
            window.failures.report_exception(type(exc), exc, exc.__traceback__)
    qtbot.waitUntil(lambda: window.message_box is not None and window.message_box.isVisible())
    assert window.failures.messages == ["ValueError: drawing failed"]
    assert "drawing failed" in window.message_box.text()
    assert "Traceback" in window.message_box.detailedText()
