"""CPU samples of the worker's OS threads line up with the profiler's events on the trace's clock."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiling.cpu_sampler import ThreadSeries
from profiling.runner import RunRequest, run_profile

MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
TOLERANCE_US = 2000.0  # the issue: within 2 ms


def test_cpu_time_gained_between_updates_goes_to_the_intervals_seen_running():
    # The kernel updated the CPU time only at the last sample (a tick): 2 ms gained over 4 intervals,
    # but the thread was seen running only at the last three samples.
    s = ThreadSeries(1, "t", ts_ns=[0, 1_000_000, 2_000_000, 3_000_000, 4_000_000],
                     cpu_ns=[0, 0, 0, 0, 2_000_000], running=[False, False, True, True, True])  # fmt: skip
    pct = s.cpu_pct()
    assert pct[1] == 0.0 and pct[2] == 0.0  # idle at both ends; started inside, after the others filled
    assert pct[3] == pytest.approx(100.0) and pct[4] == pytest.approx(100.0)
    assert sum(pct[1:]) == pytest.approx(200.0)  # totals are kept: 2 ms over 1 ms intervals


def test_cpu_time_without_states_is_spread_evenly_and_capped():
    s = ThreadSeries(1, "t", ts_ns=[0, 1000, 2000, 3000], cpu_ns=[0, 0, 0, 1500], running=[None] * 4)
    assert s.cpu_pct()[1:] == [pytest.approx(50.0)] * 3


@pytest.mark.slow
def test_busy_op_lines_up_with_its_threads_samples(tmp_path):
    result = run_profile(
        RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path, model=MODELS / "busy_then_idle.py", steps=3, warmup=0)
    )
    assert result.ok, result.message
    with gzip.open(tmp_path / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    main = trace["branchscope"]["main_tid"]
    busy = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == "busy"]
    assert len(busy) == 3
    samples = sorted(
        (e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample" and e["tid"] == main), key=lambda e: e["ts"]
    )
    intervals = [(a["ts"], b["ts"], b["args"]["cpu_pct"]) for a, b in zip(samples, samples[1:], strict=False)]
    for event in busy:
        start, end = event["ts"], event["ts"] + event["dur"]
        inside = [p for s, e, p in intervals if start + TOLERANCE_US <= s and e <= end - TOLERANCE_US]
        before = [p for s, e, p in intervals if start - 25_000 <= s and e <= start - TOLERANCE_US]
        after = [p for s, e, p in intervals if end + TOLERANCE_US <= s and e <= end + 25_000]
        assert len(inside) >= 40 and len(before) >= 15 and len(after) >= 15
        # Asleep before and after (a sample clock off by more than 2 ms would show the spin here) ...
        assert max(before) < 50.0 and max(after) < 50.0
        # ... and spinning in between.
        assert sum(p >= 50.0 for p in inside) >= 0.9 * len(inside)
