"""Collectives matched across ranks (issue 23): `match_collectives` on a job of R ranks × K collectives.

Each rank of the generated job has, per collective, what PyTorch ≥ 2.1 writes with NCCL: on its CPU
thread `c10d::allreduce_` › `record_param_comms` (args `Collective name`, `Seq`, `Process Group
Name`, `In msg nelems`) › `nccl:all_reduce`, and the kernel on its GPU stream with the same args:
four events per collective, each event's text kept as the reader keeps it (its JSON, args decoded
on demand). Arrivals jitter by up to 50 µs; ranks 3 and R-5 arrive 2 ms late at every tenth
collective of 5 ms (the planted stragglers, checked in the result). A second job has the same events with
no args (matched by name and place).

Goal (issue 23): 256 ranks × thousands of collectives matched well under a second. Run:
`.venv/bin/python benchmarks/bench_collectives.py [--ranks 64 256] [--collectives 1000]`;
writes benchmarks/results/collectives.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import msgspec
import numpy as np

from branchscope.profiling.trace.collectives import collectives_json, match_collectives
from branchscope.profiling.trace.model import Lane, Trace, build_trace

ROOT = Path(__file__).resolve().parent.parent

GOAL_S = 1.0
NAMES = [
    "c10d::allreduce_",
    "record_param_comms",
    "nccl:all_reduce",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
]
KERNEL = 3


def job(ranks: int, collectives: int, with_args: bool, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    period = 5_000_000  # 5 ms between collectives
    base = np.arange(collectives, dtype=np.int64) * period
    late = np.zeros((ranks, collectives), dtype=np.int64)
    late[[3, ranks - 5], ::10] = 2_000_000
    arrival = base[None, :] + rng.integers(0, 50_000, size=(ranks, collectives)) + late
    starts, durs, lanes_col, name_ids, raws = [], [], [], [], []
    lanes = []
    for r in range(ranks):
        cpu, gpu = 2 * r, 2 * r + 1
        lanes += [Lane(cpu, "cpu", 100 + r, 1, "main", "main", -1, r), Lane(gpu, "gpu", 100 + r, 7, "stream 7", "stream", r % 8, r)]
        a = arrival[r]
        starts += [a, a + 1_000, a + 2_000, a + 30_000]
        durs += [np.full(collectives, 20_000), np.full(collectives, 15_000), np.full(collectives, 10_000), np.full(collectives, 5_000)]
        lanes_col += [np.full(collectives, cpu), np.full(collectives, cpu), np.full(collectives, cpu), np.full(collectives, gpu)]
        name_ids += [np.full(collectives, k) for k in range(4)]
        for k in range(4):
            if with_args and k in (1, KERNEL):
                raws += [
                    msgspec.Raw(
                        b'{"ph":"X","cat":"cpu_op","name":"x","pid":1,"tid":1,"ts":1,"dur":1,"args":{"External id":%d,'
                        b'"Collective name":"allreduce","Seq":%d,"Process Group Name":"0","In msg nelems":4096,'
                        b'"dtype":"Float","Group size":%d}}' % (s + 10, s, ranks)
                    )
                    for s in range(collectives)
                ]
            else:
                raws += [msgspec.Raw(b'{"ph":"X","name":"x","args":{"External id":%d}}' % s) for s in range(collectives)]
    return build_trace(
        path="job", start_ns=np.concatenate(starts), dur_ns=np.concatenate(durs), lane=np.concatenate(lanes_col),
        name_id=np.concatenate(name_ids), cat_id=np.zeros(sum(x.size for x in starts), dtype=np.int32),
        names=NAMES, cats=["cpu_op"], lanes=lanes, raw_args=raws,
    )  # fmt: skip


def timed(trace: Trace, runs: int = 3) -> tuple[float, float, dict]:
    """Median wall and CPU seconds of `match_collectives` (the CPU time says what a busy machine's
    wall time hides), and what it found."""
    times, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        coll = match_collectives(trace)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    top = np.argsort(-coll.rank_times_last)[:2]
    return statistics.median(times), statistics.median(cpu), {
        "collectives": len(coll),
        "counted": int(coll.counted.sum()),
        "stragglers": sorted(int(coll.ranks[k]) for k in top),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--collectives", type=int, default=1000)
    args = ap.parse_args()
    out: dict = {"python": platform.python_version(), "machine": platform.machine(), "goal_s": GOAL_S,
                 "load_average": os.getloadavg()[0], "cpus": os.cpu_count(), "jobs": []}  # fmt: skip
    for ranks, with_args in [(r, a) for r in args.ranks for a in (True, False)]:
        trace = job(ranks, args.collectives, with_args)
        median_s, cpu_s, found = timed(trace)
        t0 = time.perf_counter()
        collectives_json(trace)
        json_s = time.perf_counter() - t0
        row = {"ranks": ranks, "collectives_per_rank": args.collectives, "events": len(trace),
               "matched_by": "seq" if with_args else "position", "match_s": round(median_s, 3), "match_cpu_s": round(cpu_s, 3),
               "inspect_json_s": round(json_s, 3), **found}  # fmt: skip
        row["stragglers_found"] = found["stragglers"] == [3, ranks - 5]
        out["jobs"].append(row)
        print(json.dumps(row))
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "collectives.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
