"""Finishing a run's trace: the worker writes trace.json uncompressed, with "traceEvents" as its last
key; `finish_trace` copies it into trace.json.gz once, inserting the runner's CPU-sample counter
events before the array's closing bracket, and removes trace.json: the trace is parsed once (in the
worker) and compressed once.

No torch here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

from branchscope.profiling.run.cpu_sampler import ThreadCpuSampler
from branchscope.profiling.run.folder import write_atomic
from branchscope.profiling.trace.records import TraceClock

#: CPU samples kept before the first and after the last traced event (µs).
_SAMPLE_MARGIN_US = 20_000.0


def _array_close(f: BinaryIO, size: int) -> tuple[int, bool]:
    """Offset of the `]` that closes "traceEvents" (the last key, so the file ends `]}`), and whether the array is empty."""
    f.seek(max(0, size - 256))
    tail = f.read()
    body = tail.rstrip()
    if not body.endswith(b"}") or not body[:-1].rstrip().endswith(b"]"):
        raise ValueError("the worker's trace.json does not end with its traceEvents array")
    body = body[:-1].rstrip()
    return size - len(tail) + len(body) - 1, body[:-1].rstrip().endswith(b"[")


def finish_trace(out: Path, sampler: ThreadCpuSampler, clock: TraceClock | None) -> int:
    """Writes OUT/trace.json.gz from the worker's OUT/trace.json plus the CPU samples; returns how many.

    `clock` is run.json's "trace_clock": the trace's baseTimeNanoseconds and the span of its events
    (µs), so the samples go on the trace's clock and only those over the profiled time (and a margin)
    are kept, without parsing the trace again. The events are inserted as text before the
    traceEvents array's closing bracket; the uncompressed trace.json is removed once the .gz exists.
    """
    src = out / "trace.json"
    clock = clock or TraceClock()
    base = clock.base_time_ns
    events = sampler.to_counter_events(int(base)) if base is not None else []
    lo, hi = clock.first_us, clock.last_us
    if lo is not None and hi is not None:
        events = [e for e in events if lo - _SAMPLE_MARGIN_US <= e["ts"] <= hi + _SAMPLE_MARGIN_US]
    with open(src, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        close, empty = _array_close(f, size)

        def write(gz: BinaryIO) -> None:
            f.seek(0)
            left = close
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    raise ValueError("trace.json changed while it was being compressed")
                gz.write(chunk)
                left -= len(chunk)
            if events:
                gz.write(b"" if empty else b", ")
                gz.write(", ".join(json.dumps(e) for e in events).encode("utf-8"))
            gz.write(f.read())  # "]}" and whatever followed

        write_atomic(out / "trace.json.gz", write, gz=True)
    src.unlink()
    return len(events)

