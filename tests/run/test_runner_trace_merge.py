"""The runner's last step: the worker's trace.json plus the CPU samples, compressed once into trace.json.gz."""

from __future__ import annotations

import gzip
import json

import pytest

from branchscope import profiling
from branchscope.profiling.run.cpu_sampler import ThreadCpuSampler, ThreadSeries
from branchscope.profiling.run.finish import finish_trace
from branchscope.profiling.run.folder import write_atomic
from branchscope.profiling.run.run_facts import trace_clock, write_trace
from branchscope.profiling.trace.records import TraceClock

BASE_NS = 1_700_000_000_000_000_000


def _sampler(tid: int, ts_us: list[float], cpu_ms: list[float]) -> ThreadCpuSampler:
    sampler = ThreadCpuSampler.__new__(ThreadCpuSampler)  # no process to sample: series filled by hand
    sampler.pid = 4242
    series = ThreadSeries(tid, "worker", [BASE_NS + int(t * 1000) for t in ts_us], [int(c * 1e6) for c in cpu_ms])
    series.running = [True] * len(ts_us)
    sampler.series = {tid: series}
    return sampler


def _trace(events: list[dict]) -> dict:
    # Kineto's key order: traceEvents in the middle; the worker moves it last.
    return {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": BASE_NS, "branchscope": {"main_tid": 7}}


def _op(ts: float, dur: float, name: str = "aten::mm") -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 4242, "tid": 7, "ts": ts, "dur": dur}


def test_samples_go_into_the_trace_array_and_the_result_is_a_valid_trace(tmp_path):
    trace = _trace([_op(100_000.0, 50_000.0), _op(120_000.0, 10_000.0, "weird \u2192 \x01 name")])
    write_trace(tmp_path / "trace.json", trace)
    clock = trace_clock(trace)
    assert clock == {"base_time_ns": BASE_NS, "first_us": 100_000.0, "last_us": 150_000.0}
    # Samples every 10 ms from 0 to 200 ms; only those within 20 ms of the events are kept.
    ts = [float(t) for t in range(0, 200_001, 10_000)]
    sampler = _sampler(7, ts, [t / 1000.0 for t in ts])  # always busy
    added = finish_trace(tmp_path, sampler, TraceClock(**clock))
    assert added == len([t for t in ts[1:] if 80_000 <= t <= 170_000])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]
    with gzip.open(tmp_path / "trace.json.gz", "rt", encoding="utf-8") as f:
        written = json.load(f)  # strict JSON
    assert written["branchscope"] == {"main_tid": 7} and written["baseTimeNanoseconds"] == BASE_NS
    assert written["traceEvents"][:2] == trace["traceEvents"]
    samples = written["traceEvents"][2:]
    assert len(samples) == added and all(e["cat"] == "cpu_sample" and e["args"]["cpu_pct"] == 100.0 for e in samples)
    loaded = profiling.load_trace(tmp_path / "trace.json.gz")
    (track,) = [c for c in loaded.counters if c.cat == "cpu_sample" and c.key == "cpu_pct"]
    assert track.tid == 7 and len(track.ts_ns) == added


def test_samples_into_an_empty_event_array(tmp_path):
    write_trace(tmp_path / "trace.json", _trace([]))
    clock = {"base_time_ns": BASE_NS, "first_us": None, "last_us": None}  # no events: keep every sample
    assert finish_trace(tmp_path, _sampler(7, [0.0, 2000.0, 4000.0], [0.0, 1.0, 2.0]), TraceClock(**clock)) == 2
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        assert [e["ts"] for e in json.load(f)["traceEvents"]] == [2000.0, 4000.0]


def test_no_clock_means_no_samples_but_still_the_trace(tmp_path):
    write_trace(tmp_path / "trace.json", {"traceEvents": [_op(0.0, 1.0)]})
    assert finish_trace(tmp_path, _sampler(7, [0.0, 2000.0], [0.0, 1.0]), None) == 0
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        assert json.load(f) == {"traceEvents": [_op(0.0, 1.0)]}


@pytest.mark.parametrize("text", ['{"traceEvents": [], "other": 1}', '{"traceEvents": [', ""])
def test_a_trace_not_ending_with_its_event_array_is_refused_and_nothing_is_half_written(tmp_path, text):
    (tmp_path / "trace.json").write_text(text)
    with pytest.raises(ValueError, match="does not end with its traceEvents array"):
        finish_trace(tmp_path, _sampler(7, [0.0, 2000.0], [0.0, 1.0]), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


def test_write_atomic_leaves_neither_file_nor_temporary_when_writing_fails(tmp_path):
    target = tmp_path / "run.json"

    def fail(f) -> None:
        f.write(b"{")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, fail)
    assert list(tmp_path.iterdir()) == []
    write_atomic(target, lambda f: f.write(b"{}"), gz=True)
    assert gzip.decompress(target.read_bytes()) == b"{}" and list(tmp_path.iterdir()) == [target]

