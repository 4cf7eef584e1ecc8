"""How fast an allocator snapshot opens: branchscope's unpickler (`trace/plain_pickle.py`, which
refuses every global and bounds its memory by the file's size) against the standard library's C
unpickler, which memory_viz uses (and which runs whatever globals a file names), and the whole
`load_snapshot` into a Trace.

The snapshot is built here, seeded: 300,000 trace entries on two devices with shared frames, and
1,000 segments of 20 blocks (about 18 MB pickled, 5 million opcodes). Each figure is the best of
`--repeat` runs, the three taken in turn so that a busy machine weighs on each alike.

    python benchmarks/bench_snapshot.py [--entries N] [--repeat R] [--out results/snapshot.json]
"""

from __future__ import annotations

import argparse
import gc
import pickle
import random
import tempfile
import time
from pathlib import Path

from report import machine_words, write_report

from branchscope.profiling.trace import snapshot
from branchscope.profiling.trace.plain_pickle import unpickle

HERE = Path(__file__).resolve().parent


def build(entries: int, seed: int = 1) -> dict:
    """A snapshot as torch.cuda.memory._snapshot() returns it, with made-up but realistic shapes."""
    rnd = random.Random(seed)
    files = [f"/home/u/project/mod{i}.py" for i in range(40)] + [f"/usr/lib/python3/torch/nn/m{i}.py" for i in range(40)]
    frames = [{"filename": rnd.choice(files), "line": rnd.randrange(1, 900), "name": f"fn{rnd.randrange(200)}"} for _ in range(2000)]
    stacks = [[rnd.choice(frames) for _ in range(rnd.randrange(3, 30))] for _ in range(3000)]
    actions = ["alloc", "free_requested", "free_completed", "segment_alloc"]
    traces = [
        [
            {"action": rnd.choice(actions), "addr": rnd.randrange(1 << 40), "size": rnd.randrange(1, 1 << 24), "stream": 0,
             "time_us": 1_700_000_000_000 + k * 7, "frames": rnd.choice(stacks)}
            for k in range(entries // 2)
        ]
        for _device in range(2)
    ]  # fmt: skip
    segments = [
        {"device": d, "address": rnd.randrange(1 << 40), "total_size": 1 << 21, "stream": 0, "segment_type": "large",
         "allocated_size": 1 << 20, "active_size": 1 << 20,
         "blocks": [{"size": 4096, "requested_size": 4000, "state": rnd.choice(["active_allocated", "inactive"]),
                     "frames": rnd.choice(stacks)} for _ in range(20)]}
        for d in range(2)
        for _ in range(500)
    ]  # fmt: skip
    return {"segments": segments, "device_traces": traces}


def _seconds(work) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "snapshot.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.pickle"
        path.write_bytes(pickle.dumps(build(args.entries), protocol=4))
        data = path.read_bytes()
        limit = snapshot._MAX_EXPANSION * len(data) + snapshot._SLACK
        ours = [unpickle(data, limit) == pickle.loads(data)]  # the same value, or the figures mean nothing
        best = {"plain_pickle.unpickle": float("inf"), "pickle.loads (C, runs globals)": float("inf"), "load_snapshot": float("inf")}
        for _ in range(args.repeat):
            best["plain_pickle.unpickle"] = min(best["plain_pickle.unpickle"], _seconds(lambda: unpickle(data, limit)))
            best["pickle.loads (C, runs globals)"] = min(best["pickle.loads (C, runs globals)"], _seconds(lambda: pickle.loads(data)))
            best["load_snapshot"] = min(best["load_snapshot"], _seconds(lambda: snapshot.load_snapshot(path)))
    mb = len(data) / 1e6
    for name, seconds in best.items():
        print(f"{name:32s} {seconds * 1000:8.0f} ms  ({mb / seconds:.1f} MB/s)")
    write_report(args.out, {
        "machine": machine_words(), "snapshot_mb": round(mb, 1), "entries": args.entries, "repeat": args.repeat,
        "same_value_as_pickle": all(ours), "best_ms": {k: round(v * 1000, 1) for k, v in best.items()},
    })  # fmt: skip


if __name__ == "__main__":
    main()
