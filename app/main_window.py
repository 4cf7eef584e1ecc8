"""The workbench window: run controls and the runs list on the left, the pages (centre tabs) in
the middle, the side panels on the right. It only composes them:

- `RunControls` says what to run; `RunLifecycle` (`app/run_lifecycle.py`) runs it, lists and shows
  its trace, and starts what follows it (the first run's forked twin, a missing baseline);
- `Runs` (`app/runs.py`, Qt-free) holds the runs and opened traces; `RunsView` lists them;
- what is shown is a Qt-free model, `Shown` (`app/shown.py`), that the pages (`app/pages/`, in
  `PAGES`' order) and the side panels (`app/side_panels.py`) follow; the window changes it;
- what the user opens or chooses and every finished run is read by the one `TraceLoader`
  (`app/trace_loader.py`) off the GUI thread, with progress and Cancel; menus: `app/window_menus.py`;
  the columns' widths, which follow the text size: `app/window_layout.py`; the status bar:
  `app/status_line.py`; the file dialogs: `app/file_dialogs.py`.

Failures are reported in a dialog and the window carries on: a trace that cannot be shown leaves
every view on the trace it showed before.
"""

from __future__ import annotations

import os
import traceback
from functools import partial
from typing import Any, TypeVar

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QGroupBox,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from branchscope.app import trace_loader
from branchscope.app.cuda_check import CudaCheck
from branchscope.app.failures import Failures
from branchscope.app.file_dialogs import FileDialogs
from branchscope.app.mode_check import ModeCheck
from branchscope.app.pages import PAGES
from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.page import Page
from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.app.run_controller import RunController, RunSpec
from branchscope.app.run_controls import RunControls
from branchscope.app.run_lifecycle import RunLifecycle
from branchscope.app.runs import Entry, Runs
from branchscope.app.runs_table import RunsTableModel, RunsView
from branchscope.app.shown import Shown
from branchscope.app.side_panels import SidePanels
from branchscope.app.status_line import StatusBar
from branchscope.app.trace_loader import Opened, TraceLoader, connect_progress
from branchscope.app.window_layout import WindowLayout
from branchscope.app.window_menus import WindowMenus
from branchscope.profiling.files import read_head
from branchscope.profiling.machine import usable_cores
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.widgets.load_progress import LoadProgress

P = TypeVar("P")
MODEL_FILTER = "Models (*.py *.pt *.pth *.zip);;All files (*)"
NAVIGATION_HINT = "Wheel: zoom at cursor · drag: pan · W/S: zoom · A/D: pan · 0: all · double-click: zoom to event · Shift+drag: select · F: zoom to selection · Ctrl+F: find"


def is_model_file(path: str) -> bool:
    """A dropped model: Python source, or a TorchScript archive (a zip file, whatever its name).
    Traces are JSON (plain or gzipped), never zip, so the magic bytes settle .zip/.pt/.pth."""
    if path.endswith(".py"):
        return os.path.isfile(path)  # a folder named so is a folder to open
    return read_head(path, 4) == b"PK\x03\x04"  # only a regular file is read: a FIFO would block


class MainWindow(QMainWindow):
    """branchscope's window (see the module docstring)."""

    #: An entry was shown (its index in `run_list`).
    entryShown = Signal(int)

    def __init__(
        self,
        *,
        controller: RunController | None = None,
        settings: QSettings | None = None,
        cores: int | None = None,
        check_cuda: bool = True,
        demos: list | None = None,
        kept_runs: bool = True,
        probe_modes: bool | None = None,
    ):
        """`probe_modes`: ask the worker's Python which modes it can run (a child process that
        imports torch) once the window shows; by default as `check_cuda` says."""
        super().__init__()
        self.setWindowTitle("branchscope")
        self.setAcceptDrops(True)
        #: Messages that time out over a line saying what is true now (`app/status_line.py`).
        self.status = StatusBar()
        self.setStatusBar(self.status)
        # The CPUs this process may use, as the worker counts them (a container may allow fewer).
        self.cores = int(cores or usable_cores())
        self.settings = settings if settings is not None else QSettings("branchscope", "branchscope")
        #: The file dialogs, each opening in the folder its kind last used.
        self.dialogs = FileDialogs(self, self.settings)
        self.controller = controller if controller is not None else RunController(self)
        self.controller.setParent(self)
        self.controller.keptFolders.connect(self.statusBar().showMessage)
        #: The last dialog shown (failures, unreadable files); tests look at it.
        self.message_box: QMessageBox | None = None
        #: Errors no one caught, reported once each (`app/failures.py`).
        self.failures = Failures(self)
        from branchscope.profiling.run.model_source import list_demos

        self.demos = demos = list_demos() if demos is None else demos
        #: What the user opens and every finished run are read off the GUI thread, with a progress bar and Cancel.
        self.loader = TraceLoader(self, prepare=())

        self.controls = RunControls(demos, self.cores)
        #: After a run whose model has no sequential 1×1 run listed, run that too (the baseline).
        self.auto_baseline = True
        self.lifecycle = RunLifecycle(self)
        self.controls.runRequested.connect(self.lifecycle.start)
        self.controls.cancelRequested.connect(self.controller.cancel)
        self.controls.openModelRequested.connect(self.open_model_dialog)
        # The worker's Python (--python) is the user's environment: kept for the next window too.
        self.controls.set_values(python=str(self.settings.value("workerPython", "") or ""))
        self.controls.pythonChanged.connect(lambda path: self.settings.setValue("workerPython", path))

        #: The finished runs and opened traces; `runs` is their list on screen.
        self.run_list = Runs()
        self.runs_table = RunsTableModel(self.run_list, self)
        self.runs = RunsView(self.runs_table)
        self.runs.rowChosen.connect(self._on_entry_chosen)
        self.runs.baselineRunRequested.connect(self.lifecycle.start)
        self.runs.compareRequested.connect(lambda rows: self.page(ComparePage).compare_in_background(rows))
        #: What is shown: the pages and side panels follow it (a new baseline changes what they say).
        self.shown = Shown(self.run_list)
        self.runs_table.dataChanged.connect(lambda *_: self.shown.runs_changed())
        # A change that moves other runs' baseline is said, not done silently.
        self.runs_table.baselineMoved.connect(self.statusBar().showMessage)
        if kept_runs:  # from earlier windows (pruned first), oldest first; their traces load when chosen
            self.run_list.extend(self.controller.saved_runs())

        # The centre: the pages, one tab each, in `PAGES`' order (app/pages/__init__.py).
        self.pages: list[Page] = [kind.make(self) for kind in PAGES]
        self.tabs = QTabWidget()
        for kind, page in zip(PAGES, self.pages):
            self.tabs.addTab(page, kind.title)
        self._enable_tabs()  # the Memory tab waits for a trace with memory
        # The side panels belong to the run shown: pages without them (Compare, Sweep) get their room.
        self.tabs.currentChanged.connect(lambda index: self.side_panel.setVisible(self.pages[index].side_panels))
        # Back from the Sweep page (a sweep opened), the run controls say again which run is shown.
        self.tabs.currentChanged.connect(lambda _index: self.lifecycle.say_shown())

        # The right: the branches of the shown run (its colours), then an event's details and the
        # selected range's ops and the per-step table (app/side_panels.py).
        run_page = self.page(RunPage)
        self.side_panel = SidePanels(self.shown, run_page.workspace)
        run_page.timeline.rangeSelected.connect(self.shown.select_range)

        # The three columns, their widths following the text size (app/window_layout.py).
        self.columns = WindowLayout(self, self.controls, self._runs_box(), self.tabs, self.side_panel)
        self.setCentralWidget(self.columns.splitter)
        self.menus = WindowMenus(self)
        if self.controller.kept_notice:
            self.status.showMessage(self.controller.kept_notice)
        self.tabs.currentChanged.connect(lambda _index: self._say_what_is_true())
        self.load_progress = LoadProgress(self)
        self.statusBar().addPermanentWidget(self.load_progress)
        connect_progress(self.loader, self.load_progress)
        self.loader.cancelled.connect(lambda: self.statusBar().showMessage("opening cancelled"))

        self.cuda = CudaCheck(self)
        self.cuda.resolved.connect(self.controls.set_cuda_available)
        self.cuda.resolved.connect(self.page(SweepPage).set_cuda_available)
        self.cuda.devicesCounted.connect(self.controls.set_cuda_devices)
        self.controls.set_cuda_available(False, self.cuda.reason)
        if check_cuda:
            QTimer.singleShot(0, self.cuda.start)
        #: Which modes the worker's Python can run (fork needs TorchScript), asked before any run.
        start = check_cuda if probe_modes is None else probe_modes
        self.mode_check = ModeCheck.for_window(self, self.controls, self.page(SweepPage), start=start)
        self.resize(1600, 1000)

    def _runs_box(self) -> QWidget:
        """The runs list and its Compare button (under the run controls, app/window_layout.py)."""
        runs_box = QGroupBox("Runs and traces")
        box_lay = QVBoxLayout(runs_box)
        # the list takes the panel's width: its run column shows the runs' names (issue 22, item 7)
        margins = box_lay.contentsMargins()
        box_lay.setContentsMargins(3, margins.top(), 3, margins.bottom())
        box_lay.addWidget(self.runs)
        # Ctrl/Shift+click picks several; the list's context menu also sets the baseline.
        self.compare_button = QPushButton("Compare selected runs")
        self.compare_button.setToolTip("select two or more rows (Ctrl+click, Shift+click) to see them side by side")
        self.compare_button.setEnabled(False)
        self.compare_button.clicked.connect(self.runs.compare_selected)
        self.runs.selectionModel().selectionChanged.connect(
            lambda *_: self.compare_button.setEnabled(len(self.runs.selected_rows()) >= 2)
        )
        # The Compare tab follows the selection: two or more rows selected are compared there.
        self.runs.selectionModel().selectionChanged.connect(
            lambda *_: self.page(ComparePage).follow_selection(self.runs.selected_rows())
        )
        box_lay.addWidget(self.compare_button)
        return runs_box

    # ---- the pages --------------------------------------------------------------------------
    def page(self, kind: type[P]) -> P:
        """The page of type `kind` (pages find each other so, never by position)."""
        for page in self.pages:
            if isinstance(page, kind):
                return page
        raise LookupError(f"no {kind.__name__} among the pages (app/pages/__init__.PAGES)")

    def show_page(self, page: Any) -> None:
        """Bring `page`'s tab to the front."""
        self.tabs.setCurrentWidget(page)

    def _say_what_is_true(self) -> None:
        """The status bar's steady line: the timeline's keys while the Run page shows a trace."""
        run_page = self.page(RunPage)
        showing = self.tabs.currentWidget() is run_page and self.shown.trace is not None
        self.status.set_steady(NAVIGATION_HINT if showing else "")

    def _enable_tabs(self) -> None:
        for k, page in enumerate(self.pages):
            self.tabs.setTabEnabled(k, page.tab_enabled())

    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` on the Compare page (`ComparePage.compare_entries`)."""
        return self.page(ComparePage).compare_entries(ks)

    # ---- opening files ----------------------------------------------------------------------
    def open_trace_files(self, paths: list[str]) -> int:
        """Open each trace file, run folder, snapshot or sweep folder, and show the last; returns how
        many opened. Waits for them (the command line and tests): what the user opens from the
        window goes through `open_in_background` instead, with a progress bar and Cancel."""
        rest, sweeps = self._open_sweeps(paths)
        if not rest:
            return sweeps
        return self.loader.load_now(rest, load=trace_loader.read_sources, done=self._list_opened, failed=self._open_failed) + sweeps

    def open_in_background(self, paths: list[str]) -> None:
        """Open `paths` as `open_trace_files` does, reading them off the GUI thread (`TraceLoader`):
        the window stays responsive, a progress bar with Cancel shows a long read."""
        rest, _ = self._open_sweeps(paths)
        if rest:
            self.loader.start(rest, load=trace_loader.read_sources, done=self._list_opened, failed=self._open_failed)

    def _open_sweeps(self, paths: list[str]) -> tuple[list[str], int]:
        """The Sweep page opens the sweep folders among `paths`; the run controls then say which."""
        sweeps = self.page(SweepPage)
        rest, opened = sweeps.open_sweeps(paths)
        if opened:
            self.lifecycle.opened_sweep = str(sweeps.folder)
            self.lifecycle.say_shown(settings=True)
        return rest, opened

    def _open_failed(self, message: str) -> int:
        self.show_error("Cannot open trace", message)
        self.runs.select_row(self.run_list.current)  # the list shows what the views show
        return 0

    def _list_opened(self, opened: Opened) -> int:
        """List what `trace_loader.read_sources` read (ranks of one job already joined: select
        several entries to compare them) and show the last one; say what could not be read."""
        for message in opened.errors:
            self.show_error("Cannot open trace", message)
        for path in opened.files:
            self.menus.remember(path)
        count = sum(members for entry, members in opened.entries if self.add_entry(entry))
        run_page = self.page(RunPage)
        if count and self.tabs.currentWidget() is run_page:
            run_page.timeline.setFocus()  # its keys (W/A/S/D, Ctrl+F) work at once, without a click first
        return count

    # ---- showing an entry -------------------------------------------------------------------
    def add_entry(self, entry: Entry) -> bool:
        """List an entry and show it; if it cannot be shown it is not listed (False)."""
        k = self.run_list.append(entry)
        self.runs.select_row(k)
        if not self.show_entry(k):
            with self.runs.quietly():
                self.run_list.remove(k)
            self.runs.select_row(self.run_list.current)
            return False
        return True

    def _on_entry_chosen(self, k: int) -> None:
        """The user chose entry k in the list: shown at once when its trace is in memory, else read
        by the loader off the GUI thread (progress, Cancel) and shown once read."""
        if 0 <= k < len(self.run_list) and k != self.run_list.current:
            entry = self.run_list[k]
            if entry.trace is not None:
                self._show_read(entry, entry.trace)
            else:
                show = partial(self._show_read, entry)
                back = lambda: self.runs.select_row(self.run_list.current)  # noqa: E731 - the list shows what is shown
                self.loader.start(entry.paths, load=trace_loader.read_run, done=show, failed=self._open_failed, cancelled=back)

    def _show_read(self, entry: Entry, trace: Trace) -> None:
        """Show a chosen entry with its trace, if it is still listed."""
        k = self.run_list.index_of(entry)
        if k >= 0:
            entry.trace = trace
            if not self.show_entry(k):
                self.runs.select_row(self.run_list.current)  # the list shows what the views show

    def show_entry(self, k: int) -> bool:
        """Show entry k in every view (they follow `shown`), the page that fits it in front. False,
        with a dialog, if it cannot be shown: then every view still shows what it showed before."""
        e = self.run_list[k]
        try:
            trace, reloaded = self.run_list.load(k, trace_loader.read_run)
        except (TraceFormatError, OSError) as exc:
            self.show_error("Cannot open trace", str(exc))
            return False
        try:
            try:
                self.shown.show(trace, e)  # all or nothing
            finally:
                self._enable_tabs()
        except Exception as exc:
            if reloaded:
                e.trace = None  # not shown, so not among the traces kept in memory
            message = f"{e.trace_path}: cannot be shown: {type(exc).__name__}: {exc}"
            self.show_error("Cannot show trace", message, traceback.format_exc())
            return False
        self.show_page(next((p for p in self.pages if p.fits(trace)), self.pages[0]))
        self.run_list.mark_shown(k)
        self.runs.select_row(k)
        self.setWindowTitle(f"branchscope — {e.title}")
        self.lifecycle.say_shown(settings=True)
        self.shown.entry_is_shown()
        self._say_what_is_true()
        self.entryShown.emit(k)
        return True

    # ---- runs -------------------------------------------------------------------------------
    def current_spec(self) -> RunSpec:
        return self.controls.spec()

    def set_controls(self, **values: Any) -> None:
        """Set the controls without starting a run (the command line uses this): see `RunControls.set_values`."""
        self.controls.set_values(**values)

    def start_run(self) -> bool:
        """Start a run with the controls' settings; False (and a dialog) if it cannot start."""
        return self.lifecycle.start(self.controls.spec())

    def start_first_run(self) -> bool:
        """The window's first run (`branchscope` without a command): what the controls say, followed
        once by its forked twin (`RunLifecycle.start_first_run`)."""
        return self.lifecycle.start_first_run(self.controls.spec())

    def open_model_dialog(self) -> None:
        path = self.dialogs.open_file("model", "Open model file", MODEL_FILTER)
        if path:
            self.add_model_file(path)

    def add_model_file(self, path: str, input_shapes: tuple[str, ...] | None = None, run: bool = True) -> bool:
        """Add a .py model (or a TorchScript archive, asking for its input shapes) and run it."""
        if input_shapes is None:
            input_shapes = ()
            if not path.endswith(".py"):
                question = "Input shapes, e.g. 8x64x35x35 (several: separated by spaces):"
                text, ok = QInputDialog.getText(self, "TorchScript inputs", question)
                if not ok or not text.strip():
                    return False
                input_shapes = tuple(text.split())
        self.controls.add_model_file(path, tuple(input_shapes))
        if run:
            self.start_run()
        return True

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt API)
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        models = [p for p in paths if is_model_file(p)]
        traces = [p for p in paths if p not in models]
        for m in models:
            self.add_model_file(m)
        if traces:
            self.open_in_background(traces)
        event.acceptProposedAction()

    # ---- errors ---------------------------------------------------------------------------
    def show_error(self, title: str, message: str, details: str = "") -> QMessageBox:
        """A non-blocking dialog; the model's traceback goes in the expandable details."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Critical)
        box.setWindowTitle(title)
        box.setText(message)
        if details:
            box.setInformativeText("Show Details… holds the traceback.")
            box.setDetailedText(details)
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.finished.connect(self._take_focus_back)
        box.open()
        self.message_box = box
        return box

    def _take_focus_back(self, _result: int = 0) -> None:
        """A dialog closed: the window is active again (its focus back where it was), so its
        shortcuts (Ctrl+O) work at once. Without a window manager (Xvfb) nothing gave the activation
        back, and the first key after the dialog went nowhere."""
        if self.isVisible():
            self.activateWindow()

    def restore_application_look(self) -> None:
        """Put the application's font and palette back as they were before this window changed them."""
        QApplication.setFont(self.menus.base_font)
        QApplication.setPalette(self.menus.base_palette)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.loader.cancel()
        self.loader.wait(2)
        self.controller.shutdown()
        self.page(SweepPage).shutdown()
        self.page(ComparePage).shutdown()  # a paired measurement going
        self.mode_check.shutdown()  # a probe of the worker's Python still asking
        super().closeEvent(event)
