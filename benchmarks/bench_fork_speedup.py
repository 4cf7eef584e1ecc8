"""Fork speed-up and profiler overhead, measured through the real runner (one fresh worker per run).

* lstm-ensemble forked with 2 inter-op x 1 intra-op threads vs sequential with 1 x 1
  (goal: at most 0.8x the sequential step time);
* the generated fork plan vs a hand-written torch.jit.fork version of the same model (goal: within 10%);
* the profiler's overhead (profiled / unprofiled median step) for every demo.

Step times are the workers' unprofiled medians (the CPU sampler runs only while profiling). Runs
of the compared configurations alternate, ROUNDS times; the best round of each configuration is the
headline (other processes on a shared machine only ever slow a round down), the median is shown too.
Prints a table and writes benchmarks/results/fork_speedup.json.

    python benchmarks/bench_fork_speedup.py [--rounds 3] [--steps 10]
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

from branchscope.profiling.run.model_source import list_demos  # noqa: E402
from branchscope.profiling.run.options import RunOptions  # noqa: E402
from branchscope.profiling.run.protocol import RunRequest  # noqa: E402
from branchscope.profiling.run.runner import run_profile  # noqa: E402

HAND = Path(__file__).resolve().parent / "lstm_ensemble_handfork.py"
RESULTS = Path(__file__).resolve().parent / "results" / "fork_speedup.json"


def one_run(label: str, steps: int, warmup: int, mode: str, interop: int, intra: int, **model) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_fork_") as tmp:
        options = RunOptions(steps=steps, warmup=warmup, **model)
        result = run_profile(RunRequest(mode, interop, intra, Path(tmp), options=options))
        if not result.ok or result.run is None:
            return {"label": label, "ok": False, "exit_code": result.exit_code, "message": result.message}
        run = result.run
        return {
            "label": label,
            "ok": True,
            "unprofiled_median_ms": run.unprofiled_median_ms,
            "profiled_median_ms": run.median_ms,
            "overhead": run.profiler_overhead,
            "max_abs_diff": run.max_abs_diff,
            "cpu_samples": result.samples,
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()

    configs = {
        "sequential 1x1": dict(demo="lstm-ensemble", mode="sequential", interop=1, intra=1),
        "fork 2x1 (generated)": dict(demo="lstm-ensemble", mode="fork", interop=2, intra=1),
        "fork 2x1 (hand-written)": dict(model=HAND, mode="sequential", interop=2, intra=1),
    }
    rounds: dict[str, list[dict]] = {k: [] for k in configs}
    t0 = time.time()
    for r in range(args.rounds):
        for label, kw in configs.items():
            rounds[label].append(one_run(label, args.steps, args.warmup, **kw))
            print(f"  round {r + 1}/{args.rounds} {label}: {rounds[label][-1].get('unprofiled_median_ms')} ms", file=sys.stderr)

    def median_of(label: str, key: str) -> float | None:
        values = [x[key] for x in rounds[label] if x.get("ok")]
        return statistics.median(values) if values else None

    def best_of(label: str, key: str) -> float | None:
        values = [x[key] for x in rounds[label] if x.get("ok")]
        return min(values) if values else None

    seq = best_of("sequential 1x1", "unprofiled_median_ms")
    gen = best_of("fork 2x1 (generated)", "unprofiled_median_ms")
    hand = best_of("fork 2x1 (hand-written)", "unprofiled_median_ms")
    seq_med = median_of("sequential 1x1", "unprofiled_median_ms")
    gen_med = median_of("fork 2x1 (generated)", "unprofiled_median_ms")
    hand_med = median_of("fork 2x1 (hand-written)", "unprofiled_median_ms")
    speedup = gen / seq if seq and gen else None
    vs_hand = gen / hand if gen and hand else None

    overheads = []
    for demo in list_demos():
        for mode, interop in (("sequential", 1), ("fork", 2)):
            if demo.name == "lstm-ensemble":
                label = "sequential 1x1" if mode == "sequential" else "fork 2x1 (generated)"
                runs = [x for x in rounds[label] if x.get("ok")]
                row = runs[-1] if runs else {"ok": False, "message": "no successful run"}
            else:
                row = one_run(f"{demo.name} {mode}", args.steps, args.warmup, demo=demo.name, mode=mode, interop=interop, intra=1)
            overheads.append({"demo": demo.name, "mode": mode, "interop": interop, "intra": 1, **row})

    print()
    print(f"lstm-ensemble, {os.cpu_count()} cores, {args.rounds} rounds x median of {args.steps} unprofiled steps")
    print(f"{'configuration':<28}{'best ms':>10}{'vs sequential':>15}{'median ms':>11}{'vs sequential':>15}")
    for label in configs:
        ms, med = best_of(label, "unprofiled_median_ms"), median_of(label, "unprofiled_median_ms")
        ratio = f"{ms / seq:.2f}x" if ms and seq else "-"
        ratio_med = f"{med / seq_med:.2f}x" if med and seq_med else "-"
        print(f"{label:<28}{(f'{ms:.1f}' if ms else 'failed'):>10}{ratio:>15}{(f'{med:.1f}' if med else '-'):>11}{ratio_med:>15}")
    if speedup is not None:
        print(f"fork / sequential = {speedup:.2f}x (goal <= 0.80): {'met' if speedup <= 0.8 else 'MISSED'}")
    if vs_hand is not None:
        print(f"generated / hand-written = {vs_hand:.2f}x (goal within 10%): {'met' if abs(vs_hand - 1) <= 0.10 else 'MISSED'}")
    print()
    print(f"{'demo':<24}{'mode':<12}{'unprofiled ms':>14}{'profiled ms':>13}{'overhead':>10}{'max diff':>10}")
    for row in overheads:
        if row.get("ok"):
            print(f"{row['demo']:<24}{row['mode'] + ' ' + str(row['interop']) + 'x1':<12}{row['unprofiled_median_ms']:>14.2f}"
                  f"{row['profiled_median_ms']:>13.2f}{row['overhead']:>9.2f}x{row['max_abs_diff']:>10.1e}")
        else:
            print(f"{row['demo']:<24}{row['mode'] + ' ' + str(row['interop']) + 'x1':<12}  not run: {row.get('message')}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "seconds": round(time.time() - t0, 1),
        "lstm_ensemble": {
            "sequential_1x1_ms": seq, "fork_2x1_generated_ms": gen, "fork_2x1_hand_ms": hand,
            "fork_over_sequential": speedup, "generated_over_hand": vs_hand,
            "median_rounds": {"sequential_1x1_ms": seq_med, "fork_2x1_generated_ms": gen_med, "fork_2x1_hand_ms": hand_med},
            "runs": rounds,
        },
        "profiler_overhead": overheads,
    }, indent=1) + "\n")  # fmt: skip
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
