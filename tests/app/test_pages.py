"""The window's pages: every page in `app.pages.PAGES` becomes a centre tab, in order; `--tab`
takes its names from there; every page follows what is shown (a trace, the entry, a time range),
finds the others by type, and a page that cannot show a trace leaves every view as it was."""

from __future__ import annotations

import argparse

import pytest
from PySide6.QtWidgets import QLabel

from branchscope.app import cmd_gui
from branchscope.app import main_window as main_window_module
from branchscope.app.pages import PAGES, PageKind, page_keys
from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.memory_page import MemoryPage
from branchscope.app.pages.page import Page
from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from tests.builders.memory import write_four_gpu_trace
from tests.builders.runs import write_small_trace


def test_every_registered_page_is_a_tab_in_the_registrys_order(window):
    assert [kind.key for kind in PAGES] == ["run", "memory", "compare", "sweep"]
    assert window.tabs.count() == len(PAGES) == len(window.pages)
    for k, kind in enumerate(PAGES):
        page = window.tabs.widget(k)
        assert window.tabs.tabText(k) == kind.title
        assert page is window.pages[k] and type(page) is kind.load()
        assert isinstance(page, Page)  # the protocol of app/pages/page.py
        assert window.page(type(page)) is page
    # what other code reads of the pages, found by type
    run = window.page(RunPage)
    assert run.timeline is run.workspace.panel("timeline")
    # the side panels stand beside the pages that want them
    assert [page.side_panels for page in window.pages] == [True, False, False, False]


def test_tab_names_on_the_command_line_come_from_the_registry():
    from branchscope.app.cli import build_parser

    assert cmd_gui.TABS == page_keys() == tuple(kind.key for kind in PAGES)
    assert len(set(cmd_gui.TABS)) == len(cmd_gui.TABS)
    parser = build_parser()
    args = parser.parse_args(["open", "t.json", "--tab", "sweep"])
    assert args.tab == "sweep"
    with pytest.raises(SystemExit):
        parser.parse_args(["open", "t.json", "--tab", "nowhere"])


@pytest.mark.parametrize("key", page_keys())
def test_open_with_tab_shows_that_page(window, qapp, tmp_path, key):
    trace = write_four_gpu_trace(tmp_path / "dp.json")  # events and memory: every tab can be chosen
    args = argparse.Namespace(tab=key)
    assert cmd_gui._show_window(qapp, window, args, [str(trace)], tmp_path / "shot.png") == 0
    kind = next(kind for kind in PAGES if kind.key == key)
    assert isinstance(window.tabs.currentWidget(), kind.load())


class NotesPage(QLabel):
    """A page as a new one is written: this class, plus one `PageKind` line in `PAGES`."""

    side_panels = True

    def __init__(self, host):
        super().__init__()
        self.host = host
        self.heard: list[tuple] = []
        #: Whether a trace brings this page to the front; a trace it cannot show.
        self.front = False
        self.broken_path = ""
        # what it shows of the shown run, it follows (app/shown.py)
        host.shown.trace_changing.connect(self.show_trace)
        host.shown.entry_changed.connect(self.entry_shown)
        host.shown.range_selected.connect(self.select_range)

    def show_trace(self, trace, entry):
        if trace.path == self.broken_path:
            raise RuntimeError("the notes page cannot show this")
        before = self.text()
        self.heard.append(("trace", trace.path))
        self.setText(entry.title)
        return lambda: self.setText(before)

    def entry_shown(self, entry):
        self.heard.append(("entry", self.host.run_list.index_of(entry)))

    def select_range(self, start_ns, end_ns):
        self.heard.append(("range", start_ns, end_ns))

    def tab_enabled(self):
        return bool(self.text())

    def fits(self, trace):
        return self.front


@pytest.fixture
def notes_window(qtbot, tmp_path, monkeypatch):
    """The window with the notes page registered first (before Run): one line added to `PAGES`."""
    from PySide6.QtCore import QSettings

    from branchscope.app.run_controller import RunController
    from tests.gui_helpers import FAKE_RUNNER

    kind = PageKind("notes", "Notes", f"{__name__}:NotesPage")
    monkeypatch.setattr(main_window_module, "PAGES", [kind, *PAGES])
    controller = RunController(command=FAKE_RUNNER, runs_dir=tmp_path / "runs")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = main_window_module.MainWindow(controller=controller, settings=settings, cores=2, check_cuda=False)
    win.auto_baseline = False
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.controller.shutdown()
    win.page(SweepPage).shutdown()


def test_a_new_page_is_one_class_and_one_registry_line(notes_window, tmp_path):
    window = notes_window
    notes = window.page(NotesPage)
    assert window.tabs.widget(0) is notes and window.tabs.tabText(0) == "Notes"
    assert [window.tabs.tabText(k) for k in range(window.tabs.count())] == ["Notes", "Run", "Memory", "Compare", "Sweep"]
    assert not window.tabs.isTabEnabled(0)  # nothing shown yet
    first = write_small_trace(tmp_path / "first.json", "fork")
    assert window.open_trace_files([str(first)]) == 1
    # it heard of the trace, then of the entry shown; its tab is enabled
    assert notes.heard == [("trace", str(first)), ("entry", 0)]
    assert notes.text() == window.run_list.entries[0].title and window.tabs.isTabEnabled(0)
    # Run fits first: pages are found by type, not position, so the Run page still comes to the front
    assert window.tabs.currentWidget() is window.page(RunPage)
    notes.front = True
    second = write_small_trace(tmp_path / "second.json", "sequential")
    assert window.open_trace_files([str(second)]) == 1
    assert window.tabs.currentWidget() is notes and window.side_panel.isVisibleTo(window)
    window.show_page(window.page(ComparePage))
    assert not window.side_panel.isVisibleTo(window)
    window.show_page(notes)
    assert window.side_panel.isVisibleTo(window)
    # a time range selected in the timeline reaches every page
    notes.heard.clear()
    start, end = window.page(RunPage).timeline.trace.span()
    window.page(RunPage).timeline.select_range(start, end)
    assert notes.heard == [("range", start, end)]
    # an event chosen on the Memory page is shown on the Run page, wherever that is in the tabs
    window.page(MemoryPage)._select_event(0)
    assert window.tabs.currentWidget() is window.page(RunPage)


def test_a_page_that_cannot_show_a_trace_leaves_every_view_as_it_was(notes_window, tmp_path):
    window = notes_window
    notes = window.page(NotesPage)
    first = write_small_trace(tmp_path / "first.json", "fork")
    assert window.open_trace_files([str(first)]) == 1
    shown = window.run_list.entries[0].trace
    window.page(RunPage).workspace.axis.set_view(1000.0, 5000.0)
    title, text = window.windowTitle(), notes.text()
    second = write_small_trace(tmp_path / "second.json", "sequential")
    notes.broken_path = str(second)
    assert window.open_trace_files([str(second)]) == 0
    assert "the notes page cannot show this" in window.message_box.text()
    assert window.run_list.current == 0 and len(window.run_list.entries) == 1 and window.windowTitle() == title
    assert notes.text() == text
    assert window.page(RunPage).timeline.trace is shown and window.side_panel.details._trace is shown  # the run page came before it
    assert (window.page(RunPage).workspace.axis.lo, window.page(RunPage).workspace.axis.hi) == (1000.0, 5000.0)


def test_a_page_after_the_one_that_failed_is_not_shown_the_trace_and_those_before_go_back(notes_window, tmp_path, monkeypatch):
    window = notes_window
    first = write_small_trace(tmp_path / "first.json", "fork")
    assert window.open_trace_files([str(first)]) == 1
    shown = window.run_list.entries[0].trace
    window.page(RunPage).workspace.axis.set_view(1000.0, 5000.0)
    notes = window.page(NotesPage)
    memory = window.page(MemoryPage)

    def broken(trace):
        raise RuntimeError("the memory page broke")

    monkeypatch.setattr(memory, "set_trace", broken)
    notes.heard.clear()
    second = write_small_trace(tmp_path / "second.json", "sequential")
    assert window.open_trace_files([str(second)]) == 0
    assert "the memory page broke" in window.message_box.text()
    # the notes page (before it) and the Run page went back; the side panels never saw it
    assert [h for h in notes.heard if h[0] == "trace"] == [("trace", str(second))]
    assert notes.text() == window.run_list.entries[0].title
    # what it heard of entries: the shown one again, as the list changed around it (listed, taken out)
    assert {h for h in notes.heard if h[0] == "entry"} == {("entry", 0)}
    assert window.page(RunPage).timeline.trace is shown and window.side_panel.details._trace is shown and window.side_panel.legend.isVisibleTo(window)
    assert (window.page(RunPage).workspace.axis.lo, window.page(RunPage).workspace.axis.hi) == (1000.0, 5000.0)
