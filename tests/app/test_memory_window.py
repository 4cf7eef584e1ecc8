"""The window's Memory tab: the imbalance of the shown trace, its events table following the chosen
device and the timeline's selected range, and a way back to the events in the timeline."""

from __future__ import annotations

from branchscope.app.pages.memory_page import MemoryPage
from branchscope.app.pages.run_page import RunPage
from tests.builders.memory import ALLOCATIONS, PEAKS, T0_US, write_four_gpu_trace
from tests.builders.runs import write_small_trace


def test_a_multi_gpu_trace_fills_the_memory_tab_and_its_table_follows_device_and_range(window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_four_gpu_trace(tmp_path / "dp.json"))]) == 1
    memory_tab = window.tabs.indexOf(window.page(MemoryPage))
    assert window.tabs.isTabEnabled(memory_tab)
    analysis = window.page(MemoryPage).analysis
    peaks = {d.device: d.peak_bytes for d in analysis.devices}
    assert peaks["cuda:0"] == PEAKS["cuda:0"] and peaks["cuda:3"] == PEAKS["cuda:3"]
    # the heaviest device is chosen first, its allocations listed
    assert window.page(MemoryPage).memory_table.device == "cuda:0"
    cuda0 = analysis.allocations("cuda:0")
    assert len(cuda0) == len([a for a in ALLOCATIONS if a[0] == 0])  # all made inside the profile
    assert sorted(window.page(MemoryPage).memory_table.rows(), key=lambda a: a.alloc_ns or 0) == sorted(cuda0, key=lambda a: a.alloc_ns or 0)
    # another device from the summary
    window.page(MemoryPage).memory_summary.deviceChosen.emit("cuda:1")
    assert window.page(MemoryPage).memory_table.device == "cuda:1"
    assert len(window.page(MemoryPage).memory_table.rows()) == len(analysis.allocations("cuda:1"))
    # a range selected in the timeline narrows the table to what is alive in it
    window.page(MemoryPage).memory_summary.deviceChosen.emit("cuda:0")
    window.page(RunPage).timeline.select_range((T0_US + 91) * 1000, (T0_US + 93) * 1000)
    alive = [a for a in ALLOCATIONS if a[0] == 0 and a[4] <= 93 and (a[5] is None or a[5] >= 91)]
    assert len(window.page(MemoryPage).memory_table.rows()) == len(alive) < len(cuda0)
    # an allocation's op, shown in the timeline
    allocation = next(a for a in window.page(MemoryPage).memory_table.rows() if a.event >= 0)
    window.page(MemoryPage).memory_table.eventActivated.emit(allocation.event)
    assert window.tabs.currentIndex() == 0
    assert window.page(RunPage).timeline.selected == allocation.event


def test_a_trace_without_memory_events_has_the_memory_tab_disabled(window, tmp_path):
    trace = write_small_trace(tmp_path / "t.json")
    assert window.open_trace_files([str(trace)]) == 1
    has_memory = bool(window.page(RunPage).timeline.trace.memory)
    assert window.tabs.isTabEnabled(window.tabs.indexOf(window.page(MemoryPage))) == has_memory


def test_allocator_snapshots_open_together_as_ranks_in_the_memory_tab(window, tmp_path):
    from tests.builders.snapshots import two_gpu_snapshot, write

    paths = [write(tmp_path / f"snapshot-rank-{r}.pickle", two_gpu_snapshot()) for r in (0, 1)]
    assert window.open_trace_files([str(p) for p in paths]) == 2
    assert window.runs_table.rowCount() == 1 and window.run_list.entries[0].label == "ranks 0, 1"
    assert window.tabs.currentWidget() is window.page(MemoryPage)
    devices = {d.device for d in window.page(MemoryPage).analysis.devices}
    assert {"rank0/cuda:0", "rank1/cuda:1"} <= devices
    # read again from disk when it left the trace cache
    window.run_list.entries[0].trace = None
    assert window.show_entry(0)


def test_a_pickle_that_would_run_code_opens_nothing_and_says_why(window, tmp_path):
    import os
    import pickle

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "device_traces": [Evil()]}))
    assert window.open_trace_files([str(bad)]) == 0
    assert window.message_box is not None and not marker.exists()
