"""Broken files give a `TraceFormatError` naming the file and the problem: never a crash or a hang."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from branchscope.profiling import Trace, TraceFormatError, load_trace

GOOD_EVENT = {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10, "dur": 5}


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def _doc(events: list) -> bytes:
    return json.dumps({"traceEvents": events}).encode()


CASES = {
    "empty": (b"", "empty file"),
    "whitespace": (b"  \n\t ", "empty file"),
    "not_json": (b"hello, world", "not valid JSON"),
    "truncated_json": (_doc([GOOD_EVENT])[:-7], "not valid JSON"),
    "no_trace_events": (b'{"schemaVersion": 1}', "no 'traceEvents'"),
    "trace_events_not_list": (b'{"traceEvents": {"a": 1}}', "unexpected trace structure"),
    "event_not_object": (_doc([1, 2, 3]), "unexpected trace structure"),
    "name_wrong_type": (_doc([{**GOOD_EVENT, "name": 5}]), "unexpected trace structure"),
    "ts_wrong_type": (_doc([{**GOOD_EVENT, "ts": [1]}]), "timestamp"),
    "ts_garbage_string": (_doc([{**GOOD_EVENT, "ts": "soon"}]), "malformed events"),
    "ts_huge": (_doc([{**GOOD_EVENT, "ts": 10**30}]), "out of range"),
    "ts_nan": (b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": "nan", "dur": 1}]}', "not finite"),
    "negative_dur": (_doc([{**GOOD_EVENT, "dur": -5}]), "negative duration"),
    "deep_nesting": (b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", ""),
    "deep_nesting_in_args": (
        b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": '
        + b"[" * 200_000
        + b"]" * 200_000
        + b"}]}",
        "",
    ),
    "memory_args_wrong": (
        _doc([{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Bytes": "x"}}]),
        "memory",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_content_raises_trace_format_error(tmp_path: Path, case: str) -> None:
    content, needle = CASES[case]
    path = _write(tmp_path, f"{case}.json", content)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert str(path) in message
    assert needle in message
    assert isinstance(info.value, ValueError)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_trace(tmp_path / "nope.json")


def test_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="is a folder"):
        load_trace(tmp_path)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(_doc([GOOD_EVENT] * 200))
    path = _write(tmp_path, "cut.json.gz", data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace(path)


def test_fake_gzip_magic_then_garbage(tmp_path: Path) -> None:
    path = _write(tmp_path, "fake.json.gz", b"\x1f\x8b" + b"definitely not deflate" * 10)
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace(path)


def test_gz_name_with_plain_json_content_loads(tmp_path: Path) -> None:
    # Named .gz but not compressed: the content decides, as it does for Perfetto.
    path = _write(tmp_path, "plain.json.gz", _doc([GOOD_EVENT]))
    assert len(load_trace(path)) == 1


def test_bare_event_array_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "array.json", json.dumps([GOOD_EVENT, GOOD_EVENT]).encode())
    assert len(load_trace(path)) == 2


def test_string_timestamps_and_pseudo_processes(tmp_path: Path) -> None:
    events = [
        {**GOOD_EVENT, "ts": "100.5", "dur": "2.25"},
        {**GOOD_EVENT, "pid": "Spans", "tid": "PyTorch Profiler"},
        {**GOOD_EVENT, "pid": "", "tid": ""},
    ]
    trace = load_trace(_write(tmp_path, "s.json", _doc(events)))
    assert len(trace) == 1
    assert int(trace.start_ns[0]) == 100_500 and int(trace.dur_ns[0]) == 2_250


def test_empty_event_list_is_an_empty_trace(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, "e.json", _doc([])))
    assert len(trace) == 0 and trace.lanes == [] and trace.span() == (0, 0)


def test_inspect_prints_one_error_line_and_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.json", b"{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "branchscope.app.cli", "inspect", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]
    assert "Traceback" not in proc.stderr


# ---- property-based: mutate a real trace, expect a Trace or a TraceFormatError ---------------

SEED_EVENTS = [
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "thread 8 (PTThreadPool)"}},
    {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    {"ph": "X", "name": "step 0", "cat": "user_annotation", "pid": 7, "tid": 7, "ts": 100, "dur": 50,
     "args": {"External id": 1}},
    {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 7, "tid": 8, "ts": 110.5, "dur": 20.125,
     "args": {"Input Dims": [[2, 3], [3, 4]]}},
    {"ph": "X", "name": "kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": 120, "dur": 5,
     "args": {"stream": 7, "device": 0}},
    {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 7, "tid": 8, "ts": 111},
    {"ph": "f", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 120, "bp": "e"},
    {"ph": "i", "name": "[memory]", "pid": 7, "tid": 8, "ts": 112,
     "args": {"Device Type": 1, "Device Id": 0, "Bytes": 64, "Total Allocated": 64}},
    {"ph": "C", "name": "thread 8 (x)", "cat": "cpu_sample", "pid": 7, "tid": 8, "ts": 113, "args": {"cpu_pct": 50}},
]

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
FIELDS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args"]


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    events = json.loads(json.dumps(SEED_EVENTS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "delete", "drop_event", "dup_event", "truncate"]))
        if not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        if kind == "set":
            events[i][draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif kind == "delete":
            events[i].pop(draw(st.sampled_from(FIELDS)), None)
        elif kind == "drop_event":
            events.pop(i)
        elif kind == "dup_event":
            events.append(json.loads(json.dumps(events[i])))
        else:
            text = json.dumps({"traceEvents": events}).encode()
            return text[: draw(st.integers(0, len(text)))]
    return json.dumps({"traceEvents": events}).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=mutated_traces())
def test_mutated_traces_give_trace_or_format_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(data)
    try:
        trace = load_trace(path)
    except TraceFormatError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(trace, Trace)
    # A trace that loads is usable end to end.
    trace.span()
    _ = trace.flows
    for i in range(len(trace)):
        trace.event(i)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0), flip=st.integers(0, 10_000))
def test_mutated_real_trace_bytes(shared_traces: Path, tmp_path: Path, cut: float, flip: int) -> None:
    """Cut and corrupt a real public trace's bytes (compressed and not)."""
    raw = (shared_traces / "hta_event_sync_multi_stream.json.gz").read_bytes()
    text = gzip.decompress(raw)
    variants = [raw[: int(len(raw) * cut)], text[: int(len(text) * cut)]]
    flipped = bytearray(text)
    flipped[flip % len(flipped)] ^= 0x5A
    variants.append(bytes(flipped))
    for j, content in enumerate(variants):
        path = tmp_path / f"v{j}.json.gz"
        path.write_bytes(content)
        try:
            assert isinstance(load_trace(path), Trace)
        except TraceFormatError:
            pass


@st.composite
def _field_edits(draw: st.DrawFn) -> list[tuple[int, str, object]]:
    return draw(
        st.lists(
            st.tuples(st.integers(0, 10**6), st.sampled_from(FIELDS), json_values), min_size=1, max_size=5
        )
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=_field_edits())
def test_mutated_torch_written_trace(torch_traces: Path, tmp_path: Path, edits) -> None:
    """Structure-aware mutations of a trace torch wrote in this test session."""
    doc = json.loads((torch_traces / "sequential.json").read_text())
    events = doc["traceEvents"]
    for index, field, value in edits:
        events[index % len(events)][field] = value
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(doc))
    try:
        trace = load_trace(path)
    except TraceFormatError as exc:
        assert str(path) in str(exc)
        return
    trace.span()
    _ = trace.flows


def test_numeric_string_pid_and_int_pid_are_one_lane(tmp_path: Path) -> None:
    events = [GOOD_EVENT, {**GOOD_EVENT, "pid": "1", "tid": "1", "ts": 20}]
    trace = load_trace(_write(tmp_path, "mixed.json", _doc(events)))
    assert len(trace.lanes) == 1 and trace.lane_event_count(0) == 2


def test_memory_device_types_are_named(tmp_path: Path) -> None:
    def mem(device_type: int, device_id: int) -> dict:
        args = {"Device Type": device_type, "Device Id": device_id, "Bytes": 8, "Total Allocated": 8}
        return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": args}

    trace = load_trace(_write(tmp_path, "m.json", _doc([GOOD_EVENT, mem(0, -1), mem(1, 0), mem(12, 1), mem(99, 0)])))
    assert sorted(m.device for m in trace.memory) == sorted(["cpu", "cuda:0", "xpu:1", "device99:0"])


@pytest.mark.parametrize("kind", ["json", "pftrace"])
def test_a_trace_needing_more_memory_than_the_process_may_use_is_refused_in_one_line(tmp_path, monkeypatch, kind):
    """What decoding the text read so far needs is checked against the memory this process may still
    use, a chunk at a time, before it is decoded (`text._within_budget`): for JSON and Perfetto alike."""
    from branchscope.profiling.trace import text
    from tests.builders.perfetto_traces import threads_trace

    if kind == "json":
        path = _write(tmp_path, "t.json", _doc([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(200)]))
        holds = "of JSON text"
    else:
        path = tmp_path / "t.pftrace"
        path.write_bytes(threads_trace().data)
        holds = "of Perfetto protobuf"
    assert len(load_trace(path)) > 0
    monkeypatch.setattr(text, "_UNCHECKED_NEED", 0)
    monkeypatch.setattr(text, "_memory_budget", lambda: 100)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    message = str(err.value)
    assert "too large to load" in message and holds in message and "\n" not in message
    assert message.endswith("this process may still use")
