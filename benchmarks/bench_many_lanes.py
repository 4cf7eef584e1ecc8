"""Lane explosion (issue 17): N complete events on N distinct threads against the same N events on one.

Two generated traces of N complete events ("ph": "X", kineto's shape: µs timestamps with ns
decimals, a category, a small `args`), identical but for their tids: every event on a thread of
its own, or all of them on one thread. Default N = 1,000,000 (`--events` for fewer), written once
into `--work` and reused.

Each load runs in its own fresh subprocess, several times, the two traces in turn: the median wall
time of `load_trace` alone (imports excluded) and its peak RSS growth, measured as in
bench_load_trace.py (VmHWM after, reset before through /proc/self/clear_refs, minus VmRSS before;
or, when larger, the RSS plus the forked reader child's USS sampled every 5 ms in one more run).
After the load, the same process times what `branchscope inspect TRACE` computes on it: first the
analyses alone (busy time per lane, inter-op occupancy, parallelism, steps window, cores used,
memory imbalance), then the whole `--json` summary (those again, the rank summaries and one row
per lane: the lanes' objects are made there).

The same pair again with a "thread_name" event for each thread, as kineto writes them: the names
take the reader a Python step per named thread.

Goals (issue 17): on N lanes, load time <= 3x and peak memory <= 2x what the same events take on
one lane. Run: `.venv/bin/python benchmarks/bench_many_lanes.py [--events N] [--before DIR]`;
writes benchmarks/results/many_lanes.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_load_trace import child_code, run_sampled  # noqa: E402
from report import machine_words, write_report  # noqa: E402

TIME_GOAL = 3.0
MEMORY_GOAL = 2.0
EPOCH_US = 1_712_195_495_519_689
PID = 783658

#: The measuring child (`child_code`): load_trace timed; then, for "inspect", the analyses and the summary.
_CHILD = child_code(r"""
path, before = sys.argv[1], sys.argv[2]
if before:  # an older branchscope, from the folder given
    sys.path.insert(0, before)
from branchscope.profiling.trace.reader import load_trace

def run():
    return load_trace(path)

def after(trace):
    row = {"lanes": len(trace.lanes)}
    if sys.argv[3] == "inspect":
        from branchscope.profiling.trace import analyses
        t0 = time.perf_counter()
        analyses.lane_busy_ns(trace)
        analyses.interop_occupancy(trace)
        analyses.parallelism(trace)
        analyses.steps_window(trace)
        analyses.cores_used(trace)
        analyses.memory_imbalance(trace, "cuda")
        row["analyses_s"] = time.perf_counter() - t0
        from branchscope.app.cmd_inspect import summary
        t0 = time.perf_counter()
        summary(trace)
        row["summary_s"] = time.perf_counter() - t0
    return row
""")


def write_trace(path: Path, n: int, many: bool, named: bool = False) -> None:
    """N complete events 10 µs apart, 5 µs long: each on a thread of its own, or all on one;
    `named`: each thread with its "thread_name" event, as kineto writes them."""
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        f.write(
            json.dumps({"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python3"}}) + ",\n"
        )
        if named:
            for t in range(PID + 1, PID + 1 + n) if many else (PID,):
                f.write(f'{{"ph": "M", "name": "thread_name", "pid": {PID}, "tid": {t}, "args": {{"name": "thread {t}"}}}},\n')
        step = 100_000
        for lo in range(0, n, step):
            lines = []
            for i in range(lo, min(lo + step, n)):
                tid = PID + 1 + i if many else PID
                ts = EPOCH_US * 1000 + i * 10_000 + i % 1000
                lines.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{i % 50}", "pid": {PID}, "tid": {tid}, '
                    f'"ts": {ts // 1000}.{ts % 1000:03d}, "dur": 5.{i % 1000:03d}, '
                    f'"args": {{"External id": {i}, "Record function id": 0}}}}'
                )
            f.write(",\n".join(lines))
            f.write(",\n" if lo + step < n else "\n")
        f.write("]}\n")


def trace_path(work: Path, n: int, many: bool, named: bool = False) -> Path:
    path = work / f"{'many' if many else 'one'}_{'named_' if named else ''}lanes_{n}.json"
    if not path.exists():
        print(f"generating {path}...", flush=True)
        partial = path.with_suffix(".partial")
        write_trace(partial, n, many, named)
        partial.replace(path)
    return path


def measure(paths: dict[str, Path], repeats: int, before: str = "") -> dict[str, dict]:
    """Each trace's figures; the traces are loaded in turn, so that a machine busy with something
    else for a while slows both alike."""
    cmds = {shape: [sys.executable, "-c", _CHILD, str(p), before] for shape, p in paths.items()}
    rows: dict[str, list[dict]] = {shape: [] for shape in paths}
    for _ in range(repeats):  # timed alone: the sampler would take CPU from a reader using both cores
        for shape, cmd in cmds.items():
            out = subprocess.run([*cmd, "inspect"], capture_output=True, text=True, check=True).stdout
            rows[shape].append(json.loads(out.splitlines()[-1]))
    results = {}
    for shape, cmd in cmds.items():
        out, sampled = run_sampled([*cmd, "load"])  # once more, for what the reader's child held meanwhile
        last = json.loads(out.strip().splitlines()[-1])
        peaks = [r["peak_growth_kb"] * 1024 for r in rows[shape]]
        peaks.append(max(last["peak_growth_kb"] * 1024, sampled - last["rss_before_kb"] * 1024))
        runs = rows[shape]
        results[shape] = {
            "load_median_s": statistics.median(r["seconds"] for r in runs),
            "load_min_s": min(r["seconds"] for r in runs),
            "peak_growth_bytes": max(peaks),
            "analyses_median_s": statistics.median(r["analyses_s"] for r in runs),
            "summary_median_s": statistics.median(r["summary_s"] for r in runs),
            "load_and_inspect_median_s": statistics.median(r["seconds"] + r["summary_s"] for r in runs),
            "lanes": runs[0]["lanes"],
            "runs": repeats,
        }
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="N: events in each trace (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per trace")
    ap.add_argument(
        "--before", help="also time an older branchscope: a folder holding branchscope/profiling/ (git archive)"
    )
    ap.add_argument("--before-repeats", type=int, default=1, help="runs per trace of the older one")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "branchscope-bench"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "many_lanes.json"))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths = {
        "one lane": trace_path(work, args.events, False),
        "N lanes": trace_path(work, args.events, True),
        "one named": trace_path(work, args.events, False, named=True),
        "N named": trace_path(work, args.events, True, named=True),
    }
    versions = {"branchscope": ("", args.repeats)}
    if args.before:
        versions["before"] = (str(Path(args.before).resolve()), args.before_repeats)
    results: dict[str, dict[str, dict]] = {}
    for version, (folder, repeats) in versions.items():
        results[version] = measure(paths, repeats, folder)

    print(f"\n{args.events:,} complete events; JSON {paths['N lanes'].stat().st_size / 1e6:.0f} MB "
          f"({paths['N named'].stat().st_size / 1e6:.0f} MB with a name per thread)")
    print(
        f"  {'version':<12}{'trace':<11}{'lanes':>10}{'load s':>8}{'peak MB':>9}{'analyses s':>11}"
        f"{'summary s':>10}{'load+inspect s':>15}"
    )
    for version, shapes in results.items():
        for shape, r in shapes.items():
            print(
                f"  {version:<12}{shape:<11}{r['lanes']:>10,}{r['load_median_s']:>8.2f}"
                f"{r['peak_growth_bytes'] / 1e6:>9.0f}{r['analyses_median_s']:>11.3f}{r['summary_median_s']:>10.2f}"
                f"{r['load_and_inspect_median_s']:>15.2f}"
            )
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    pairs = {"unnamed": ("one lane", "N lanes"), "named": ("one named", "N named")}
    for version, shapes in results.items():
        for pair, (one_shape, many_shape) in pairs.items():
            one, many = shapes[one_shape], shapes[many_shape]
            t = many["load_median_s"] / one["load_median_s"]
            m = many["peak_growth_bytes"] / one["peak_growth_bytes"]
            i = many["load_and_inspect_median_s"] / one["load_and_inspect_median_s"]
            ratios.setdefault(version, {})[pair] = {"load_time": t, "peak_memory": m, "load_and_inspect_time": i}
            print(
                f"  {version}: {many_shape} against {one_shape}: load time {t:.2f}x, peak memory {m:.2f}x, "
                f"load + inspect {i:.2f}x"
            )
    for pair, r in ratios["branchscope"].items():
        t, m = r["load_time"], r["peak_memory"]
        print(f"  {pair}: load time {t:.2f}x (goal <= {TIME_GOAL:g}x): {'met' if t <= TIME_GOAL else 'NOT met'}")
        print(f"  {pair}: peak memory {m:.2f}x (goal <= {MEMORY_GOAL:g}x): {'met' if m <= MEMORY_GOAL else 'NOT met'}")
    report = {"machine": machine_words(), "events": args.events, "results": results, "ratios": ratios}
    write_report(args.out, report, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
