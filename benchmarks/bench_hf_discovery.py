"""Branch discovery through torch.export, and fork vs sequential, for the small Hugging Face test models.

* discovery: `find_branches` on a freshly loaded model (torch.fx fails, then torch.export non-strict
  finds the graph, the type run and the region search), in this process: the first call (torch.export's
  own imports included) and the best of REPEATS more;
* step time: the tests' random BERT and ViT (2 layers, hidden 64, batch 2) through the real runner,
  sequential 1 inter-op x 1 intra-op vs fork 1 x 1 and 2 x 1, alternating ROUNDS times; the workers' unprofiled
  medians, best round as the headline (other processes only ever slow a round down), median round too.

Prints a table and writes benchmarks/results/hf_discovery.json.

    python benchmarks/bench_hf_discovery.py [--rounds 3] [--steps 10] [--repeats 3]
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

MODELS = ROOT / "tests" / "fixtures" / "models"
RESULTS = Path(__file__).resolve().parent / "results" / "hf_discovery.json"
CASES = {"bert": MODELS / "hf_bert.py", "vit": MODELS / "hf_vit.py"}
#: fork 1x1 runs the same TorchScript plan with one pool thread: what the plan gains without parallelism.
CONFIGS = (("sequential", 1), ("fork", 1), ("fork", 2))


def discovery(path: Path, repeats: int) -> dict:
    import torch

    from branchscope.profiling.run.branches import find_branches
    from branchscope.profiling.run.model_source import ModelSpec, load_model

    torch.set_num_threads(1)
    times, analysis = [], None
    for _ in range(1 + repeats):
        loaded = load_model(ModelSpec(path=path))
        t0 = time.perf_counter()
        analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs)
        times.append(time.perf_counter() - t0)
    assert analysis is not None
    return {
        "tracer": analysis.tracer,
        "tracer_errors": analysis.tracer_errors,
        "regions": len(analysis.regions),
        "branches": [row["name"] for row in analysis.to_json()],
        "first_s": round(times[0], 3),
        "best_s": round(min(times[1:]), 3),
    }


def one_run(path: Path, mode: str, interop: int, steps: int, warmup: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_hf_") as tmp:
        result = run_profile(
            RunRequest(mode=mode, interop=interop, intra=1, out=Path(tmp), options=RunOptions(model=path, steps=steps, warmup=warmup))
        )
        if not result.ok or result.run is None:
            return {"ok": False, "exit_code": result.exit_code, "message": result.message}
        return {"ok": True, "unprofiled_median_ms": result.run.unprofiled_median_ms, "max_abs_diff": result.run.max_abs_diff}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    started = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out: dict = {
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_at_start": load},  # fmt: skip
        "rounds": args.rounds,
        "steps": args.steps,
        "models": {},
    }
    for name, path in CASES.items():
        disc = discovery(path, args.repeats)
        runs: dict[str, list[dict]] = {f"{m} {i}x1": [] for m, i in CONFIGS}
        for _ in range(args.rounds):
            for mode, interop in CONFIGS:
                runs[f"{mode} {interop}x1"].append(one_run(path, mode, interop, args.steps, args.warmup))
        best = {k: min((r["unprofiled_median_ms"] for r in v if r["ok"]), default=None) for k, v in runs.items()}
        median = {
            k: statistics.median([r["unprofiled_median_ms"] for r in v if r["ok"]]) if any(r["ok"] for r in v) else None
            for k, v in runs.items()
        }
        seq, fork = best["sequential 1x1"], best["fork 2x1"]
        out["models"][name] = {
            "model": str(path.relative_to(ROOT)),
            "discovery": disc,
            "best_ms": best,
            "median_round_ms": median,
            "fork_over_sequential": round(fork / seq, 3) if seq and fork else None,
            "fork_2x1_over_fork_1x1": round(fork / best["fork 1x1"], 3) if fork and best["fork 1x1"] else None,
            "max_abs_diff": max((r["max_abs_diff"] for v in runs.values() for r in v if r["ok"]), default=None),
            "runs": runs,
        }
    out["seconds"] = round(time.perf_counter() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{'model':6} {'tracer':27} {'regions':>7} {'discovery first/best s':>23} {'seq 1x1 ms':>11} {'fork 1x1 ms':>12} {'fork 2x1 ms':>12} {'fork/seq':>9}")
    for name, m in out["models"].items():
        d = m["discovery"]
        print(f"{name:6} {d['tracer']!s:27} {d['regions']:>7} {d['first_s']:>11.3f} / {d['best_s']:<9.3f} "
              f"{m['best_ms']['sequential 1x1']!s:>11} {m['best_ms']['fork 1x1']!s:>12} {m['best_ms']['fork 2x1']!s:>12} {m['fork_over_sequential']!s:>9}")  # fmt: skip
    print(f"wrote {RESULTS} ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
