"""Branches without TorchScript: sequential 1x1, threads 2x1 and fork 2x1 on every CPU demo, through
the real runner (a fresh worker per run), alternating in one run.

Each round runs the three configurations of every demo one after another, so a busy spell of the
machine falls on all of them alike; ROUNDS rounds. The figure of a configuration is the best round's
unprofiled median step (other processes only ever slow a round down), with the median of the rounds
beside it. For threads mode the table adds where its branch threads' time went over the profiled steps
(run.json's `branch_threads`): on a core, waiting for a core, waiting for the GIL.

Prints a Markdown table (for docs/speed.md) and writes benchmarks/results/threads_speedup.json.

    python benchmarks/bench_threads.py [--rounds 3] [--steps 10] [--demos small-ops,two-towers]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from branchscope.profiling.run.options import RunOptions  # noqa: E402
from branchscope.profiling.run.protocol import RunRequest  # noqa: E402
from branchscope.profiling.run.runner import run_profile  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "threads_speedup.json"
#: The demos that run on a CPU (the DataParallel and DDP demos need GPUs or ranks).
CPU_DEMOS = ["attention-qkv", "inception", "lstm-ensemble", "small-ops", "twin-mm", "two-towers"]
CONFIGS = {"sequential 1x1": ("sequential", 1, 1), "threads 2x1": ("threads", 2, 1), "fork 2x1": ("fork", 2, 1)}


def one_run(demo: str, mode: str, interop: int, intra: int, steps: int, warmup: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        options = RunOptions(demo=demo, steps=steps, warmup=warmup)
        result = run_profile(RunRequest(mode, interop, intra, Path(tmp), options=options))
        if not result.ok or result.run is None:
            return {"ok": False, "exit_code": result.exit_code, "message": result.message}
        run = result.run
        row = {
            "ok": True,
            "unprofiled_median_ms": run.unprofiled_median_ms,
            "unprofiled_spread_ms": run.unprofiled_spread_ms,
            "max_abs_diff": run.max_abs_diff,
            "gil": run.gil,
        }
        if run.branch_threads:
            wall = sum(t.wall_ms for t in run.branch_threads) or 1.0
            row["branch_threads"] = {
                "wall_ms": round(wall, 3),
                "cpu_share": round(sum(t.cpu_ms for t in run.branch_threads) / wall, 3),
                "core_wait_share": round(sum(t.core_wait_ms for t in run.branch_threads) / wall, 3),
                "gil_wait_share": round(sum(t.gil_wait_ms for t in run.branch_threads) / wall, 3),
            }
        return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--demos", default=",".join(CPU_DEMOS), help="comma-separated demo names")
    args = p.parse_args()
    demos = [d for d in args.demos.split(",") if d]

    runs: dict[str, dict[str, list[dict]]] = {d: {c: [] for c in CONFIGS} for d in demos}
    t0 = time.time()
    for r in range(args.rounds):
        for demo in demos:
            for label, (mode, interop, intra) in CONFIGS.items():
                row = one_run(demo, mode, interop, intra, args.steps, args.warmup)
                runs[demo][label].append(row)
                print(f"  round {r + 1}/{args.rounds} {demo} {label}: {row.get('unprofiled_median_ms', row.get('message'))}",
                      file=sys.stderr)  # fmt: skip

    def figures(demo: str, label: str) -> tuple[float | None, float | None]:
        values = [x["unprofiled_median_ms"] for x in runs[demo][label] if x.get("ok")]
        return (min(values), statistics.median(values)) if values else (None, None)

    summary = {}
    print(f"\n{os.cpu_count()} cores, {args.rounds} rounds, unprofiled median step of each run; best round "
          "(median of the rounds); speed-up = sequential 1x1 / the mode's best\n")  # fmt: skip
    print("| demo | sequential 1×1 | threads 2×1 | fork 2×1 | threads speed-up | fork speed-up | "
          "threads' branch time: on a core / waiting for a core / waiting for the GIL |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for demo in demos:
        seq, seq_med = figures(demo, "sequential 1x1")
        row: dict = {}
        cells = []
        for label in CONFIGS:
            best, med = figures(demo, label)
            row[label] = {"best_ms": best, "median_ms": med}
            cells.append(f"{best:.2f} ({med:.2f})" if best is not None and med is not None else "failed")
        speedups = []
        for label in ("threads 2x1", "fork 2x1"):
            best = row[label]["best_ms"]
            ratio = seq / best if seq and best else None
            row[label]["speedup"] = round(ratio, 3) if ratio else None
            speedups.append(f"{ratio:.2f}×" if ratio else "-")
        shares = [x["branch_threads"] for x in runs[demo]["threads 2x1"] if x.get("ok") and x.get("branch_threads")]
        if shares:
            mean = {k: statistics.mean(s[k] for s in shares) for k in ("cpu_share", "core_wait_share", "gil_wait_share")}
            row["threads_branch_time"] = mean
            where = f"{mean['cpu_share']:.0%} / {mean['core_wait_share']:.0%} / {mean['gil_wait_share']:.0%}"
        else:
            where = "-"
        summary[demo] = row
        print(f"| {demo} | {' | '.join(cells)} | {' | '.join(speedups)} | {where} |")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "seconds": round(time.time() - t0, 1),
        "summary": summary, "runs": runs,
    }, indent=1) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
