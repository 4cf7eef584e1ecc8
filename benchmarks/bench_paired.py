"""Every demo paired: sequential 1×1 against fork 2×1 and threads 2×1, in one worker, in alternation.

`branchscope speedup`'s engine (`profiling/run/paired.py`): one paired worker per demo (the pools of
fork 2×1 and threads 2×1 agree, so the three configurations share it), ROUNDS rounds of one step of
each; each parallel mode's speedup over sequential 1×1 is the median of per-step ratios with its 95%
bootstrap interval. Beside them, what the branches could give on 2 threads (the prediction from the
branch graph and sequential per-branch times the worker measured after its rounds) and each mode's
measured speedup as a share of it. Demos that need several GPUs or a process group are left out.
Prints a Markdown table and writes benchmarks/results/paired.json.

    python benchmarks/bench_paired.py [--rounds 30] [--demos inception,twin-mm]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from branchscope.profiling.machine import usable_cores  # noqa: E402
from branchscope.profiling.run.model_source import list_demos  # noqa: E402
from branchscope.profiling.run.options import RunOptions  # noqa: E402
from branchscope.profiling.run.paired import PairedRequest, parse_configs, run_paired  # noqa: E402
from branchscope.profiling.trace.records import to_builtins  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "paired.json"
CONFIGS = "sequential:1x1,fork:2x1,threads:2x1"


def demos(names: str | None) -> list[str]:
    chosen = [d.name for d in list_demos() if not d.requires_cuda_devices and not d.name.startswith("ddp-")]
    return [n for n in chosen if names is None or n in names.split(",")]


def cell(record: dict, i: int) -> str:
    s = record["speedup"][i]
    if s is None:
        return "–"
    lo, hi = s["ci95"]
    mark = "" if s["distinguishable"] else " (≈1)"
    return f"{s['median']:.2f}× [{lo:.2f}–{hi:.2f}]{mark}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--demos", help="comma-separated demo names (default: every demo that runs in one process)")
    args = p.parse_args()
    rows, results = [], []
    for name in demos(args.demos):
        t0 = time.perf_counter()
        result = run_paired(PairedRequest(parse_configs(CONFIGS), RunOptions(demo=name, warmup=3), rounds=args.rounds))
        seconds = time.perf_counter() - t0
        if not result.ok or result.record is None:
            results.append({"demo": name, "ok": False, "exit_code": result.exit_code, "message": result.message})
            rows.append(f"| {name} | failed: {result.message} | | | | | |")
            continue
        record = to_builtins(result.record)
        results.append({"demo": name, "ok": True, "seconds": round(seconds, 1), "record": record})
        medians = " / ".join(f"{c['median_ms']:.1f}" for c in record["configs"])
        pred = record["prediction"]
        bound = None if pred is None else pred["by_threads"].get("2")
        prediction = "–" if bound is None else f"{bound:.2f}×"
        shares = " / ".join(
            "–" if bound is None or record["speedup"][i] is None else f"{100 * record['speedup'][i]['median'] / bound:.0f}%"
            for i in (1, 2)
        )
        rows.append(
            f"| {name} | {medians} | {cell(record, 1)} | {cell(record, 2)} | {prediction} | {shares} | {seconds:.0f} s |"
        )
    table = [
        f"{args.rounds} rounds in one worker, {usable_cores()} cores ({platform.machine()}); medians ms: sequential 1×1 / fork 2×1 / threads 2×1",
        "",
        "| demo | medians (ms) | fork 2×1 speedup [95%] | threads 2×1 speedup [95%] | could give on 2 threads | "
        "share of it: fork / threads | took |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    print("\n".join(table))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": args.rounds, "cores": usable_cores(), "configs": CONFIGS, "demos": results}, indent=1))
    print(f"wrote {RESULTS}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
