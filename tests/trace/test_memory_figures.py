"""Every memory figure checked against the allocations it sums: live at any time <= that device's
peak <= its capacity (when known), per device and per rank; the headline on the device of the
largest peak; the imbalance of two ranks as heaviest / lightest; frees the profiler missed (an
address allocated again with no free between) found and not counted alive past the reuse. On built
traces and on every public trace with memory events (../shared/traces, skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import (
    BEFORE_PROFILING,
    UNEXPLAINED,
    MemoryAnalysis,
    analyze_memory,
    missed_frees_line,
)
from branchscope.profiling.trace.merge import merge_traces
from branchscope.profiling.trace.model import Trace
from tests.builders.memory import GiB, MiB, mem, op, write_four_gpu_trace, write_trace
from tests.builders.public_traces import FACTS, public_trace_path


def assert_figures_hold(trace: Trace, analysis: MemoryAnalysis) -> None:
    """The invariants every figure of `memory` and the Memory tab rests on."""
    assert analysis.devices
    for d in analysis.devices:
        series = analysis.series[d.device]
        assert d.peak_bytes == int(series.total_bytes.max())
        if d.capacity_bytes is not None:
            assert d.peak_bytes <= d.capacity_bytes, d.label
        if d.reserved_peak_bytes:
            assert d.peak_bytes <= d.reserved_peak_bytes, d.label
        curve = analysis.live_curve(d.device)
        if curve is None:  # no addresses: no allocation to sum
            assert d.at_peak == () and analysis.allocations(d.device) == []
            continue
        # What the paired allocations hold at once never passes the device's peak, nor, event by
        # event, the allocator's own running total.
        assert curve.min() >= 0 and int(curve.max()) <= d.peak_bytes, d.label
        assert np.all(curve <= series.total_bytes), d.label
        # The table's "at most … at once" over the whole profile and over any part of it.
        t0, t1 = trace.span() if len(trace) else (int(series.ts_ns[0]), int(series.ts_ns[-1]))
        most, at = analysis.most_live_in_range(d.device, t0, t1)
        assert most == int(curve.max()) and t0 <= at <= t1
        mid = (int(series.ts_ns[0]) + int(series.ts_ns[-1])) // 2
        part, _ = analysis.most_live_in_range(d.device, mid, t1)
        assert part <= most
        held = analysis.peak_in_range(d.device, t0, t1)
        assert held is not None and most <= held[0] == d.peak_bytes
        held_part = analysis.peak_in_range(d.device, mid, t1)
        assert held_part is not None and part <= held_part[0] <= d.peak_bytes
        # What is live at the peak, plus what no event explains, is the peak.
        assert sum(g.bytes for g in d.at_peak) == d.peak_bytes, d.label
        live = analysis.live_at_peak(d.device)
        assert sum(a.bytes for a in live) <= d.peak_bytes
        explained = {g.where: g.bytes for g in d.at_peak if g.where not in (BEFORE_PROFILING, UNEXPLAINED)}
        by_where: dict[str, int] = {}
        for a in live:
            if a.alloc_ns is not None:
                by_where[a.where] = by_where.get(a.where, 0) + a.bytes
        assert by_where == explained
    main = analysis.main_device()
    assert main is not None and main.peak_bytes == max(d.peak_bytes for d in analysis.devices)
    assert analysis.to_json()["main"] == {"device": main.plain_device, "rank": main.rank}
    for imb in analysis.imbalance:
        group = [d for d in analysis.devices if d.device.rsplit("/", 1)[-1].split(":")[0] == imb.device_type]
        peaks = sorted(d.peak_bytes for d in group)
        assert imb.heaviest_bytes == peaks[-1]
        expected = peaks[0] if len(group) == 2 else float(np.median(peaks))
        assert (imb.reference_bytes, imb.against) == (expected, "lightest" if len(group) == 2 else "median")


def test_built_four_gpu_trace_holds_every_figure(tmp_path: Path) -> None:
    trace = load_trace(write_four_gpu_trace(tmp_path / "four.json.gz"))
    assert_figures_hold(trace, analyze_memory(trace))


MEMORY_TRACES = ["hta_gpu_memory_2streams.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz"]


@pytest.mark.parametrize("name", sorted(FACTS))
def test_public_traces_hold_every_figure(shared_traces: Path, name: str) -> None:
    trace = load_trace(public_trace_path(shared_traces, name))
    if not trace.memory:
        assert name not in MEMORY_TRACES  # the README's traces with memory events keep them
        pytest.skip(f"{name} has no memory events")
    analysis = analyze_memory(trace)
    assert_figures_hold(trace, analysis)


def test_public_gpu_trace_headline_is_the_gpu_and_its_table_stays_under_the_peak(shared_traces: Path) -> None:
    trace = load_trace(public_trace_path(shared_traces, "hta_gpu_memory_2streams.json.gz"))
    analysis = analyze_memory(trace)
    # The CPU peaks at 8 B, the GPU at 6.17 GiB: the GPU is the device that matters.
    main = analysis.main_device()
    assert main is not None and main.plain_device == "cuda:1" and main.peak_bytes == 6_629_508_096
    # Its 13,385 allocations are all alive at some time of the profile (48.9 GiB summed, above the
    # 31.7 GiB capacity); at once they never pass the peak (the rest of it was held from before).
    t0, t1 = trace.span()
    rows = analysis.rows_in_range(main.device, t0, t1)
    cols = analysis.columns(main.device)
    assert cols is not None and rows.size == 13_385 and int(cols.bytes[rows].sum()) > main.capacity_bytes
    most, _ = analysis.most_live_in_range(main.device, t0, t1)
    before = next(g.bytes for g in main.at_peak if g.where == BEFORE_PROFILING)
    assert most <= main.peak_bytes - before
    assert main.freed_unseen == 0


def _two_ranks(tmp_path: Path, heavy: int, light: int) -> Trace:
    def rank(r: int, nbytes: int) -> Path:
        events = [op("step", 1, 0, 100), mem(10, nbytes, nbytes, addr=1, device=r), mem(90, -nbytes, 0, addr=1, device=r)]
        return write_trace(tmp_path / f"rank-{r}.json", events, distributedInfo={"rank": r, "world_size": 2})

    return merge_traces([load_trace(rank(0, heavy)), load_trace(rank(1, light))])


def test_two_ranks_five_times_read_five_times(tmp_path: Path) -> None:
    trace = _two_ranks(tmp_path, 5 * GiB, 1 * GiB)
    analysis = analyze_memory(trace)
    assert_figures_hold(trace, analysis)
    (imb,) = analysis.imbalance
    # Against the median of two (their mean, 3 GiB) it read 1.67×; against the lighter rank, 5.0×.
    assert imb.max_over_median == pytest.approx(5 / 3)
    assert (imb.ratio, imb.against, imb.heaviest, imb.lightest) == (5.0, "lightest", "rank0/cuda:0", "rank1/cuda:1")
    assert imb.excess_bytes == 4 * GiB
    words = imb.words(lambda b: f"{b / GiB:.0f} GiB")
    assert words.startswith("rank 0 holds 5.0× rank 1 at its peak") and "heaviest ÷ lightest" in words
    doc = analysis.to_json()["imbalance"][0]
    assert (doc["ratio"], doc["ratio_of"], doc["lightest"]) == (5.0, "max/min", "rank1/cuda:1")


def test_three_devices_are_against_the_median(tmp_path: Path) -> None:
    events = [mem(10 + d, b, b, addr=1, device=d) for d, b in ((0, 600), (1, 100), (2, 200))]
    analysis = analyze_memory(load_trace(write_trace(tmp_path / "t.json", events)))
    (imb,) = analysis.imbalance
    assert (imb.ratio, imb.against, imb.reference_bytes, imb.excess_bytes) == (3.0, "median", 200.0, 400)
    assert "3.0× the median GPU" in imb.words(str) and "heaviest ÷ median of 3" in imb.words(str)


def test_headline_device_is_the_largest_peak_whatever_the_order(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        mem(10, 8, 8, addr=1, device=-1, device_type=0),  # the CPU, listed first
        mem(11, 6 * GiB, 6 * GiB, addr=1, device=1),
        mem(12, 2 * GiB, 2 * GiB, addr=1, device=2, device_type=12),  # an XPU, a kind of its own
    ]))
    analysis = analyze_memory(trace)
    assert [d.device for d in analysis.devices][0] == "cpu"
    main = analysis.main_device()
    assert main is not None and main.device == "cuda:1"
    assert_figures_hold(trace, analysis)


def test_a_free_the_profiler_missed_ends_where_its_address_is_reused(tmp_path: Path) -> None:
    # Step 1's output (100 B at 0xA0) is freed on a thread the profiler does not follow: no free
    # event, and the profiler's running total keeps counting it. Step 2 gets the same address.
    trace = load_trace(write_trace(tmp_path / "t.json", [
        op("step 1", 1, 0, 40), op("step 2", 1, 50, 40),
        mem(10, 100, 100, addr=0xA0), mem(20, 30, 130, addr=0xB0), mem(30, -30, 100, addr=0xB0),
        mem(60, 100, 200, addr=0xA0), mem(70, 30, 230, addr=0xB0), mem(80, -30, 200, addr=0xB0),
        mem(85, -100, 100, addr=0xA0),
    ]))
    analysis = analyze_memory(trace)
    (d,) = analysis.devices
    assert d.freed_unseen == 1 and d.peak_bytes == 230
    first, second = (a for a in analysis.allocations("cuda:0") if a.addr == 0xA0)
    assert (first.freed_unseen, first.free_ns) == (True, 60_000)  # freed by the reuse at the latest
    assert (second.freed_unseen, second.free_ns) == (False, 85_000)
    # At the peak (t=70) the first output is not alive: what no event explains is said so.
    assert [(g.where, g.bytes) for g in d.at_peak] == [("step 2", 130), (UNEXPLAINED, 100)]
    assert all(a.addr != 0xA0 or a.alloc_ns == 60_000 for a in analysis.live_at_peak("cuda:0"))
    assert analysis.live_at("cuda:0", 55_000)[0].addr == 0xA0  # until the reuse, it may still be
    assert analysis.to_json()["devices"][0]["freed_unseen"] == 1
    assert_figures_hold(trace, analysis)
    line = missed_frees_line(1, "cuda:0")
    assert line.startswith("the profiler missed 1 free on cuda:0: this block was allocated again") and "\n" not in line


def test_processes_have_address_spaces_of_their_own(tmp_path: Path) -> None:
    # Two processes' CPU allocations at one address are two blocks, not one allocated twice.
    a = mem(10, 64, 64, addr=0xF0, device=-1, device_type=0)
    b = {**mem(20, 32, 96, addr=0xF0, device=-1, device_type=0), "pid": 200}
    c = mem(30, -64, 32, addr=0xF0, device=-1, device_type=0)
    d = {**mem(40, -32, 0, addr=0xF0, device=-1, device_type=0), "pid": 200}
    analysis = analyze_memory(load_trace(write_trace(tmp_path / "t.json", [a, b, c, d])))
    got = [(x.bytes, x.alloc_ns, x.free_ns, x.freed_unseen) for x in analysis.allocations("cpu")]
    assert got == [(64, 10_000, 30_000, False), (32, 20_000, 40_000, False)]
    assert analysis.devices[0].freed_unseen == 0


def test_per_rank_figures_hold_on_a_merged_job(tmp_path: Path) -> None:
    trace = _two_ranks(tmp_path, 512 * MiB, 256 * MiB)
    analysis = analyze_memory(trace)
    assert [d.label for d in analysis.devices] == ["rank0/cuda:0", "rank1/cuda:1"]
    assert [d.peak_bytes for d in analysis.devices] == [512 * MiB, 256 * MiB]
    assert_figures_hold(trace, analysis)
