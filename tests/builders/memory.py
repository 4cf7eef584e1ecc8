"""Traces with memory events built here: known allocations, frees, ops and devices.

- `write_trace`, `mem`, `op`, `four_gpu_events`: small traces for the memory engine;
- `write_four_gpu_trace`: a DataParallel-like step over 4 GPUs (and the CPU) as the memory views'
  tests and the README's pictures use it, with its known ALLOCATIONS and PEAKS.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID = 100


def op(name: str, tid: int, ts: int, dur: int) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": "cpu_op", "pid": PID, "tid": tid, "ts": ts, "dur": dur}


def mem(
    ts: int, nbytes: int, total: int, *, addr: int | None, tid: int = 1, device: int = 0,
    device_type: int = 1, reserved: int | None = None,
) -> dict[str, Any]:
    args: dict[str, Any] = {"Device Type": device_type, "Device Id": device, "Bytes": nbytes, "Total Allocated": total}
    if addr is not None:
        args["Addr"] = addr
    if reserved is not None:
        args["Total Reserved"] = reserved
    return {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": PID, "tid": tid, "ts": ts,
            "args": args}


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def four_gpu_events() -> list[dict[str, Any]]:
    """DataParallel-like: cuda:0 holds the gathered outputs and the loss (400 + 200 B at its peak),
    cuda:1..3 one activation of 100 B each; every device frees all by the end."""
    events = [op("forward", 1, 0, 100), op("aten::cat", 1, 50, 10), op("loss", 1, 70, 20)]
    events += [mem(10, 100, 100, addr=0x1000, device=0, reserved=2048)]
    for d in (1, 2, 3):
        events += [mem(10 + d, 100, 100, addr=0x1000, device=d, reserved=1024),
                   mem(60 + d, -100, 0, addr=0x1000, device=d, reserved=1024)]
    events += [
        mem(55, 400, 500, addr=0x2000, device=0, reserved=2048),
        mem(75, 100, 600, addr=0x3000, device=0, reserved=2048),
        mem(80, -100, 500, addr=0x1000, device=0, reserved=2048),
        mem(95, -400, 100, addr=0x2000, device=0, reserved=2048),
        mem(96, -100, 0, addr=0x3000, device=0, reserved=2048),
    ]
    return events


FOUR_GPU_PROPERTIES = [{"id": d, "name": "GPU", "totalGlobalMem": (d + 1) << 30} for d in range(4)]


KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
#: Where the built trace's clock starts (µs).
T0_US = 1_000_000
#: Each GPU's capacity in the built trace.
CAPACITY = 5 * GiB

#: The built 4-GPU trace's allocations, as nn.DataParallel leaves them: (device id (-1: the CPU),
#: op, thread, bytes, allocated at, freed at or None (never freed), all in µs from T0_US).
#: cuda:0 holds the scatter, the gather and the loss beside its replica's forward.
ALLOCATIONS = [
    (0, "aten::scatter", 1, 512 * MiB, 10, 90),
    (0, "replica forward", 1, 1 * GiB, 20, 70),
    (0, "aten::gather", 1, 1 * GiB, 50, 95),
    (0, "aten::nll_loss", 1, 768 * MiB, 60, 80),
    (1, "replica forward", 11, 1 * GiB, 20, 70),
    (1, "aten::empty", 11, 64 * MiB, 30, None),
    (2, "replica forward", 12, 1 * GiB, 20, 70),
    (2, "aten::empty", 12, 128 * MiB, 30, None),
    (3, "replica forward", 13, 1 * GiB, 20, 70),
    (-1, "aten::empty", 1, 8, 15, None),
]
#: Frees of memory allocated before profiling began: (device id, thread, bytes, at µs).
EARLY_FREES = [(1, 11, 256 * MiB, 5)]
#: Each device's peak in that trace.
PEAKS = {
    "cuda:0": 512 * MiB + 2 * GiB + 768 * MiB,
    "cuda:1": GiB + 64 * MiB,
    "cuda:2": GiB + 128 * MiB,
    "cuda:3": GiB,
    "cpu": 8,
}


def write_four_gpu_trace(path: Path) -> Path:
    """A Chrome trace of one DataParallel-like step over 4 GPUs: each allocation inside its op on
    its thread, `[memory]` events with Addr, Bytes, Total Allocated and Total Reserved, and each
    GPU's capacity in `deviceProperties` (gzipped for .gz)."""
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
        for tid, name in [(1, "main"), (11, "replica 1"), (12, "replica 2"), (13, "replica 3")]
    ]
    events.append(
        {"ph": "X", "cat": "user_annotation", "name": "step 1", "pid": 1, "tid": 1, "ts": T0_US, "dur": 100}
    )
    memory: list[tuple[float, int, int, int, int]] = []  # (ts, device, tid, addr, bytes)
    for k, (dev, op, tid, size, at, freed) in enumerate(ALLOCATIONS):
        end = at + 2
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": tid, "ts": T0_US + at, "dur": 2}
        )
        addr = 0x7F0000000000 + k * (1 << 32)
        memory.append((T0_US + at + 1, dev, tid, addr, size))
        if freed is not None:
            memory.append((T0_US + freed, dev, tid, addr, -size))
        assert end <= 100
    for dev, tid, size, at in EARLY_FREES:
        memory.append((T0_US + at, dev, tid, 0x7E0000000000, -size))
    memory.sort()
    totals = {dev: sum(size for d, _, size, _ in EARLY_FREES if d == dev) for dev in range(-1, 4)}
    reserved = dict.fromkeys(range(-1, 4), 0)
    for ts, dev, tid, addr, size in memory:
        totals[dev] += size
        if dev >= 0:  # the caching allocator's (the CPU's is 0)
            reserved[dev] = max(reserved[dev], -(-totals[dev] // (2 * MiB)) * 2 * MiB + 256 * MiB)
        args = {"Device Type": 0 if dev < 0 else 1, "Device Id": dev, "Addr": addr, "Bytes": size,
                "Total Allocated": totals[dev], "Total Reserved": reserved[dev]}  # fmt: skip
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": tid,
                "ts": ts,
                "args": args,
            }
        )
    doc = {
        "traceEvents": events,
        "deviceProperties": [{"id": i, "name": "Test GPU", "totalGlobalMem": CAPACITY} for i in range(4)],
    }
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path
