"""The Memory tab's figures against the allocations they sum (pytest-qt, offscreen): its headline on
the device of the largest peak, two ranks' imbalance as heaviest ÷ lightest, the events table's
"at most … at once" never above the device's peak (its sum over a range can be), and the frees the
profiler missed said in one line and flagged in the table."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QApplication

from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import analyze_memory
from branchscope.profiling.trace.merge import merge_traces
from branchscope.widgets.memory_summary import MemorySummary
from branchscope.widgets.memory_table import FREED_UNSEEN, MemoryTable
from branchscope.widgets.units import format_bytes
from tests.builders.memory import T0_US, GiB, MiB, mem, op, write_four_gpu_trace, write_trace
from tests.builders.public_traces import public_trace_path
from tests.gui_helpers import show


def _summary(qtbot, analysis) -> MemorySummary:
    view = show(qtbot, MemorySummary(), 700, 560)
    view.set_analysis(analysis)
    QApplication.processEvents()
    return view


def test_headline_is_the_gpu_not_the_cpu_listed_first(qtbot, tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        op("step", 1, 0, 100),
        mem(10, 8, 8, addr=1, device=-1, device_type=0),
        mem(11, 6 * GiB, 6 * GiB, addr=2, device=1),
    ], deviceProperties=[{"id": 1, "totalGlobalMem": 32 * GiB}]))
    view = _summary(qtbot, analyze_memory(trace))
    words = view.words.text()
    assert words.startswith("Largest peak: GPU cuda:1, 6 GiB of 32 GiB.") and "8 B" not in words
    assert view.default_device() == "cuda:1" and view.device == "cuda:1"
    assert view.rows() == [("step", 6 * GiB, 1)]


def test_two_ranks_five_times_apart_read_five_times(qtbot, tmp_path: Path) -> None:
    def rank(r: int, nbytes: int) -> Path:
        events = [op("step", 1, 0, 100), mem(10, nbytes, nbytes, addr=1, device=r)]
        return write_trace(tmp_path / f"rank-{r}.json", events, distributedInfo={"rank": r, "world_size": 2})

    analysis = analyze_memory(merge_traces([load_trace(rank(0, 5 * GiB)), load_trace(rank(1, GiB))]))
    view = _summary(qtbot, analysis)
    words = view.words.text()
    assert "Rank 0 holds 5.0× rank 1 at its peak (rank0/cuda:0: 5 GiB, rank1/cuda:1: 1 GiB; heaviest ÷ lightest of 2)." in words
    assert "1.67" not in words and "median" not in words
    assert "cuda" not in view.median_lines  # the median of two is their mean: no line for it


def test_table_says_the_most_alive_at_once_never_the_sum(qtbot, tmp_path: Path) -> None:
    trace = load_trace(write_four_gpu_trace(tmp_path / "four.json.gz"))
    analysis = analyze_memory(trace)
    view = show(qtbot, MemoryTable(), 800, 320)
    t0 = T0_US * 1000
    # cuda:0 from 81 µs: the scatter (freed at 90) and the gather (95) alive, 1.5 GiB; from 75 µs the
    # loss (freed at 80) too: 2.25 GiB at 75 µs, the most at once.
    view.set_analysis(analysis, "cuda:0", t0 + 81_000, t0 + 92_000, t0)
    caption = view.caption.text()
    assert "2 allocations alive at some time, at most 1.5 GiB of them at once (81.000 µs)" in caption, caption
    view.set_analysis(analysis, "cuda:0", t0 + 75_000, t0 + 92_000, t0)
    caption = view.caption.text()
    assert "3 allocations alive at some time, at most 2.25 GiB of them at once (75.000 µs)" in caption, caption
    peak = analysis.device("cuda:0")
    assert peak is not None and 2.25 * GiB <= peak.peak_bytes


def test_public_trace_table_stays_under_the_peak(qtbot, shared_traces: Path) -> None:
    analysis = analyze_memory(load_trace(public_trace_path(shared_traces, "hta_gpu_memory_2streams.json.gz")))
    main = analysis.main_device()
    assert main is not None
    view = show(qtbot, MemoryTable(), 800, 320)
    view.set_analysis(analysis, main.device)
    caption = view.caption.text()
    # It read "13385 allocations alive, 48.9 GiB" of a 6.17 GiB peak on a 31.7 GiB GPU.
    assert "13385 allocations alive at some time, at most " in caption and "48.9" not in caption
    most = analysis.most_live_in_range(main.device, *analysis.trace.span())
    assert most is not None and most[0] <= main.peak_bytes
    assert f"at most {format_bytes(most[0])} of them at once" in caption
    # the rest of the peak was held from before profiling: the device's own total says it
    assert f"; the device's total peaks at {format_bytes(main.peak_bytes)} in the range" in caption
    summary = _summary(qtbot, analysis)
    assert summary.words.text().startswith(f"Largest peak: GPU {main.label}, {format_bytes(main.peak_bytes)}")


def test_frees_the_profiler_missed_are_said_and_flagged(qtbot, tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        op("step 1", 1, 0, 40), op("step 2", 1, 50, 40),
        mem(10, 4 * MiB, 4 * MiB, addr=0xA0, device=-1, device_type=0),
        mem(60, 4 * MiB, 8 * MiB, addr=0xA0, device=-1, device_type=0),  # no free between
        mem(80, -4 * MiB, 4 * MiB, addr=0xA0, device=-1, device_type=0),
    ]))
    analysis = analyze_memory(trace)
    summary = _summary(qtbot, analysis)
    assert re.search(r"The profiler missed 1 free on cpu: .* allocated again at its address", summary.words.text())
    table = show(qtbot, MemoryTable(), 800, 320)
    table.set_analysis(analysis, "cpu")
    assert [(a.alloc_ns, note) for a, note in table.flagged()] == [(10_000, FREED_UNSEEN)]
    assert "1 freed where the profiler missed it" in table.caption.text()
