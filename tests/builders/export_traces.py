"""What an export must keep, and a trace that exercises it: `trace_facts(trace)` is every fact a
round trip compares (each event's name, lane, start and duration to the ns, its args, the lanes,
the arrows between events and their categories, memory series, counters, metadata, RunInfo), and `write_kineto_like`
writes a small kineto-shaped JSON trace holding each kind of thing an export writes (overlapping
kernels on one stream, zero-length events, arrows, [memory] with addresses and reserved bytes,
CPU-sample counters, args of every JSON type, named threads, a "GPU 0" process, RunInfo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from branchscope.profiling.trace.model import Trace

#: The arg the Perfetto export adds on branch labels (branch, region, mode).
ADDED_ARG = "branchscope"


def lane_key(trace: Trace, i: int, *, with_pid: bool = True) -> tuple[Any, ...]:
    ln = trace.lanes[i]
    name = ln.name
    return (ln.kind, ln.pid, ln.tid, name) if with_pid else (ln.kind, ln.tid, name)


def trace_facts(trace: Trace, *, with_pid: bool = True, with_args: bool = True) -> dict[str, Any]:
    """Every fact of `trace` a round trip keeps (see the module docstring), arrows with their
    categories; `with_pid` False for a merged job, whose processes an export may number afresh."""
    lanes = [lane_key(trace, i, with_pid=with_pid) for i in range(len(trace.lanes))]
    keys = list(
        zip([trace.names[k] for k in trace.name_id.tolist()], [lanes[k] for k in trace.lane.tolist()],
            trace.start_ns.tolist(), trace.dur_ns.tolist())
    )  # fmt: skip
    events = sorted(keys)
    facts: dict[str, Any] = {
        "events": events,
        "lanes": sorted(set(lanes)),
        "flows": sorted(
            (keys[s], keys[d], trace.flows.cats[c])
            for s, d, c in zip(trace.flows.src.tolist(), trace.flows.dst.tolist(), trace.flows.cat_id.tolist())
        ),
        "memory": sorted(
            (m.device, m.ts_ns.tolist(), m.delta_bytes.tolist(), m.total_bytes.tolist(), m.addr.tolist(),
             None if m.reserved_bytes is None else m.reserved_bytes.tolist(), m.tid.tolist())
            for m in trace.memory
        ),  # fmt: skip
        "counters": sorted(
            (c.name, c.tid, c.key, c.cat, c.ts_ns.tolist(), c.values.tolist()) + ((c.pid,) if with_pid else ())
            for c in trace.counters
        ),  # fmt: skip
        "metadata": {k: v for k, v in trace.metadata.items() if k != "displayTimeUnit"},
        "run_info": trace.run_info,
    }
    if with_args:
        args = [{k: v for k, v in trace.event_args(i).items() if k != ADDED_ARG} for i in range(len(trace))]
        facts["args"] = sorted(zip(keys, map(json.dumps, args)))
    return facts


PID, MAIN, WORKER, GPU_PID, STREAM = 4242, 4242, -17, 0, 7
RUN_INFO = {"mode": "fork", "interop": 2, "intra": 1, "main_tid": MAIN, "interop_tids": [WORKER], "intra_tids": [],
            "branches": [{"name": "left", "region": "1"}, {"name": "right", "region": "1"}]}  # fmt: skip
#: Args of every JSON type, as an event of the trace holds them.
EVERY_ARG = {"int": 3, "negative": -5, "big": 2**63 + 11, "float": 0.125, "true": True, "false": False,
             "none": None, "text": "côté → ✓", "list": [1, "a", [2.5]], "dict": {"a": {"b": [None]}},
             "empty_list": [], "empty_dict": {}}  # fmt: skip


def _x(name: str, tid: int, ts: str, dur: str, cat: str = "cpu_op", pid: int = PID, **args: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def kineto_like_events() -> list[dict[str, Any]]:
    """The events of `write_kineto_like` (times as kineto writes them: µs with ns decimals)."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": MAIN, "args": {"name": "pt_main_thread"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": WORKER, "args": {"name": "PTThreadPool"}},
        {"ph": "M", "name": "process_labels", "pid": GPU_PID, "tid": 0, "args": {"labels": "GPU 0"}},
        _x("ProfilerStep#1", MAIN, "1000.000", "500.000", "user_annotation"),
        _x("aten::mm", MAIN, "1010.001", "100.999", **EVERY_ARG),
        _x("cudaLaunchKernel", MAIN, "1020.500", "5.250", "cuda_runtime", correlation=11),
        _x("cudaLaunchKernel", MAIN, "1030.500", "5.250", "cuda_runtime", correlation=12),
        _x("aten::empty", MAIN, "1200.000", "0.000"),  # zero length
        _x("aten::zero_", MAIN, "1200.000", "0.000"),  # zero length at the same time
        _x("branch: left", WORKER, "1001.000", "300.000", "user_annotation"),
        _x("aten::relu", WORKER, "1002.000", "50.000"),
        _x("aten::relu", WORKER, "1002.000", "50.000"),  # the same event twice, nested in itself
        # A lane whose events overlap without nesting (async ops), and two kernels overlapping on one stream.
        _x("async_a", MAIN + 1, "1100.000", "100.000"),
        _x("async_b", MAIN + 1, "1150.000", "100.000"),
        _x("async_c", MAIN + 1, "1160.000", "10.000"),
        _x("gemm", STREAM, "1040.000", "80.000", "kernel", GPU_PID, correlation=11, stream=STREAM),
        _x("elementwise", STREAM, "1060.000", "90.000", "kernel", GPU_PID, correlation=12, stream=STREAM),
    ]
    for k, (src_ts, dst_ts) in enumerate((("1020.500", "1040.000"), ("1030.500", "1060.000"))):
        events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 11 + k, "pid": PID, "tid": MAIN, "ts": src_ts})
        events.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": 11 + k, "pid": GPU_PID, "tid": STREAM,
                       "ts": dst_ts})  # fmt: skip
    for ts, nbytes, total, addr in (("1011.000", 4096, 4096, 2**63 + 64), ("1300.000", -4096, 0, 2**63 + 64)):
        events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID, "tid": MAIN,
                       "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes,
                                          "Total Allocated": total, "Total Reserved": 1 << 20}})  # fmt: skip
    events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID, "tid": WORKER,
                   "ts": "1003.000", "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64, "Total Allocated": 64}})
    for ts, cpu, wait in (("1000.000", 50.0, 5.0), ("1100.000", 75.5, 0.0)):
        events.append({"ph": "C", "cat": "cpu_sample", "name": f"thread {WORKER} (PTThreadPool)", "pid": PID,
                       "tid": WORKER, "ts": ts, "args": {"cpu_pct": cpu, "wait_pct": wait}})  # fmt: skip
    return events


def write_kineto_like(path: Path) -> Path:
    """The trace of `kineto_like_events` with kineto's metadata keys and a run's RunInfo."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": 85_031_714_816}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "branchscope": RUN_INFO,
        "traceEvents": kineto_like_events(),
    }
    path.write_text(json.dumps(doc, ensure_ascii=False))
    return path
