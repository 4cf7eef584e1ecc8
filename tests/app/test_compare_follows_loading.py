"""The Compare tab following the runs list's selection reads what it lacks through the window's one
loader, off the GUI thread; a newer selection drops a reading still going; at most four runs are
compared at once (the page says so); runs that leave the comparison let go of their traces unless
shown or cached (issue 35, finding 3's review: Ctrl+A over many runs froze the window and kept every
trace compared in memory)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from branchscope.app import trace_loader
from branchscope.app.pages.compare_page import MAX_COMPARED, ComparePage
from branchscope.app.run_entry import entry_for_path
from branchscope.app.runs import Runs
from branchscope.profiling.trace.model import LoadCancelled
from tests.builders.runs import write_small_trace
from tests.gui_helpers import select_rows

#: Long enough for a busy two-core CI machine.
WAIT_MS = 60_000


@pytest.fixture
def traces(tmp_path):
    """Six small traces of runs in turn sequential, fork and threads."""
    modes = ["sequential", "fork", "threads"] * 2
    return [str(write_small_trace(tmp_path / f"{k}-{mode}.json", mode)) for k, mode in enumerate(modes)]


def _listed_unread(window, paths):
    """List `paths` as runs kept from an earlier session are listed: their traces not read."""
    window.run_list.extend([entry_for_path(p) for p in paths])


def _compare_page_in_front(window):
    page = window.page(ComparePage)
    window.show_page(page)
    return page


@pytest.fixture
def reads(monkeypatch):
    """Every entry read for the Compare page: (its first path, the thread it was read on); reads of
    paths in `reads.hold` wait until `reads.release` is set."""
    reads = SimpleNamespace(log=[], hold=set(), release=threading.Event())
    real = trace_loader.read_whole

    def read_whole(paths, progress=None):
        reads.log.append((str(paths[0]), threading.current_thread()))
        assert threading.current_thread() is not threading.main_thread(), "read on the GUI thread"
        if str(paths[0]) in reads.hold:
            assert reads.release.wait(WAIT_MS / 1000)
        return real(paths, progress)

    monkeypatch.setattr(trace_loader, "read_whole", read_whole)
    return reads


def test_selected_runs_are_read_off_the_gui_thread_then_compared(window, qtbot, traces, reads):
    _listed_unread(window, traces[:3])
    page = _compare_page_in_front(window)
    started = []
    window.loader.started.connect(started.append)
    select_rows(window, [0, 1, 2])
    assert page.compared == []  # nothing read on the GUI thread: the loader reads them
    assert started and len(started[0]) == 3  # the one loader's load (its progress and Cancel)
    assert "reading 3 traces" in page.pick_label.text()
    qtbot.waitUntil(lambda: page.compared == [0, 1, 2], timeout=WAIT_MS)
    assert sorted(path for path, _ in reads.log) == sorted(traces[:3])
    assert all(thread is not threading.main_thread() for _, thread in reads.log)
    assert [r.trace.path for r in page.workspace.rows] == traces[:3]
    assert page.splitter.isVisible() and not page.pick_label.isVisible()


@pytest.mark.parametrize("newer_in_memory", [False, True])
def test_a_newer_selection_drops_a_reading_still_going(window, qtbot, traces, reads, newer_in_memory):
    """The older reading's runs are never shown, whether the newer selection is read too or was in memory."""
    _listed_unread(window, traces[:4])
    if newer_in_memory:
        for k in (2, 3):
            window.run_list[k].trace = trace_loader.read_run(window.run_list[k].paths)
    page = _compare_page_in_front(window)
    reads.hold.update(traces[:2])
    select_rows(window, [0, 1])
    qtbot.waitUntil(lambda: len(reads.log) >= 1, timeout=WAIT_MS)  # the older reading is under way, held
    older = reads.log[0][1]
    select_rows(window, [2, 3])
    if not newer_in_memory:
        qtbot.waitUntil(lambda: page.compared == [2, 3], timeout=WAIT_MS)
    assert page.compared == [2, 3]
    reads.release.set()
    older.join(WAIT_MS / 1000)
    assert not older.is_alive()
    qtbot.waitUntil(lambda: not window.loader.is_loading(), timeout=WAIT_MS)  # what it posted is delivered
    assert page.compared == [2, 3]
    assert [r.trace.path for r in page.workspace.rows] == traces[2:4]
    assert window.run_list[0].trace is None and window.run_list[1].trace is None  # the older result is not kept


def test_cancel_stops_the_reading_and_it_is_not_started_again_until_the_selection_changes(window, qtbot, traces, reads):
    _listed_unread(window, traces[:3])
    page = _compare_page_in_front(window)
    reads.hold.add(traces[0])
    select_rows(window, [0, 1])
    qtbot.waitUntil(lambda: len(reads.log) >= 1, timeout=WAIT_MS)
    window.load_progress.cancelRequested.emit()  # the status bar's Cancel
    reads.release.set()
    qtbot.waitUntil(lambda: "cancelled" in page.pick_label.text(), timeout=WAIT_MS)
    assert page.compared == [] and not window.loader.is_loading()
    window.show_page(window.pages[0])
    _compare_page_in_front(window)  # shown again: not read again
    assert not window.loader.is_loading() and len(reads.log) == 1
    select_rows(window, [1, 2])
    qtbot.waitUntil(lambda: page.compared == [1, 2], timeout=WAIT_MS)


def test_six_selected_runs_compare_four_and_say_so(window, qtbot, traces):
    assert window.open_trace_files(traces) == 6
    page = _compare_page_in_front(window)
    select_rows(window, range(6))
    qtbot.waitUntil(lambda: page.compared == list(range(MAX_COMPARED)), timeout=WAIT_MS)
    assert MAX_COMPARED == 4 and len(page.workspace.rows) == 4
    assert "4 of 6 runs compared" in page.count_label.text() and page.count_label.isVisible()
    select_rows(window, [0, 1, 2, 3, 4])  # the same four compared: only what the page says changes
    assert "4 of 5 runs compared" in page.count_label.text()
    select_rows(window, [0, 1])
    qtbot.waitUntil(lambda: page.compared == [0, 1], timeout=WAIT_MS)
    assert not page.count_label.isVisible()
    assert window.compare_entries(list(range(6)))  # the button and `open --tab compare` too
    assert page.compared == [0, 1, 2, 3] and "4 of 6" in page.count_label.text()


def test_runs_that_leave_the_comparison_let_go_of_their_traces_unless_shown(window, qtbot, traces, reads):
    assert window.open_trace_files(traces[:5]) == 5  # each shown in turn: the cache keeps the last four
    runs = window.run_list
    assert runs.cached == [1, 2, 3, 4] and runs[0].trace is None
    page = _compare_page_in_front(window)
    select_rows(window, [0, 1])
    qtbot.waitUntil(lambda: page.compared == [0, 1], timeout=WAIT_MS)
    assert [path for path, _ in reads.log] == [traces[0]]  # read off the GUI thread
    select_rows(window, [2, 3])
    assert page.compared == [2, 3]  # in memory: compared at once
    assert runs[0].trace is None  # left the comparison, neither shown nor cached: let go
    assert all(runs[k].trace is not None for k in (1, 2, 3, 4))  # cached
    assert window.show_entry(0)  # now shown: the cache lets go of 1
    assert runs[1].trace is None
    page = _compare_page_in_front(window)
    select_rows(window, [0, 1])
    qtbot.waitUntil(lambda: page.compared == [0, 1], timeout=WAIT_MS)
    select_rows(window, [2, 3])
    assert runs[0].trace is not None and runs[1].trace is None  # shown: kept; the other let go


def test_the_runs_compared_keep_their_traces_past_the_cache(traces):
    """Qt-free: `Runs.mark_compared` keeps what is compared; showing more runs than the cache holds
    lets go of the others only."""
    runs = Runs(trace_cache=1)
    runs.extend([entry_for_path(p) for p in traces])
    for e in runs:
        e.trace = object()  # type: ignore[assignment]
    runs.mark_compared([0, 1])
    runs.mark_shown(0)
    runs.mark_shown(2)
    runs.mark_shown(3)  # 2 leaves the cache of one
    assert [runs[k].trace is not None for k in range(4)] == [True, True, False, True]
    runs.mark_compared([4, 5])
    assert [runs[k].trace is not None for k in range(6)] == [False, False, False, True, True, True]


def test_entries_loader_reads_each_entry_whole_in_order_with_progress(traces):
    paths, load = trace_loader.entries_loader([[traces[2]], [traces[0]]])
    assert [str(p) for p in paths] == [traces[2], traces[0]]
    heard: list[float] = []
    read = load(paths, lambda _phase, fraction: heard.append(fraction) or True)
    assert [t.path for t in read] == [traces[2], traces[0]]
    assert heard and heard == sorted(heard) and 0.5 <= heard[-1] <= 1.0
    with pytest.raises(LoadCancelled):
        load(paths, lambda _phase, _fraction: False)
