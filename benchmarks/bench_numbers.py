"""Numbers that hold on the user's model: the bound with its interval, and each parallel speedup in
its parts, on models whose branches share modules, interleave or share an embedding, and on the demos;
quiet and beside two CPU burners.

For each model, `branchscope speedup`'s engine (`profiling/run/paired.py`) measures sequential 1×1,
fork 2×1 and threads 2×1 in one worker, in alternation, with the parts (fork 1×1 and threads 1×1 as
their plans one branch at a time on the 2 threads' pools); the prediction comes from sequential steps
timed by what each branch owns (`profiling/run/ownership.py`). Then the same beside two processes
that spin on a core each. Last, what the ownership hooks cost: the step of a model of hundreds of
tiny module calls (`SharedAcrossBlocks` of 100 blocks: 200 branches, 600 module calls), plain and
with the timing hooks on, in this process.

The pattern models are the tests' (`tests/run/pattern_models.py`), written as model files under
build/bench-patterns/ (the worker runs `python -I`: a model file must stand alone).
Prints Markdown tables and writes benchmarks/results/numbers.json.

    python benchmarks/bench_numbers.py [--rounds 20] [--models siamese,small-ops] [--no-busy]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from branchscope.profiling.machine import usable_cores  # noqa: E402
from branchscope.profiling.run.options import RunOptions  # noqa: E402
from branchscope.profiling.run.paired import PairedRequest, parse_configs, run_paired  # noqa: E402
from branchscope.profiling.trace.records import to_builtins  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "numbers.json"
PATTERNS_SOURCE = ROOT / "tests" / "run" / "pattern_models.py"
PATTERN_DIR = ROOT / "build" / "bench-patterns"
PATTERNS = ("siamese", "interleaved", "tied", "shared_blocks")
DEMOS = ("small-ops", "twin-mm", "two-towers", "inception")
CONFIGS = "sequential:1x1,fork:2x1,threads:2x1"


def pattern_file(name: str) -> Path:
    """A model file for pattern `name`: the tests' pattern models and build_model/example_inputs."""
    PATTERN_DIR.mkdir(parents=True, exist_ok=True)
    path = PATTERN_DIR / f"{name}.py"
    path.write_text(
        PATTERNS_SOURCE.read_text(encoding="utf-8")
        + f"\n\ndef build_model():\n    return patterns()[{name!r}][0]\n\n\ndef example_inputs():\n"
        f"    return patterns()[{name!r}][1]\n",
        encoding="utf-8",
    )
    return path


def options(name: str) -> RunOptions:
    return RunOptions(model=pattern_file(name), warmup=3) if name in PATTERNS else RunOptions(demo=name, warmup=3)


@contextmanager
def burners(count: int):
    """`count` processes spinning on a core each, for the busy measurements."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def said(v: dict | None) -> str:
    if not v or v.get("median") is None:
        return "–"
    lo, hi = v["ci95"]
    return f"{v['median']:.2f}× [{lo:.2f}–{hi:.2f}]"


def bound(pred: dict | None) -> str:
    if not pred or "2" not in pred["by_threads"]:
        return "–"
    ci = (pred.get("by_threads_ci95") or {}).get("2")
    return f"{pred['by_threads']['2']:.2f}×" + (f" [{ci[0]:.2f}–{ci[1]:.2f}]" if ci else "")


def row(name: str, where: str, record: dict, seconds: float) -> str:
    cells = [name, where, bound(record["prediction"])]
    for i in (1, 2):  # fork 2×1, threads 2×1
        s = record["speedup"][i]
        parts = s and s.get("parts")
        cells += [said(s), said(parts and parts["plan"]), said(parts and parts["parallel"])]
    return "| " + " | ".join(cells) + f" | {seconds:.0f} s |"


def measure(name: str, rounds: int) -> tuple[dict, float]:
    t0 = time.perf_counter()
    result = run_paired(PairedRequest(parse_configs(CONFIGS), options(name), rounds=rounds))
    seconds = time.perf_counter() - t0
    if not result.ok or result.record is None:
        return {"ok": False, "exit_code": result.exit_code, "message": result.message}, seconds
    return {"ok": True, "record": to_builtins(result.record)}, seconds


def hook_cost(steps: int = 200) -> dict:
    """The step of SharedAcrossBlocks(100) plain and with the ownership timing hooks on (ms, medians)."""
    import torch

    sys.path.insert(0, str(PATTERNS_SOURCE.parent))
    from pattern_models import WIDTH, SharedAcrossBlocks  # type: ignore[import-not-found]

    from branchscope.profiling.run.branch_timing import measure_branch_times
    from branchscope.profiling.run.branches import find_branches
    from branchscope.profiling.run.ownership import call_map

    torch.set_num_threads(1)
    model = SharedAcrossBlocks(blocks=100).eval()
    x = torch.randn(8, WIDTH)
    analysis = find_branches(model, (x,))
    calls = call_map(model, analysis)

    def step() -> None:
        with torch.no_grad():
            model(x)

    for _ in range(20):
        step()
    plain = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        plain.append((time.perf_counter() - t0) * 1000.0)
    hooked = measure_branch_times(model, analysis, step, steps)
    assert hooked is not None
    return {
        "model": "SharedAcrossBlocks(blocks=100)",
        "branches": len({p.branch for p in calls.pieces}),
        "pieces": len(calls.pieces),
        "module_calls": sum(calls.calls_per_step),
        "plain_ms": round(statistics.median(plain), 4),
        "hooked_ms": round(statistics.median(hooked.steps_ms), 4),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--models", help=f"comma-separated (default: {','.join(PATTERNS + DEMOS)})")
    p.add_argument("--no-busy", action="store_true", help="quiet only")
    args = p.parse_args()
    names = [n for n in PATTERNS + DEMOS if args.models is None or n in args.models.split(",")]
    results, rows = [], []
    for where in ("quiet", *(() if args.no_busy else ("2 burners",))):
        for name in names:
            if where == "quiet":
                got, seconds = measure(name, args.rounds)
            else:
                with burners(2):
                    got, seconds = measure(name, args.rounds)
            results.append({"model": name, "where": where, "seconds": round(seconds, 1), **got})
            rows.append(row(name, where, got["record"], seconds) if got["ok"] else f"| {name} | {where} | failed: {got['message']} |")
    cost = hook_cost()
    table = [
        f"{args.rounds} rounds in one worker, {usable_cores()} cores ({platform.machine()}); speedups over sequential 1×1, "
        "each [95% interval]; plan: M 1×1 over sequential 1×1; threads: M 2×1 over M 1×1",
        "",
        "| model | machine | bound on 2 threads | fork 2×1 | its plan | its threads | threads 2×1 | its plan | its threads | took |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"ownership hooks on {cost['model']} ({cost['branches']} branches, {cost['pieces']} pieces, "
        f"{cost['module_calls']} module calls a step): step {cost['plain_ms']:.3f} ms plain, "
        f"{cost['hooked_ms']:.3f} ms timed by ownership",
    ]
    print("\n".join(table))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps({"rounds": args.rounds, "cores": usable_cores(), "configs": CONFIGS, "runs": results, "hook_cost": cost}, indent=1)
    )
    print(f"wrote {RESULTS}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
