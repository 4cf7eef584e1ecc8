"""Memory analysis against loading: `analyze_memory` on the public 54 MB trace (28k memory events).

Each repeat runs in a fresh subprocess: `load_trace`, then `analyze_memory` on what it loaded
(which includes the first use of `Trace.parent` for attribution) and `to_json`. Reported: the
median wall time of each call (imports excluded) and their ratio.

Goal (issue 10): the analysis within 20% of the load time. Run:
`.venv/bin/python benchmarks/bench_memory.py`; writes benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "hta_gpu_memory_2streams.json.gz"

_CHILD = r"""
import json, sys, time
from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import analyze_memory
t0 = time.perf_counter()
trace = load_trace(sys.argv[1])
t1 = time.perf_counter()
analysis = analyze_memory(trace)
doc = analysis.to_json(10)
t2 = time.perf_counter()
print(json.dumps({
    "load_s": t1 - t0, "analyze_s": t2 - t1,
    "memory_events": sum(m.events for m in trace.memory),
    "peaks": {d["device"]: d["peak_bytes"] for d in doc["devices"]},
}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "memory.json")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"error: {args.trace}: no such trace", file=sys.stderr)
        return 2
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(args.trace)], check=True, capture_output=True, text=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    load = statistics.median(r["load_s"] for r in runs)
    analyze = statistics.median(r["analyze_s"] for r in runs)
    with gzip.open(args.trace, "rb") as f:
        json_bytes = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
    result = {
        "trace": args.trace.name,
        "json_mb": round(json_bytes / 1e6, 1),
        "memory_events": runs[0]["memory_events"],
        "peaks": runs[0]["peaks"],
        "repeats": args.repeat,
        "load_s": round(load, 4),
        "analyze_s": round(analyze, 4),
        "analyze_over_load": round(analyze / load, 4),
        "goal": "analyze_over_load <= 0.20",
        "met": analyze / load <= 0.20,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.trace.name}: {result['json_mb']} MB of JSON, {result['memory_events']:,} memory events; "
        f"median of {args.repeat}: load {load * 1000:.0f} ms, analyze_memory {analyze * 1000:.1f} ms "
        f"= {analyze / load:.1%} of the load (goal <= 20%: {'met' if result['met'] else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
