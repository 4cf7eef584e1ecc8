"""A thread sweep of lstm-ensemble through `branchscope sweep` (one fresh worker per cell and pass).

Runs `branchscope sweep --demo lstm-ensemble --modes sequential,fork --interop 1,2 --intra 1,2
--passes 3` (sequential once per intra-op count: it has no inter-op pool), prints a markdown table
(cell, unprofiled median over the passes, pooled spread, each pass's median, profiled median, the
best and the cells within noise of it) and writes benchmarks/results/sweep_lstm.json (the sweep's
sweep.json with the machine and the command). Step times on a busy machine drift: the passes and
the ties say how far.

    python benchmarks/bench_sweep.py [--steps 10] [--warmup 3] [--passes 3] [--keep DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
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

from branchscope.profiling.machine import usable_cores  # noqa: E402
from branchscope.profiling.run.sweep import load_sweep  # noqa: E402
from branchscope.profiling.trace.records import to_builtins  # noqa: E402
from branchscope.profiling.trace.sweep_text import best_text, markdown_table  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sweep_lstm.json"
SWEEP = ["--demo", "lstm-ensemble", "--modes", "sequential,fork", "--interop", "1,2", "--intra", "1,2"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--keep", type=Path, metavar="DIR", help="sweep into DIR and keep it (default: a temporary folder)")
    p.add_argument("--out", type=Path, default=RESULTS, metavar="FILE", help=f"results file (default {RESULTS.relative_to(ROOT)})")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        folder = args.keep or Path(tmp) / "sweep"
        options = [*SWEEP, "--steps", str(args.steps), "--warmup", str(args.warmup), "--passes", str(args.passes)]
        cmd = [sys.executable, "-m", "branchscope.app.cli", "sweep", *options, "--out", str(folder)]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)  # cells report on stderr as they end
        seconds = round(time.time() - t0, 1)
        if proc.returncode != 0:
            print(f"error: branchscope sweep exited with code {proc.returncode}", file=sys.stderr)
            return proc.returncode
        sweep = load_sweep(folder)

    print(f"lstm-ensemble, {usable_cores()} usable cores, {args.passes} passes, median of the passes' medians of at least {args.steps} unprofiled steps each (up to 20, or 2 s of steps) ({seconds} s)")
    print()
    print(markdown_table(sweep))
    print(f"\nbest: {best_text(sweep)}")
    results = {
        "machine": {"cores": os.cpu_count(), "usable_cores": usable_cores(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "command": ["branchscope", "sweep", *options, "--out", "DIR"],
        "seconds": seconds,
        "sweep": to_builtins(sweep),
    }  # fmt: skip
    write_report(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
