"""The reader's second core: a large trace's second half is decoded by a forked child. The result is
the trace one process would read, whatever happens to the child, and no child outlives a load."""

from __future__ import annotations

import gzip
import json
import os
import signal
from pathlib import Path

import numpy as np
import psutil
import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace import decode, forked
from branchscope.profiling.trace.model import LoadCancelled, Trace, TraceFormatError

PUBLIC = ["hta_gpu_memory_2streams.json.gz", "hta_ns_resolution_fwdbwd.pt.trace.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz"]


def _mixed_trace(path: Path, units: int = 600, bad_at: int | None = None) -> Path:
    """Every kind of event the reader sorts, spread over the whole file: metadata, complete events
    (ints and ns-decimal timestamps, a pseudo process), `[memory]` events, counters and flows."""
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "process_labels", "pid": 9, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    t = 1_712_195_495_519_000
    for k in range(units):
        tid = 1 if k % 3 else 2
        events += [
            {"ph": "X", "name": f"op{k % 7}", "cat": "cpu_op", "pid": 1, "tid": tid, "ts": t + k * 10,
             "dur": 5, "args": {"k": k}},
            {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": tid,
             "ts": f"{t + k * 10 + 1}.{k % 1000:03d}", "dur": "1.5", "args": {"correlation": k}},
            {"ph": "s", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": tid, "ts": t + k * 10 + 1},
            {"ph": "X", "name": f"kernel{k % 3}", "cat": "kernel", "pid": 9, "tid": 7 + k % 2,
             "ts": t + k * 10 + 3, "dur": 4, "args": {"correlation": k, "stream": 7 + k % 2}},
            {"ph": "f", "id": k, "name": "ac2g", "cat": "ac2g", "pid": 9, "tid": 7 + k % 2, "ts": t + k * 10 + 3,
             "bp": "e"},
            {"ph": "i", "name": "[memory]", "pid": 1, "tid": tid, "ts": t + k * 10 + 2,
             "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512 if k % 2 else -512,
                      "Total Allocated": 4096 + 512 * (k % 2), "Addr": 1000 + k}},
            {"ph": "C", "name": "queue", "pid": 1, "tid": 0, "ts": t + k * 10, "args": {"depth": k % 5}},
            {"ph": "X", "name": "span", "pid": "Spans", "tid": "x", "ts": t + k * 10, "dur": 1},
        ]  # fmt: skip
    if bad_at is not None:
        events[bad_at] = {"ph": "X", "name": "broken", "pid": 1, "tid": 1, "ts": "soon", "dur": 1}
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}}, f)
    return path


def _same(a: Trace, b: Trace) -> None:
    for column in ("start_ns", "dur_ns", "lane", "depth", "lane_offsets"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert [a.event_name(i) for i in range(len(a))] == [b.event_name(i) for i in range(len(b))]
    assert [a.cats[c] for c in a.cat_id] == [b.cats[c] for c in b.cat_id]
    assert a.lanes == b.lanes
    assert [a.event_args(i) for i in range(len(a))] == [b.event_args(i) for i in range(len(b))]
    assert len(a.memory) == len(b.memory)
    for m, n in zip(a.memory, b.memory):
        assert m.device == n.device
        for column in ("ts_ns", "delta_bytes", "total_bytes", "addr", "pid", "tid"):
            assert np.array_equal(getattr(m, column), getattr(n, column)), column
    assert [(c.name, c.key, c.ts_ns.tolist(), c.values.tolist()) for c in a.counters] == [
        (c.name, c.key, c.ts_ns.tolist(), c.values.tolist()) for c in b.counters
    ]
    fa, fb = a.flows, b.flows
    assert (fa is None) == (fb is None)
    if fa is not None and fb is not None:
        assert np.array_equal(fa.src, fb.src) and np.array_equal(fa.dst, fb.dst)


def _load(path: Path, parallel: bool, monkeypatch: pytest.MonkeyPatch, **kw) -> Trace:
    monkeypatch.setattr(decode, "PARALLEL_MIN_EVENTS", 0 if parallel else 1 << 62)
    return load_trace(path, **kw)


_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def _earlier_children() -> None:
    """Children that earlier tests left (zombies of theirs) are not this test's."""
    _EARLIER.clear()
    _EARLIER.update(p.pid for p in psutil.Process().children(recursive=True))


def _children() -> list[psutil.Process]:
    """This test's children still there (running or not yet reaped)."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in _EARLIER]


def _child_instead(monkeypatch: pytest.MonkeyPatch, behaviour) -> None:
    """The forked child runs `behaviour(pipe)` instead of sending its part (only the child sends)."""
    monkeypatch.setattr(decode._Part, "write_to", lambda _part, pipe: behaviour(pipe))


def test_two_processes_read_the_trace_one_would(tmp_path, monkeypatch):
    path = _mixed_trace(tmp_path / "mixed.json.gz")
    calls = []
    start = forked.ForkedCall.start
    monkeypatch.setattr(forked.ForkedCall, "start", lambda fn: calls.append(1) or start(fn))
    both = _load(path, True, monkeypatch)
    assert calls == [1]  # the child did run
    one = _load(path, False, monkeypatch)
    assert len(calls) == 1
    _same(both, one)
    assert len(both) == 600 * 3 and both.flows is not None and both.memory and both.counters
    assert _children() == []


@pytest.mark.parametrize("name", PUBLIC)
def test_public_traces_read_the_same_in_two_processes(shared_traces, monkeypatch, name):
    path = shared_traces / name
    _same(_load(path, True, monkeypatch), _load(path, False, monkeypatch))


@pytest.mark.parametrize("how", ["killed", "cut short"])
def test_a_child_that_fails_mid_way_leaves_the_work_to_the_parent(tmp_path, monkeypatch, how):
    path = _mixed_trace(tmp_path / "mixed.json.gz")

    def fail(pipe):
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        pipe.write(b"\x10\x00\x00")  # the start of a header, then a clean exit

    _child_instead(monkeypatch, fail)
    _same(_load(path, True, monkeypatch), _load(path, False, monkeypatch))
    assert _children() == []


def test_no_fork_at_all_reads_in_one_process(tmp_path, monkeypatch):
    path = _mixed_trace(tmp_path / "mixed.json.gz")

    def no_fork():
        raise OSError("fork refused")

    monkeypatch.setattr(os, "fork", no_fork)
    assert forked.ForkedCall.start(lambda pipe: None) is None
    _same(_load(path, True, monkeypatch), _load(path, False, monkeypatch))


@pytest.mark.parametrize("where", ["first half", "second half"])
def test_a_bad_event_in_either_half_fails_as_in_one_process(tmp_path, monkeypatch, where):
    at = 100 if where == "first half" else 4000
    path = _mixed_trace(tmp_path / "bad.json.gz", bad_at=at)
    with pytest.raises(TraceFormatError) as one:
        _load(path, False, monkeypatch)
    with pytest.raises(TraceFormatError) as both:
        _load(path, True, monkeypatch)
    assert str(both.value) == str(one.value) and "soon" in str(one.value)
    assert _children() == []


def test_cancelling_while_the_child_works_ends_the_child(tmp_path, monkeypatch):
    path = _mixed_trace(tmp_path / "mixed.json.gz")
    seen = []

    def progress(phase: str, fraction: float) -> bool:
        if phase == "events" and fraction > 0:
            seen.extend(_children())
            return False
        return True

    monkeypatch.setattr(decode, "_CHUNK", 256)  # several chunks in each half, so progress is asked mid-way
    with pytest.raises(LoadCancelled):
        _load(path, True, monkeypatch, progress=progress)
    assert seen  # the child was running when the load was cancelled
    assert _children() == [] and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in seen)


def test_a_forked_call_reads_what_the_child_writes_or_none():
    call = forked.ForkedCall.start(lambda pipe: pipe.write(b"x" * 3_000_000))  # more than a pipe holds
    assert call is not None and call.result(lambda pipe: pipe.read()) == b"x" * 3_000_000

    def fails(pipe) -> None:
        pipe.write(b"partial")
        raise ValueError("no")

    call = forked.ForkedCall.start(fails)
    assert call is not None and call.result(lambda pipe: pipe.read()) is None
    call.stop()  # again: harmless

    def bad_data(pipe) -> bytes:
        raise EOFError("cut short")

    call = forked.ForkedCall.start(lambda pipe: pipe.write(b"y" * 3_000_000))
    assert call is not None and call.result(bad_data) is None  # the child, blocked writing, is killed
    assert _children() == []


def test_a_load_waiting_for_a_stuck_child_can_still_be_cancelled(tmp_path, monkeypatch):
    path = _mixed_trace(tmp_path / "mixed.json.gz")
    _child_instead(monkeypatch, lambda _pipe: signal.pause())  # never writes, never ends by itself
    asked = []

    def progress(phase: str, fraction: float) -> bool:
        if phase == "events" and fraction >= 0.9:  # this process's half is done: it waits for the child
            asked.append(fraction)
            return len(asked) < 3  # the user cancels after a while
        return True

    with pytest.raises(LoadCancelled):
        _load(path, True, monkeypatch, progress=progress)
    assert len(asked) == 3 and _children() == []


def test_a_stuck_child_is_given_up_on_and_its_half_read_here(tmp_path, monkeypatch):
    """No progress callback to cancel through (the window's re-reads, `inspect`): the load still ends."""
    path = _mixed_trace(tmp_path / "mixed.json.gz")
    _child_instead(monkeypatch, lambda _pipe: signal.pause())
    monkeypatch.setattr(decode, "CHILD_WAIT_FLOOR_S", 0.5)
    _same(_load(path, True, monkeypatch), _load(path, False, monkeypatch))
    assert _children() == []
