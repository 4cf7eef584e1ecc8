"""Folders of rank traces as a distributed job leaves them (one `rank-R.json` per rank, each with
its distributedInfo), copies of one small rank trace with shifted times, where the tests plant
slow steps on chosen ranks and a rank of heavier memory, so they know the stragglers and the
heaviest rank (and their exact excess over the median) the overview must find."""

from __future__ import annotations

import json
from pathlib import Path

#: Each step of the template rank: its time, and its memory peak (bytes, allocated then freed).
STEP_US = 1000
PEAK_BYTES = 64 << 20
#: Microseconds between a rank's steps, and how much later each rank starts than the one before.
GAP_US = 100
SKEW_US = 3


def rank_events(rank: int, steps: int, slow: dict[int, int], extra_bytes: int = 0, start_us: int = 0) -> list[dict]:
    """One rank's events: per step a `ProfilerStep#N` annotation on its main thread holding two
    ops, one kernel on its GPU's stream 7 and one allocation of `PEAK_BYTES` (+ `extra_bytes`) on
    cuda:RANK; `slow`: {step: extra µs} makes those steps longer; `start_us`: the first step's
    time (epoch microseconds, as real kineto traces have them)."""
    pid, events, ts = 1000 + rank, [], start_us + rank * SKEW_US
    for n in range(steps):
        dur = STEP_US + slow.get(n, 0)
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid, "tid": pid, "ts": ts, "dur": dur},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": ts + 10, "dur": dur // 2},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": pid, "tid": pid, "ts": ts + 20 + dur // 2, "dur": 50},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": rank, "tid": 7, "ts": ts + 30, "dur": dur // 4,
             "args": {"device": rank, "stream": 7}},
        ]  # fmt: skip
        size = PEAK_BYTES + extra_bytes
        for k, (b, total) in enumerate(((size, size), (-size, 0))):
            events.append(
                {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": pid, "tid": pid,
                 "ts": ts + 15 + k * (dur // 2), "args": {"Device Type": 1, "Device Id": rank, "Addr": 4096 + 64 * n,
                                                         "Bytes": b, "Total Allocated": total}}
            )  # fmt: skip
        ts += dur + GAP_US
    return events


def write_rank_job(
    folder: Path,
    ranks: int,
    steps: int = 4,
    slow: dict[int, dict[int, int]] | None = None,
    heavy: tuple[int, int] | None = None,
    start_us: int = 0,
) -> Path:
    """FOLDER/rank-R.json for R < `ranks`, each rank of one nccl job; `slow`: {rank: {step: extra
    µs}}; `heavy`: (rank, extra bytes) on every allocation of that rank; `start_us`: when rank 0
    starts (`rank_events`). Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    slow = slow or {}
    for r in range(ranks):
        extra = heavy[1] if heavy is not None and heavy[0] == r else 0
        doc = {
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks},
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
            "traceEvents": rank_events(r, steps, slow.get(r, {}), extra, start_us),
        }
        (folder / f"rank-{r}.json").write_text(json.dumps(doc))
    return folder
