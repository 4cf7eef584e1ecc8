"""Trace loading: branchscope's `load_trace` against HTA's reader and json.load + pandas.DataFrame.

Each reader runs in its own fresh subprocess (so imports, caches and heap left by one cannot help or
hurt another), several times, and we report the median wall time of the load call alone (imports
excluded) and the peak RSS growth during it (ru_maxrss after minus RSS before, via /proc).

Goals (issue 2): on a >= 50 MB JSON trace, load_trace <= 1/4 of HTA's time and <= 1/2 of
json+pandas, peak memory <= 3x the JSON size. Run: `.venv/bin/python benchmarks/bench_load_trace.py`
(needs the `bench` extra: HolisticTraceAnalysis, pandas).
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
import json, resource, sys, time
sys.path.insert(0, {root!r})
reader, path = sys.argv[1], sys.argv[2]

def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

if reader == "branchscope":
    from branchscope.profiling import load_trace
    run = lambda: load_trace(path)
elif reader == "hta":
    import logging
    logging.disable(logging.WARNING)
    from hta.common.trace import parse_trace_file
    run = lambda: parse_trace_file(path)
elif reader == "json_pandas":
    import gzip
    import pandas as pd
    def run():
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            doc = json.load(f)
        return pd.DataFrame(doc["traceEvents"])
before = rss_kb()
t0 = time.perf_counter()
result = run()
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": dt, "peak_growth_kb": peak - before}}))
"""


def measure(reader: str, path: Path, repeats: int) -> dict:
    times, peaks = [], []
    code = _CHILD.format(root=str(ROOT))
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code, reader, str(path)], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(row["seconds"])
        peaks.append(row["peak_growth_kb"] * 1024)
    return {"median_s": statistics.median(times), "min_s": min(times), "peak_growth_bytes": max(peaks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "load_trace.json"))
    args = ap.parse_args()
    path = Path(args.trace)
    if not path.exists():
        print(f"trace not found: {path}", file=sys.stderr)
        return 1
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        json_bytes = len(f.read())

    results = {}
    for reader in ("branchscope", "json_pandas", "hta"):
        try:
            results[reader] = measure(reader, path, args.repeats)
        except subprocess.CalledProcessError as exc:
            print(f"{reader}: failed: {exc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    ours = results["branchscope"]["median_s"]
    print(f"trace: {path.name}  JSON {json_bytes / 1e6:.1f} MB  ({args.repeats} runs each, fresh process)")
    print(f"{'reader':<14}{'median s':>10}{'min s':>9}{'peak MB':>9}{'ours/this':>11}")
    for reader, r in results.items():
        print(
            f"{reader:<14}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['peak_growth_bytes'] / 1e6:>9.0f}"
            f"{ours / r['median_s']:>11.2f}"
        )
    mem_ratio = results["branchscope"]["peak_growth_bytes"] / json_bytes
    print(f"branchscope peak memory while loading: {mem_ratio:.2f}x the JSON size (goal <= 3x)")
    for other, goal in (("hta", 0.25), ("json_pandas", 0.5)):
        if other in results:
            ratio = ours / results[other]["median_s"]
            print(f"vs {other}: {ratio:.3f} of its time (goal <= {goal}) -> {'met' if ratio <= goal else 'NOT met'}")
    report = {"trace": path.name, "json_bytes": json_bytes, "results": results, "peak_memory_ratio": mem_ratio}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
