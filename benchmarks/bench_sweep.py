"""A thread sweep of lstm-ensemble through `branchscope sweep` (one fresh worker per cell).

Runs `branchscope sweep --demo lstm-ensemble --modes sequential,fork --interop 1,2 --intra 1,2`,
prints a markdown table (cell, unprofiled median, spread, profiled median) and writes
benchmarks/results/sweep_lstm.json (the sweep's sweep.json with the machine and the command).
Step times on a busy machine mean little: run it when the machine is quiet.

    python benchmarks/bench_sweep.py [--steps 10] [--warmup 3] [--keep DIR] [--out FILE]
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

from branchscope.profiling.machine import usable_cores  # noqa: E402
from branchscope.profiling.run.sweep import load_sweep, markdown_table  # noqa: E402
from branchscope.profiling.trace.records import to_builtins  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sweep_lstm.json"
SWEEP = ["--demo", "lstm-ensemble", "--modes", "sequential,fork", "--interop", "1,2", "--intra", "1,2"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--keep", type=Path, metavar="DIR", help="sweep into DIR and keep it (default: a temporary folder)")
    p.add_argument("--out", type=Path, default=RESULTS, metavar="FILE", help=f"results file (default {RESULTS.relative_to(ROOT)})")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        folder = args.keep or Path(tmp) / "sweep"
        options = [*SWEEP, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        cmd = [sys.executable, "-m", "branchscope.app.cli", "sweep", *options, "--out", str(folder)]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)  # cells report on stderr as they end
        seconds = round(time.time() - t0, 1)
        if proc.returncode != 0:
            print(f"error: branchscope sweep exited with code {proc.returncode}", file=sys.stderr)
            return proc.returncode
        sweep = load_sweep(folder)

    print(f"lstm-ensemble, {usable_cores()} usable cores, median of at least {args.steps} unprofiled steps per cell (up to 20, or 2 s of steps) ({seconds} s)")
    print()
    print(markdown_table(sweep))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = {
        "machine": {"cores": os.cpu_count(), "usable_cores": usable_cores(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "command": ["branchscope", "sweep", *options, "--out", "DIR"],
        "seconds": seconds,
        "sweep": to_builtins(sweep),
    }  # fmt: skip
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    shown = args.out.relative_to(ROOT) if args.out.resolve().is_relative_to(ROOT) else args.out
    print(f"\nwrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
