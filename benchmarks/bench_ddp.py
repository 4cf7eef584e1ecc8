"""Distributed runs on the CPU: ddp-gather-loss (and ddp-local-loss beside it) on 2 and 4 ranks.

For each demo and world size, runs `branchscope profile --demo DEMO --nproc N --mode sequential
--interop 1 --intra 1` (gloo, one thread per rank) and reads back: the step time (the slowest
rank's, step by step: median of the unprofiled and of the profiled steps), each rank's own median,
and each rank's CPU memory peak from its trace (`branchscope memory`'s analysis), with rank 0's
peak over rank 1's. Prints a markdown table and writes benchmarks/results/ddp.json.
More ranks than cores share the cores, so step times grow with the world size for that reason too:
the memory ratio is the figure that says what the gathered loss costs. Run it on a quiet machine.

    python benchmarks/bench_ddp.py [--worlds 2,4] [--steps 5] [--warmup 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import write_report  # noqa: E402

from branchscope.profiling.trace.memory import analyze_memory  # noqa: E402
from branchscope.profiling.trace.sources import open_job  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "ddp.json"
DEMOS = ("ddp-gather-loss", "ddp-local-loss")


def one(demo: str, world: int, steps: int, warmup: int, folder: Path) -> dict[str, object]:
    options = ["--demo", demo, "--nproc", str(world), "--mode", "sequential", "--interop", "1", "--intra", "1",
               "--steps", str(steps), "--warmup", str(warmup)]  # fmt: skip
    cmd = [sys.executable, "-m", "branchscope.app.cli", "profile", *options, "--out", str(folder), "--quiet"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    seconds = round(time.time() - t0, 1)
    if proc.returncode != 0:
        raise SystemExit(f"error: branchscope profile {' '.join(options)} exited with code {proc.returncode}")
    run = json.loads((folder / "run.json").read_text())
    analysis = analyze_memory(open_job([folder]))
    peaks = {d.rank: d.peak_bytes for d in analysis.devices if d.plain_device == "cpu"}
    return {
        "demo": demo,
        "world_size": world,
        "seconds": seconds,
        "unprofiled_median_ms": run["unprofiled_median_ms"],
        "unprofiled_spread_ms": run["unprofiled_spread_ms"],
        "profiled_median_ms": run["median_ms"],
        "rank_unprofiled_median_ms": [r["unprofiled_median_ms"] for r in run["ranks"]],
        "peak_bytes": [peaks.get(r) for r in range(world)],
        "rank0_over_rank1_peak": round(peaks[0] / peaks[1], 3) if peaks.get(1) else None,
        "command": ["branchscope", "profile", *options, "--out", "DIR"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", default="2,4", help="world sizes (default 2,4)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=RESULTS, metavar="FILE", help=f"results file (default {RESULTS.relative_to(ROOT)})")
    args = p.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_ddp_") as tmp:
        for demo in DEMOS:
            for world in worlds:
                rows.append(one(demo, world, args.steps, args.warmup, Path(tmp) / f"{demo}-{world}"))

    mib = 1024 * 1024
    print(f"{os.cpu_count()} cores, gloo, 1 thread per rank, median of {args.steps} steps each")
    print()
    print("| demo | ranks | step, unprofiled (ms) | step, profiled (ms) | per-rank unprofiled (ms) | peak per rank (MiB) | rank 0 / rank 1 |")
    print("| --- | ---: | ---: | ---: | --- | --- | ---: |")
    for r in rows:
        per_rank = ", ".join(f"{x:.1f}" for x in r["rank_unprofiled_median_ms"])  # type: ignore[attr-defined]
        peaks = ", ".join(f"{x / mib:.1f}" for x in r["peak_bytes"])  # type: ignore[attr-defined]
        print(f"| {r['demo']} | {r['world_size']} | {r['unprofiled_median_ms']:.1f} | {r['profiled_median_ms']:.1f} | "
              f"{per_rank} | {peaks} | {r['rank0_over_rank1_peak']:.2f} |")  # fmt: skip
    machine = {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    write_report(args.out, {"machine": machine, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
