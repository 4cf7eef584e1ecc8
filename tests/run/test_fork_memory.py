"""A real fork run's CPU memory: each step's output is freed, and the free recorded, before the next
step (TorchScript's join runs on an inter-op pool thread, whose task held the output past the
profiler's view: every step's output looked alive to the end, memory climbing an output a step)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from branchscope.app import cmd_profile
from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import analyze_memory
from branchscope.profiling.trace.ranges import step_events

STEPS = 4


def _profile(out: Path) -> int:
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_profile.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args([
        "profile", "--demo", "inception", "--mode", "fork", "--interop", "2", "--intra", "1",
        "--steps", str(STEPS), "--warmup", "1", "--out", str(out), "--quiet",
    ])  # fmt: skip
    return int(args.handler(args))


def test_fork_run_frees_each_steps_output_before_the_next_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _profile(out) == 0
    trace = load_trace(out / "trace.json.gz")
    analysis = analyze_memory(trace)
    cpu = analysis.device("cpu")
    assert cpu is not None
    steps = step_events(trace)
    assert steps.size == STEPS
    starts, ends = trace.start_ns[steps], trace.end_ns[steps]
    # The demo's forward returns its block's join: one aten::cat output a step, each freed where
    # the profiler saw it, before the next step began.
    outputs = sorted((a for a in analysis.allocations("cpu") if a.where == "aten::cat"), key=lambda a: a.alloc_ns or 0)
    assert len(outputs) == STEPS
    size = outputs[0].bytes
    for a, next_start in zip(outputs, [*starts[1:].tolist(), None], strict=True):
        assert a.free_ns is not None and not a.freed_unseen, a
        assert next_start is None or a.free_ns <= next_start
    # At the peak, nothing live is an output of an earlier step.
    peak_step_start = int(starts[starts <= cpu.peak_ns].max())
    earlier = [a for a in analysis.live_at_peak("cpu") if a.where == "aten::cat" and (a.alloc_ns or 0) < peak_step_start]
    assert earlier == []
    # The memory at each step's end does not climb by an output a step (it did: 4.8 MiB each step).
    series = analysis.series["cpu"]
    at_end = series.total_bytes[np.searchsorted(series.ts_ns, ends, side="right") - 1]
    assert np.all(np.diff(at_end) < size), (at_end.tolist(), size)
