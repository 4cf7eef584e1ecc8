"""One profiling run in a fresh process: `python -m profiling.worker ARGS`.

A fresh process per run because `torch.set_num_interop_threads` can be called once per process,
before any inter-op work; so it and `torch.set_num_threads` are the first torch calls made here.
Then: load the model, find its branches, build the mode's plan, check the plan's outputs against the
model's, warm up W steps, time K steps without the profiler, and profile K more, each inside
`record_function("step N")`.

Results: OUT/trace.json.gz (a Chrome trace with a top-level "branchscope" object), OUT/run.json (timings,
branches, thread ids; written last, atomically, with "complete": true), OUT/plan.py (generated plans).

Protocol with the runner: JSON lines on the *original* stdout. The worker points file descriptor 1 at
stderr before loading anything, so whatever the model prints cannot corrupt the protocol.
    {"event": "phase", "phase": "profile" | "export"}   (the runner samples threads in between)
    {"event": "progress", "step": i, "of": K}
    {"event": "error", "message": ..., "traceback": ..., "exit_code": n}
    {"event": "finished", "run": "OUT/run.json"}
Exit codes: 0 ok, 2 bad model or model code raised, 3 mode cannot run here, 1 anything else.

A forked TorchScript run may abort at interpreter exit ("terminate called without an active
exception") once its work is done, so the worker leaves with os._exit after flushing its results.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import gzip
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

EXIT_OK, EXIT_FAILED, EXIT_BAD_MODEL, EXIT_MODE = 0, 1, 2, 3


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m profiling.worker", description="One branchscope profiling run.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--demo")
    src.add_argument("--model", type=Path)
    p.add_argument("--mode", choices=("sequential", "fork", "streams"), required=True)
    p.add_argument("--interop", type=int, required=True)
    p.add_argument("--intra", type=int, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--input-shape", action="append", default=[], dest="input_shapes")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    p.add_argument("--out", type=Path, required=True)
    return p


class _Protocol:
    """The JSON-lines channel to the runner, on a private duplicate of the original stdout."""

    def __init__(self) -> None:
        self.stream: TextIO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)  # the model's prints (and torch's) go to stderr from now on
        sys.stdout = sys.stderr

    def emit(self, **event: Any) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


class RunFailure(Exception):
    def __init__(self, exit_code: int, message: str, tb: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.tb = tb


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the runner dies, so a killed GUI run leaves nothing behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _thread_names() -> dict[int, str]:
    names = {}
    try:
        for entry in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{entry}/comm", encoding="utf-8") as f:
                    names[int(entry)] = f.read().strip()
            except OSError:
                continue
    except OSError:
        pass
    return names


def _interop_tids_from_trace(trace: dict[str, Any]) -> set[int]:
    tids = set()
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            if "PTThreadPool" in str(ev.get("args", {}).get("name", "")) and isinstance(ev.get("tid"), int):
                tids.add(ev["tid"])
    return tids


def _write_json_atomic(path: Path, data: Any, gz: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if gz:
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as f:
            json.dump(data, f)
    else:
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def run(args: argparse.Namespace, proto: _Protocol) -> dict[str, Any]:
    import torch

    # First torch calls of the process: the inter-op pool size can be set only before it starts.
    torch.set_num_interop_threads(args.interop)
    torch.set_num_threads(args.intra)
    main_tid = threading.get_native_id()

    from profiling.branches import find_branches
    from profiling.model_source import (
        DemoUnavailableError,
        ModelCodeError,
        ModelSourceError,
        ModelSpec,
        demo_info,
        load_model,
        parse_input_shape,
        user_traceback,
    )
    from profiling.plans import ModeUnavailable, build_plan, max_abs_diff

    if args.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RunFailure(EXIT_MODE, f"--device {device} needs CUDA, and torch sees no CUDA device here")
    if args.mode == "streams" and not device.startswith("cuda"):
        raise RunFailure(EXIT_MODE, "multi-stream needs CUDA: this machine has no CUDA device torch can use")

    try:
        spec = ModelSpec(
            demo=args.demo,
            path=args.model,
            input_shapes=tuple(parse_input_shape(s) for s in args.input_shapes),
            dtype=args.dtype,
        )
        loaded = load_model(spec, device)
    except DemoUnavailableError as exc:
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    except ModelSourceError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc)) from exc
    except ModelCodeError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc), exc.model_traceback) from exc

    user_file = demo_info(args.demo).path if args.demo else Path(args.model)
    is_cuda = device.startswith("cuda") or any(
        isinstance(t, torch.Tensor) and t.is_cuda for t in loaded.inputs
    )

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize()

    def call(fn: Any, what: str) -> Any:
        try:
            with torch.no_grad():
                return fn(*loaded.inputs)
        except Exception as exc:
            tb = user_traceback(exc, user_file) if user_file.suffix == ".py" else traceback.format_exc()
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RunFailure(EXIT_BAD_MODEL, f"the model raised {type(exc).__name__} while {what}: {first}", tb) from exc

    analysis = find_branches(loaded.model, loaded.inputs)
    try:
        plan = build_plan(args.mode, loaded.model, analysis, device)
    except ModeUnavailable as exc:
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    if plan.source:
        (args.out / "plan.py").write_text(plan.source, encoding="utf-8")

    expected = call(loaded.model, "running its forward")
    actual = call(plan, f"running the {args.mode} plan")
    sync()
    diff = max_abs_diff(expected, actual)
    del expected, actual

    for _ in range(args.warmup):
        call(plan, "warming up")
    sync()

    def timed_step() -> float:
        t0 = time.perf_counter()
        call(plan, "running a step")
        sync()
        return (time.perf_counter() - t0) * 1000.0

    unprofiled = [timed_step() for _ in range(args.steps)]

    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda else [])
    steps_ms: list[float] = []
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        proto.emit(event="phase", phase="profile")  # after the profiler's (slow) start
        for i in range(1, args.steps + 1):
            t0 = time.perf_counter()
            with record_function(f"step {i}"):
                call(plan, f"profiling step {i}")
                sync()
            steps_ms.append((time.perf_counter() - t0) * 1000.0)
            proto.emit(event="progress", step=i, of=args.steps)
    proto.emit(event="phase", phase="export")

    raw = args.out / "trace.raw.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, encoding="utf-8") as f:
        trace = json.load(f, strict=False)  # kineto may write raw control characters in strings
    raw.unlink()

    threads = _thread_names()
    interop = sorted(
        _interop_tids_from_trace(trace) | {tid for tid, name in threads.items() if name == "PTThreadPool"}
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    branches = analysis.to_json()
    device_label = device if not is_cuda else f"{device} ({torch.cuda.get_device_name(0)})"
    trace["branchscope"] = {
        "mode": args.mode,
        "interop": args.interop,
        "intra": args.intra,
        "cores": cores,
        "device": device_label,
        "main_tid": main_tid,
        "interop_tids": interop,
        "branches": branches,
    }
    _write_json_atomic(args.out / "trace.json.gz", trace, gz=True)

    median = statistics.median(steps_ms)
    unprofiled_median = statistics.median(unprofiled)
    return {
        "mode": args.mode,
        "interop": args.interop,
        "intra": args.intra,
        "cores": cores,
        "device": device_label,
        "torch": torch.__version__,
        "model": loaded.label,
        "source": loaded.kind,
        "steps": args.steps,
        "warmup": args.warmup,
        "steps_ms": [round(x, 4) for x in steps_ms],
        "median_ms": round(median, 4),
        "unprofiled_steps_ms": [round(x, 4) for x in unprofiled],
        "unprofiled_median_ms": round(unprofiled_median, 4),
        "profiler_overhead": round(median / unprofiled_median, 4) if unprofiled_median > 0 else None,
        "branches": branches,
        "regions": len({b["region"] for b in branches}),
        "max_abs_diff": diff,
        "main_tid": main_tid,
        "interop_tids": interop,
        "threads_applied": {"interop": torch.get_num_interop_threads(), "intra": torch.get_num_threads()},
        "pid": os.getpid(),
        "threads": {str(tid): name for tid, name in sorted(threads.items())},
        "fx_error": analysis.fx_error,
        "notes": analysis.notes,
        "plan": "plan.py" if plan.source else None,
        "trace": "trace.json.gz",
        "complete": True,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    proto = _Protocol()
    faulthandler.enable()  # a crash in native code still leaves a Python stack in the log
    _die_with_parent()
    code = EXIT_OK
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        result = run(args, proto)
        _write_json_atomic(args.out / "run.json", result)
        proto.emit(event="finished", run=str(args.out / "run.json"))
    except RunFailure as exc:
        proto.emit(event="error", message=str(exc), traceback=exc.tb, exit_code=exc.exit_code)
        code = exc.exit_code
    except Exception as exc:  # a bug of ours, or torch failing: report it, never hang
        proto.emit(
            event="error",
            message=f"the worker failed: {type(exc).__name__}: {exc}".splitlines()[0],
            traceback=traceback.format_exc(),
            exit_code=EXIT_FAILED,
        )
        code = EXIT_FAILED
    sys.stderr.flush()
    proto.stream.flush()
    # Skip interpreter teardown: forked TorchScript may abort there after the results are written.
    os._exit(code)


if __name__ == "__main__":
    main()
