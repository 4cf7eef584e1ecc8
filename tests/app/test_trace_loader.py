"""Loading traces off the GUI thread (app.trace_loader) and the load's progress widget
(widgets.load_progress): progress, Cancel, failures, and a window that keeps running meanwhile."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QTimer

from branchscope.app.trace_loader import (
    FILES_PHASE,
    INDEX_SHARE,
    TraceLoader,
    connect_progress,
    describe_paths,
)
from branchscope.profiling.trace.model import Lane, LoadCancelled, TraceFormatError, build_trace
from branchscope.widgets.load_progress import LoadProgress
from branchscope.widgets.trace_cache import derived
from tests.builders.runs import write_small_trace

GATE_TIMEOUT_S = 30  # a fake load waits on its gate at most this long (only a broken test waits)


def _tiny_trace():
    return build_trace(
        path="fake",
        start_ns=np.arange(0, 1000, 100),
        dur_ns=np.full(10, 50),
        lane=np.zeros(10, np.int32),
        name_id=np.zeros(10, np.int32),
        cat_id=np.zeros(10, np.int32),
        names=["op"],
        cats=["cpu_op"],
        lanes=[Lane(0, "cpu", 1, 1, "main", "main")],
    )


class Recorder:
    """Every signal of a loader, in order, as (name, args)."""

    def __init__(self, loader: TraceLoader):
        self.events: list[tuple[str, tuple]] = []
        for name in ("started", "progress", "loaded", "failed", "cancelled"):
            getattr(loader, name).connect(lambda *args, n=name: self.events.append((n, args)))

    def names(self) -> list[str]:
        return [n for n, _ in self.events]

    def ends(self) -> list[str]:
        return [n for n in self.names() if n in ("loaded", "failed", "cancelled")]


@pytest.fixture
def loader(qtbot):
    made: list[TraceLoader] = []

    def make(**kwargs) -> TraceLoader:
        made.append(TraceLoader(**kwargs))
        return made[-1]

    yield make
    for ld in made:
        ld.cancel()
        assert ld.wait(GATE_TIMEOUT_S)


def test_a_real_trace_loads_with_progress_that_only_grows_and_its_index_built(qtbot, loader, tmp_path):
    path = write_small_trace(tmp_path / "trace.json.gz")
    ld = loader()
    rec = Recorder(ld)
    with qtbot.waitSignal(ld.loaded, timeout=20_000) as blocker:
        ld.start([path])
    trace = blocker.args[0]
    assert len(trace) > 0
    assert rec.ends() == ["loaded"]
    assert rec.names()[0] == "started"
    progress = [args for name, args in rec.events if name == "progress"]
    phases = [phase for phase, _ in progress]
    fractions = [fraction for _, fraction in progress]
    assert {"reading", "events", "lanes"} <= set(phases)
    assert phases[-1] == "index" and fractions[-1] == 1.0
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert fractions == sorted(fractions)
    assert not ld.is_loading()
    # What the timeline shows of it was built in the worker: showing it builds nothing.
    derived(trace, "timeline", lambda: pytest.fail("the timeline's index was not built at load"))


def test_several_files_load_as_ranks_with_one_growing_progress(qtbot, loader, tmp_path):
    paths = [write_small_trace(tmp_path / f"rank{k}.json.gz") for k in range(2)]
    ld = loader()
    rec = Recorder(ld)
    with qtbot.waitSignal(ld.loaded, timeout=20_000):
        ld.start(paths)
    fractions = [args[1] for name, args in rec.events if name == "progress"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    # The files are read by the pool of forked children (`rank_pool`), which reports files done of
    # all: the first file's end at half the reading share, the second's at all of it (the bar sat
    # at 5% while the pool read the files when these counted as the reader's first phase).
    reader = [args for name, args in rec.events if name == "progress" and args[0] != "index"]
    from branchscope.profiling.trace import merge

    assert FILES_PHASE == merge.FILES_PHASE
    assert {phase for phase, _ in reader} == {"files"}, reader
    # While a file is awaited the pool says "none done yet" every 50 ms (a busy machine: several times).
    assert [f for _, f in reader if f > 0] == pytest.approx([(1 - INDEX_SHARE) / 2, 1 - INDEX_SHARE])


def _gated_load(gate: threading.Event, stopped: list):
    """A fake load: reports, waits for `gate`, reports again; records whether it was told to stop."""

    def load(paths, progress):
        assert progress("reading", 0.5)
        assert gate.wait(GATE_TIMEOUT_S)
        if not progress("parsing", 0.5):
            stopped.append(True)
            raise LoadCancelled("stopped")
        return _tiny_trace()

    return load


def test_cancel_mid_way_emits_cancelled_and_nothing_else(qtbot, loader):
    gate, stopped = threading.Event(), []
    built = []
    ld = loader(load=_gated_load(gate, stopped), prepare=[built.append])
    rec = Recorder(ld)
    said: list[str] = []
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["a.json"], done=lambda _t: said.append("done"), failed=said.append, cancelled=lambda: said.append("cancelled"))
    assert ld.is_loading()
    ld.cancel()
    gate.set()
    with qtbot.waitSignal(ld.cancelled, timeout=10_000):
        pass
    assert stopped == [True], "the worker was not stopped at its next progress call"
    assert built == [] and said == ["cancelled"]
    assert rec.names() == ["started", "progress", "cancelled"]
    assert not ld.is_loading()


def test_a_load_cancelled_after_its_last_progress_call_still_ends_cancelled(qtbot, loader):
    gate = threading.Event()

    def load(paths, progress):
        progress("reading", 0.0)
        assert gate.wait(GATE_TIMEOUT_S)
        return _tiny_trace()  # never asks again: finishes despite the cancel

    ld = loader(load=load, prepare=[])
    rec = Recorder(ld)
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["a.json"])
    ld.cancel()
    gate.set()
    with qtbot.waitSignal(ld.cancelled, timeout=10_000):
        pass
    assert ld.wait(GATE_TIMEOUT_S)
    qtbot.waitUntil(lambda: not ld.is_loading())
    assert rec.ends() == ["cancelled"]
    assert "loaded" not in rec.names()


def test_the_gui_thread_keeps_running_while_a_slow_load_works(qtbot, loader):
    ticks = [0]
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    ticks_at_end: list[int] = []

    def busy_load(paths, progress):
        # Busy the way a reader is (numpy and Python, progress now and then) until the GUI
        # thread's timer has ticked a few times: only a GUI thread left running ends this early.
        x = np.random.default_rng(0).random(10_000)
        for i in range(200_000):
            x = np.sqrt(x + 1.0)
            progress("events", i / 200_000)
            if ticks[0] >= 5:
                break
        ticks_at_end.append(ticks[0])
        return _tiny_trace()

    ld = loader(load=busy_load)
    timer.start()
    with qtbot.waitSignal(ld.loaded, timeout=60_000):
        ld.start(["slow.json"])
    timer.stop()
    assert ticks_at_end and ticks_at_end[0] >= 5


def test_a_failing_load_emits_failed_with_its_message(qtbot, loader, tmp_path):
    def load(paths, progress):
        progress("reading", 0.0)
        raise TraceFormatError("x.json: not a trace")

    ld = loader(load=load)
    rec = Recorder(ld)
    with qtbot.waitSignal(ld.failed, timeout=10_000) as blocker:
        ld.start(["x.json"])
    assert blocker.args == ["x.json: not a trace"]
    qtbot.waitUntil(lambda: not ld.is_loading())
    assert rec.ends() == ["failed"]

    bad = tmp_path / "broken.json"
    bad.write_text("{ this is not json")
    real = loader()
    with qtbot.waitSignal(real.failed, timeout=10_000) as blocker:
        real.start([bad])
    assert "broken.json" in blocker.args[0]


def test_a_view_that_cannot_prepare_the_trace_fails_the_load(qtbot, loader):
    def prepare(trace):
        raise ValueError("no colours")

    ld = loader(load=lambda paths, progress: _tiny_trace(), prepare=[prepare])
    with qtbot.waitSignal(ld.failed, timeout=10_000) as blocker:
        ld.start(["t.json"])
    assert "ValueError: no colours" in blocker.args[0] and "t.json" in blocker.args[0]


def test_starting_again_abandons_the_load_under_way(qtbot, loader):
    gate, stopped = threading.Event(), []
    ld = loader(load=_gated_load(gate, stopped), prepare=[])
    rec = Recorder(ld)
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["first.json"])
    with qtbot.waitSignal(ld.loaded, timeout=10_000) as blocker:
        ld.start(["second.json"], load=lambda paths, progress: _tiny_trace())
    gate.set()
    assert blocker.args[0].path == "fake"
    qtbot.waitUntil(lambda: stopped == [True])
    assert rec.ends() == ["loaded"]


def test_done_and_failed_are_called_in_the_gui_thread_before_the_signal(qtbot, loader):
    ld = loader(prepare=[])
    heard: list[tuple] = []
    ld.loaded.connect(lambda trace: heard.append(("loaded", trace.path)))
    ld.failed.connect(lambda message: heard.append(("failed", message)))
    gui = threading.current_thread()
    with qtbot.waitSignal(ld.loaded, timeout=10_000):
        ld.start(["a.json"], load=lambda paths, progress: _tiny_trace(),
                 done=lambda trace: heard.append(("done", trace.path, threading.current_thread() is gui)))  # fmt: skip
    with qtbot.waitSignal(ld.failed, timeout=10_000):
        ld.start(["b.json"], load=_raising(TraceFormatError("b.json: broken")), failed=lambda m: heard.append(("why", m)))
    assert heard == [("done", "fake", True), ("loaded", "fake"), ("why", "b.json: broken"), ("failed", "b.json: broken")]


def _raising(exc: Exception):
    def load(paths, progress):
        raise exc

    return load


def test_a_kept_load_is_never_abandoned_and_later_loads_wait_their_turn(qtbot, loader):
    gate, stopped = threading.Event(), []
    ld = loader(prepare=[])
    done: list[str] = []
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["run.json"], load=_gated_load(gate, stopped), done=lambda _t: done.append("run"), keep=True)
    # two opens while the run's trace is read: the second replaces the first, and waits
    ld.start(["first.json"], load=lambda paths, progress: _tiny_trace(), done=lambda _t: done.append("first"))
    ld.start(["second.json"], load=lambda paths, progress: _tiny_trace(), done=lambda _t: done.append("second"))
    assert ld.is_loading()
    gate.set()
    qtbot.waitUntil(lambda: done == ["run", "second"] and not ld.is_loading(), timeout=10_000)
    assert stopped == []
    # a kept load started while an open is under way waits for it, too
    gate2 = threading.Event()
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["open.json"], load=_gated_load(gate2, stopped), done=lambda _t: done.append("open"))
    ld.start(["run2.json"], load=lambda paths, progress: _tiny_trace(), done=lambda _t: done.append("run2"), keep=True)
    gate2.set()
    qtbot.waitUntil(lambda: done[2:] == ["open", "run2"], timeout=10_000)
    assert stopped == []


def test_load_now_reads_on_this_thread_and_leaves_a_load_under_way_alone(qtbot, loader):
    gate, stopped = threading.Event(), []
    ld = loader(prepare=[])
    with qtbot.waitSignal(ld.progress, timeout=10_000):
        ld.start(["slow.json"], load=_gated_load(gate, stopped))
    got = ld.load_now(["now.json"], load=lambda paths, progress: _tiny_trace(), done=lambda t: t.path, failed=str)
    assert got == "fake"
    why = ld.load_now(["bad.json"], load=_raising(OSError("bad.json: gone")), done=str, failed=lambda m: f"failed: {m}")
    assert why == "failed: bad.json: gone"
    with qtbot.waitSignal(ld.loaded, timeout=10_000):
        gate.set()
    assert stopped == []


def test_the_progress_widget_appears_only_for_a_load_that_takes_a_while(qtbot, loader):
    # A load that ends before the delay: the widget never shows. (A delay far longer than the load:
    # how long even a tiny load takes depends on how busy the machine is.)
    patient = LoadProgress(show_after_ms=600_000)
    qtbot.addWidget(patient)
    quick = loader(load=lambda paths, progress: _tiny_trace(), prepare=[])
    connect_progress(quick, patient)
    with qtbot.waitSignal(quick.loaded, timeout=10_000):
        quick.start(["quick.json"])
        assert patient.is_pending() and patient.isHidden()
    assert not patient.is_pending() and not patient.is_loading() and patient.isHidden()

    widget = LoadProgress(show_after_ms=50)
    qtbot.addWidget(widget)
    gate, stopped = threading.Event(), []
    ld = loader(load=_gated_load(gate, stopped), prepare=[])
    connect_progress(ld, widget)

    # One that outlasts the delay: the widget shows its phase and bar, and Cancel stops the load.
    ld.start(["big.json.gz"])
    assert widget.is_pending() and widget.isHidden()
    qtbot.waitUntil(widget.isVisible, timeout=10_000)
    qtbot.waitUntil(lambda: widget.bar.value() > 0, timeout=10_000)
    assert "Reading the file: big.json.gz" in widget.label.text()
    with qtbot.waitSignal(ld.cancelled, timeout=10_000):
        widget.cancel_button.click()
        assert "Cancelling" in widget.label.text()
        gate.set()
    assert stopped == [True]
    assert widget.isHidden() and not widget.is_loading()


def test_describe_paths_names_the_file_or_the_first_and_how_many_more(tmp_path):
    assert describe_paths([tmp_path / "a.json.gz"]) == "a.json.gz"
    assert describe_paths(["run/trace.json", "b.json", "c.json"]) == "trace.json and 2 more"
    assert describe_paths(["some/run/"]) == "run"


def test_a_finished_runs_read_cancelled_leaves_it_in_its_folder_and_says_where(window, qtbot, monkeypatch):
    gate, stopped = threading.Event(), []
    monkeypatch.setattr("branchscope.app.run_lifecycle.read_run", _gated_load(gate, stopped))
    window.auto_baseline = False
    with qtbot.waitSignal(window.loader.progress, timeout=20_000):
        window.controls.run_button.click()
    window.loader.cancel()
    gate.set()
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000) as opened:
        pass
    assert stopped == [True] and len(window.run_list) == 0
    message = window.statusBar().currentMessage()
    assert "cancelled" in message and str(opened.args[0].out) in message
    assert not window.loader.is_loading()


def test_an_entry_chosen_then_its_read_cancelled_leaves_the_list_on_what_is_shown(window, qtbot, tmp_path, monkeypatch):
    from branchscope.app.runs import TRACE_CACHE

    paths = [write_small_trace(tmp_path / f"t{k}.json.gz") for k in range(TRACE_CACHE + 1)]
    window.open_trace_files([str(p) for p in paths])  # entry 0's trace let go for the last one
    gate, stopped = threading.Event(), []
    monkeypatch.setattr("branchscope.app.trace_loader.read_run", _gated_load(gate, stopped))
    with qtbot.waitSignal(window.loader.progress, timeout=20_000):
        window.runs.rowChosen.emit(0)
    window.runs.select_row(0)  # as the click left it
    window.loader.cancel()
    gate.set()
    qtbot.waitUntil(lambda: not window.loader.is_loading(), timeout=20_000)
    assert stopped == [True] and window.run_list.current == TRACE_CACHE
    assert window.runs.currentIndex().row() == TRACE_CACHE and window.run_list.entries[0].trace is None
