"""The workbench window: run controls and the runs list on the left, the pages (centre tabs) in
the middle, the side panels on the right. It only composes them:

- `RunControls` (`app/run_controls.py`) says what to run; the window hands that to the
  `RunController` and its progress back to the controls, and sets them to the run or folder shown
  (`_say_shown`: they say what is shown, from disk or not, and after a failed run what still is);
  the first run (`start_first_run`) is followed once by the same model forked 2×1;
- `Runs` (`app/runs.py`, Qt-free) holds the finished runs and opened traces, the trace cache and
  the speedups; `RunsView` (`app/runs_table.py`) lists them; choosing a row shows it;
- the pages (`app/pages/`: Run, Memory, Compare, Sweep) are built from `app.pages.PAGES`, in its
  order, and hear of every entry shown (`app/pages/page.py`); the Run page's `TraceWorkspace`
  (`widgets/workspace.py`) draws the shown trace on one time axis;
- the side panels (branch legend, details, range and steps) describe the shown run beside the
  pages that want them.

Failures (a model that raises, a broken trace file, a view that cannot show a trace, a runs folder
that cannot be made) are reported in a dialog and the window carries on: a trace that cannot be
shown leaves every view on the trace it showed before.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from PySide6.QtCore import QItemSelectionModel, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QFont, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QGroupBox,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from branchscope.app.cuda_check import CudaCheck
from branchscope.app.pages import PAGES
from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.memory_page import MemoryPage
from branchscope.app.pages.page import Page
from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.app.run_controller import FinishedRun, RunController, RunSpec
from branchscope.app.run_controls import RunControls
from branchscope.app.runs import Entry, Runs, entry_for_path
from branchscope.app.runs_table import RunsTableModel, RunsView
from branchscope.app.side_panels import SidePanels
from branchscope.app.trace_loader import TraceLoader, connect_progress
from branchscope.profiling.files import read_head
from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.modes import BASELINE_MODE
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.widgets.branch_legend import BranchLegend
from branchscope.widgets.compare_view import CompareView
from branchscope.widgets.details_panel import DetailsPanel
from branchscope.widgets.load_progress import LoadProgress
from branchscope.widgets.memory_summary import MemorySummary
from branchscope.widgets.memory_table import MemoryTable
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.pool_usage import PoolUsageView
from branchscope.widgets.range_panel import RangePanel
from branchscope.widgets.theme import dark_palette
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.timeline import TimelineView
from branchscope.widgets.workspace import TraceWorkspace

P = TypeVar("P")
MAX_RECENT = 10
#: Ctrl+plus / Ctrl+minus scale every font by this much a step, within TEXT_STEPS.
TEXT_STEP = 1.15
TEXT_STEPS = (-3, 8)
TRACE_FILTER = "Traces (*.json *.json.gz *.gz);;All files (*)"
MODEL_FILTER = "Models (*.py *.pt *.pth *.zip);;All files (*)"
#: What follows the window's first run, sequential 1×1 (`MainWindow.start_first_run`): the lesson.
LESSON_FOLLOW_UP = ("fork", 2, 1)
NAVIGATION_HINT = "Wheel: zoom at cursor · drag: pan · W/S: zoom · A/D: pan · 0: all · double-click: zoom to event · Ctrl+F: find"


def is_model_file(path: str) -> bool:
    """A dropped model: Python source, or a TorchScript archive (a zip file, whatever its name).

    Traces are JSON (plain or gzipped), never zip, so the magic bytes settle .zip/.pt/.pth.
    """
    if path.endswith(".py"):
        return True
    return read_head(path, 4) == b"PK\x03\x04"  # only a regular file is read: a FIFO would block


def read_sources(
    paths: list[str], progress: Callable[[str, float], bool]
) -> tuple[list[tuple[Entry, Trace]], list[str]]:
    """Read trace files, run folders and snapshots (no Qt: `TraceLoader` runs this off the GUI
    thread): each with its entry (labelled by model, mode and threads, its medians when a run.json
    names it) and the timeline's index built; and one message per path that could not be read.
    `progress(phase, fraction)` returning False cancels (LoadCancelled)."""
    from branchscope.profiling.trace.rank_job import open_view
    from branchscope.widgets.timeline import prepare_trace

    opened, errors = [], []
    for path in paths:
        try:
            entry = entry_for_path(path)
            # every rank of a distributed run or folder of ranks; of a large job, the ranks in view
            trace = open_view(list(entry.paths), progress=progress)
            opened.append((entry, trace))
        except (TraceFormatError, OSError) as exc:
            errors.append(str(exc))
            continue
        try:
            prepare_trace(trace)  # ahead of time only: showing the trace prepares what is missing
        except Exception:  # noqa: BLE001 - the view says what went wrong when it is shown
            pass
    return opened, errors


@dataclass(frozen=True)
class _RanksRead:
    """A large job's ranks in view read again with one more rank (`MainWindow.load_rank`)."""

    entry: Entry
    trace: Trace
    rank: int


class MainWindow(QMainWindow):
    """branchscope's window (see the module docstring)."""

    #: An entry was shown (its index in `entries`).
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
    ):
        super().__init__()
        self.setWindowTitle("branchscope")
        self.setAcceptDrops(True)
        # The CPUs this process may use, as the worker counts them (a container may allow fewer).
        self.cores = int(cores or usable_cores())
        self.settings = settings if settings is not None else QSettings("branchscope", "branchscope")
        self.controller = controller if controller is not None else RunController(self)
        self.controller.setParent(self)
        self.controller.keptFolders.connect(self.statusBar().showMessage)
        #: The last dialog shown (failures, unreadable files); tests look at it.
        self.message_box: QMessageBox | None = None
        #: Unexpected errors reported through `report_exception` (one line each, no repeats).
        self.failures: list[str] = []
        #: Whether `report_exception` also writes tracebacks to stderr (not for --screenshot).
        self.echo_tracebacks = True
        self._reports = 0
        if demos is None:
            from branchscope.profiling.run.model_source import list_demos

            demos = list_demos()
        self.demos = demos

        self.controls = RunControls(demos, self.cores)
        self.controls.runRequested.connect(self._start)
        self.controls.cancelRequested.connect(self.controller.cancel)
        self.controls.openModelRequested.connect(self.open_model_dialog)
        # The worker's Python (--python) is the user's environment: kept for the next window too.
        self.controls.set_values(python=str(self.settings.value("workerPython", "") or ""))
        self.controls.pythonChanged.connect(lambda path: self.settings.setValue("workerPython", path))
        # Kept for callers from before the controls were their own widget.
        self.run_button = self.controls.run_button
        self.cancel_button = self.controls.cancel_button
        self.progress = self.controls.progress

        #: The finished runs and opened traces; `runs` is their list on screen.
        self.run_list = Runs()
        self.runs_table = RunsTableModel(self.run_list, self)
        self.runs = RunsView(self.runs_table)
        self.runs.rowChosen.connect(self._on_entry_chosen)
        self.runs.baselineRunRequested.connect(self._start)
        self.runs.compareRequested.connect(self.compare_entries)
        # A new baseline changes what the shown run's sentence says.
        self.runs_table.dataChanged.connect(self._on_runs_changed)
        # A change that moves other runs' baseline is said, not done silently.
        self.runs_table.baselineMoved.connect(self.statusBar().showMessage)
        if kept_runs:  # from earlier windows (pruned first), oldest first; their traces load when chosen
            self.run_list.extend(self.controller.saved_runs())
        #: After a run whose model has no sequential 1×1 run listed, run that too (the baseline).
        self.auto_baseline = True
        #: The window's first run (`start_first_run`) while it goes: once it succeeds, sequential
        #: 1×1 of a model with branches, the same model forked 2×1 follows (`LESSON_FOLLOW_UP`).
        self._first_run: RunSpec | None = None
        #: The lesson's pair, sequential then forked, once both ran (selected together for Compare).
        self.lesson_pair: tuple[Entry, Entry] | None = None
        #: The first run's entry while its follow-up runs.
        self._lesson_first: Entry | None = None
        #: The run going on (its spec), to name it when it fails.
        self._running: RunSpec | None = None
        #: The sweep folder last opened from disk (the Sweep page shows it until a sweep runs here).
        self._opened_sweep: str | None = None

        # The centre: the pages, one tab each, in `PAGES`' order (app/pages/__init__.py).
        self.pages: list[Page] = [kind.make(self) for kind in PAGES]
        self.tabs = QTabWidget()
        for kind, page in zip(PAGES, self.pages):
            self.tabs.addTab(page, kind.title)
        self._enable_tabs()  # the Memory tab waits for a trace with memory
        # The side panels belong to the run shown: pages without them (Compare, Sweep) get their room.
        self.tabs.currentChanged.connect(lambda index: self.side_panel.setVisible(self.pages[index].side_panels))
        # Back from the Sweep page (a sweep opened), the run controls say again which run is shown.
        self.tabs.currentChanged.connect(lambda _index: self._say_shown())

        # The right: the branches of the shown run (its colours), then an event's details and the
        # selected range's ops and the per-step table (app/side_panels.py).
        self.side_panel = SidePanels(self.workspace)
        self.timeline.rangeSelected.connect(self._on_range_selected)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self._left_panel())
        split.addWidget(self.tabs)
        split.addWidget(self.side_panel)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([380, 920, 300])
        self.setCentralWidget(split)
        #: The application's font and palette when the window opened (what "normal" goes back to).
        self._base_font = QFont(QApplication.font())
        self._base_palette = QPalette(QApplication.palette())
        self.text_steps = 0
        self._build_menus()
        self._restore_text_and_palette()
        self.statusBar().showMessage(self.controller.kept_notice or NAVIGATION_HINT)
        # What the user opens is read off the GUI thread, with a progress bar and Cancel.
        self.loader = TraceLoader(self, prepare=())
        self.load_progress = LoadProgress(self)
        self.statusBar().addPermanentWidget(self.load_progress)
        connect_progress(self.loader, self.load_progress)
        self.loader.loaded.connect(self._on_sources_read)
        self.loader.failed.connect(lambda message: self.show_error("Cannot open trace", message))
        self.loader.cancelled.connect(lambda: self.statusBar().showMessage("opening cancelled"))
        self.workspace.rankWanted.connect(self.load_rank)

        c = self.controller
        c.started.connect(self._on_run_started)
        c.phase.connect(self.controls.show_phase)
        c.progress.connect(self.controls.show_progress)
        c.finished.connect(self._on_run_finished)
        c.failed.connect(self._on_run_failed)
        c.canceled.connect(self._on_run_canceled)

        self.cuda = CudaCheck(self)
        self.cuda.resolved.connect(self._on_cuda)
        self.cuda.devicesCounted.connect(self.controls.set_cuda_devices)
        self.controls.set_cuda_available(False, self.cuda.reason)
        if check_cuda:
            QTimer.singleShot(0, self.cuda.start)
        self.resize(1600, 1000)

    def _left_panel(self) -> QWidget:
        panel = QWidget()
        panel.setMinimumWidth(300)
        panel.setMaximumWidth(520)
        lay = QVBoxLayout(panel)
        lay.setContentsMargins(8, 8, 4, 8)
        lay.addWidget(self.controls)
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
        box_lay.addWidget(self.compare_button)
        lay.addWidget(runs_box, 1)
        return panel

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

    def _enable_tabs(self) -> None:
        for k, page in enumerate(self.pages):
            self.tabs.setTabEnabled(k, page.tab_enabled())

    # What other code reads of the pages, from before they were pages.
    @property
    def workspace(self) -> TraceWorkspace:
        return self.page(RunPage).workspace

    @property
    def summary_line(self) -> QLabel:
        return self.page(RunPage).summary_line

    @property
    def memory_page(self) -> MemoryPage:
        return self.page(MemoryPage)

    @property
    def memory_summary(self) -> MemorySummary:
        return self.page(MemoryPage).memory_summary

    @property
    def memory_table(self) -> MemoryTable:
        return self.page(MemoryPage).memory_table

    @property
    def memory_analysis(self) -> Any:
        return self.page(MemoryPage).analysis

    @property
    def details(self) -> DetailsPanel:
        return self.side_panel.details

    @property
    def legend(self) -> BranchLegend:
        return self.side_panel.legend

    @property
    def ranges(self) -> RangePanel:
        return self.side_panel.ranges

    @property
    def side_tabs(self) -> QTabWidget:
        return self.side_panel.tabs

    @property
    def compare_view(self) -> CompareView:
        return self.page(ComparePage)

    @property
    def sweep_panel(self) -> SweepPage:
        return self.page(SweepPage)

    # ---- what is shown ----------------------------------------------------------------------
    @property
    def entries(self) -> list[Entry]:
        return self.run_list.entries

    @property
    def current(self) -> int:
        """The entry shown, -1 if none."""
        return self.run_list.current

    @property
    def axis(self) -> TimeAxis:
        return self.workspace.axis

    @property
    def timeline(self) -> TimelineView:
        """The (first) shown trace's timeline; likewise `pool` and `memory`."""
        return self.workspace.panel("timeline")

    @property
    def pool(self) -> PoolUsageView:
        return self.workspace.panel("pool")

    @property
    def memory(self) -> MemoryView:
        return self.workspace.panel("memory")

    def _on_cuda(self, available: bool, reason: str) -> None:
        self.controls.set_cuda_available(available, reason)
        self.sweep_panel.set_cuda_available(available, reason)

    # ---- menus, files, drag and drop --------------------------------------------------------
    def _build_menus(self) -> None:
        fm = self.menuBar().addMenu("&File")
        act = QAction("&Open trace…", self)
        act.setShortcut(QKeySequence.StandardKey.Open)
        act.triggered.connect(self.open_trace_dialog)
        fm.addAction(act)
        act = QAction("Open &model file…", self)
        act.triggered.connect(self.open_model_dialog)
        fm.addAction(act)
        self.recent_menu = fm.addMenu("Open &recent")
        self._rebuild_recent_menu()
        fm.addSeparator()
        act = QAction("Save &screenshot…", self)
        act.triggered.connect(self._screenshot_dialog)
        fm.addAction(act)
        fm.addSeparator()
        act = QAction("&Quit", self)
        act.setShortcut(QKeySequence.StandardKey.Quit)
        act.triggered.connect(self.close)
        fm.addAction(act)
        vm = self.menuBar().addMenu("&View")
        act = QAction("&Find events…", self)
        act.setShortcut(QKeySequence.StandardKey.Find)
        act.triggered.connect(self.timeline.open_find)
        vm.addAction(act)
        act = QAction("Show &everything", self)
        act.setShortcut(QKeySequence("0"))
        act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        act.triggered.connect(self.axis.reset)
        vm.addAction(act)
        vm.addSeparator()
        for text, keys, steps in (
            ("&Larger text", [QKeySequence.StandardKey.ZoomIn, QKeySequence("Ctrl+=")], 1),
            ("S&maller text", [QKeySequence.StandardKey.ZoomOut], -1),
            ("&Normal text size", [QKeySequence("Ctrl+0")], 0),
        ):
            act = QAction(text, self)
            act.setShortcuts(keys)
            act.triggered.connect(lambda _checked=False, k=steps: self.scale_text(k))
            vm.addAction(act)
        self.dark_action = QAction("&Dark palette", self, checkable=True)
        self.dark_action.toggled.connect(self.set_dark_palette)
        vm.addAction(self.dark_action)

    # ---- text size and palette (a projector, a dim room) ------------------------------------
    def scale_text(self, steps: int) -> None:
        """Scale every font of the application `steps` steps up (down if negative); 0 goes back to normal."""
        lo, hi = TEXT_STEPS
        self.text_steps = 0 if steps == 0 else max(lo, min(hi, self.text_steps + steps))
        font, scale = QFont(self._base_font), TEXT_STEP**self.text_steps
        if self._base_font.pointSizeF() > 0:
            font.setPointSizeF(self._base_font.pointSizeF() * scale)
        else:  # a font sized in pixels
            font.setPixelSize(max(1, round(self._base_font.pixelSize() * scale)))
        QApplication.setFont(font)  # every view gets a FontChange and re-lays its text out
        self.settings.setValue("textSteps", self.text_steps)

    def set_dark_palette(self, dark: bool) -> None:
        """The dark palette for the whole application, or back to the one it started with."""
        QApplication.setPalette(dark_palette() if dark else self._base_palette)
        self.settings.setValue("darkPalette", bool(dark))
        if self.dark_action.isChecked() != dark:
            self.dark_action.setChecked(dark)

    def _restore_text_and_palette(self) -> None:
        steps = self.settings.value("textSteps", 0)
        if str(steps).lstrip("-").isdigit() and int(steps):
            self.scale_text(int(steps))
        if str(self.settings.value("darkPalette", "false")).lower() == "true":
            self.set_dark_palette(True)

    def restore_application_look(self) -> None:
        """Put the application's font and palette back as they were before this window changed them."""
        QApplication.setFont(self._base_font)
        QApplication.setPalette(self._base_palette)

    def recent_files(self) -> list[str]:
        value = self.settings.value("recentFiles", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _remember(self, path: str) -> None:
        path = os.path.abspath(path)
        files = [p for p in self.recent_files() if p != path]
        self.settings.setValue("recentFiles", [path, *files][:MAX_RECENT])
        self._rebuild_recent_menu()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.recent_files()
        for path in files:
            act = self.recent_menu.addAction(path)
            act.triggered.connect(lambda _checked=False, p=path: self.open_in_background([p]))
        self.recent_menu.setEnabled(bool(files))

    def open_trace_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open trace", "", TRACE_FILTER)
        if paths:
            self.open_in_background(paths)

    def open_trace_files(self, paths: list[str]) -> int:
        """Open each trace file, run folder, snapshot or sweep folder, and show the last; returns how
        many opened. Reads on this thread (the command line and tests): what the user opens from
        the window goes through `open_in_background` instead, with a progress bar and Cancel."""
        rest, sweeps = self._open_sweeps(paths)
        opened, errors = read_sources(rest, lambda _phase, _fraction: True)
        return self._list_opened(opened, errors) + sweeps

    def open_in_background(self, paths: list[str]) -> None:
        """Open `paths` as `open_trace_files` does, reading them off the GUI thread (`TraceLoader`):
        the window stays responsive, a progress bar with Cancel shows a long read."""
        rest, _ = self._open_sweeps(paths)
        if rest:
            self.loader.start(rest, load=read_sources)

    def _open_sweeps(self, paths: list[str]) -> tuple[list[str], int]:
        """The Sweep page opens the sweep folders among `paths`; the run controls then say which."""
        rest, sweeps = self.sweep_panel.open_sweeps(paths)
        if sweeps:
            self._opened_sweep = str(self.sweep_panel.folder)
            self._say_shown(settings=True)
        return rest, sweeps

    def _on_sources_read(self, result: tuple[list[tuple[Entry, Trace]], list[str]] | _RanksRead) -> None:
        if isinstance(result, _RanksRead):
            self._show_ranks_read(result)
        else:
            self._list_opened(*result)

    def load_rank(self, rank: int) -> None:
        """Load the events of rank `rank` of the large job shown (its overview was clicked) off the
        GUI thread, the least recently wanted rank let go past `rank_job.IN_VIEW`; the job is shown
        again once they are read, the rank's lanes in sight."""
        from branchscope.profiling.trace.rank_job import job_of
        from branchscope.widgets.timeline import prepare_trace

        entry = self.run_list.current_entry
        job = job_of(entry.trace if entry is not None else None)
        if entry is None or job is None or rank not in job.ranks:
            return
        view = job.wanted(rank)

        def load(_paths: list, progress: Callable[[str, float], bool]) -> _RanksRead:
            trace = job.load(view, progress=progress)
            prepare_trace(trace)
            return _RanksRead(entry, trace, rank)

        self.statusBar().showMessage(f"loading the events of rank {rank}…")
        self.loader.start([job.path_of(rank)], load=load)

    def _show_ranks_read(self, read: _RanksRead) -> None:
        k = self.run_list.index_of(read.entry)
        if k < 0:
            return  # the entry was removed while its rank was read
        read.entry.trace = read.trace
        if self.run_list.current_entry is read.entry and self.show_entry(k):
            self.workspace.reveal_rank(read.rank)
            self.statusBar().showMessage(f"rank {read.rank}'s events loaded")

    def _list_opened(self, opened: list[tuple[Entry, Trace]], errors: list[str]) -> int:
        """List what `read_sources` read and show the last one; say what could not be read.

        Files that are ranks of one distributed job (`rank_groups`: same job, distinct ranks,
        overlapping clocks) open as one entry, ranks side by side on one clock, since comparing
        ranks is why one opens them together. Anything else stays its own entry, never merged onto
        another's clock: select several entries to compare them.
        """
        from branchscope.profiling import merge_traces
        from branchscope.profiling.trace.merge import as_ranks, rank_groups
        from branchscope.profiling.trace.snapshot import is_snapshot

        for message in errors:
            self.show_error("Cannot open trace", message)
        for entry, _ in opened:
            self._remember(str(entry.trace_path))
        count = 0
        # Allocator snapshots opened together are the ranks of one job (they carry no job to tell).
        snapshots = [k for k, (e, _) in enumerate(opened) if is_snapshot(e.trace_path)]
        traces = [k for k in range(len(opened)) if k not in snapshots]
        groups = [[traces[i] for i in g] for g in rank_groups([opened[k][1] for k in traces])]
        if snapshots:
            groups.append(snapshots)
        for group in groups:
            if len(group) > 1:
                ranked = as_ranks([opened[i][1] for i in group])
                ranks = sorted(int(t.rank or 0) for t in ranked)
                entry = Entry(
                    "ranks " + ", ".join(str(r) for r in ranks),
                    opened[group[0]][0].trace_path,
                    trace=merge_traces(ranked),
                    more_paths=tuple(opened[i][0].trace_path for i in group[1:]),
                )
            else:
                entry, trace = opened[group[0]]
                entry.trace = trace
            count += len(group) if self._add_entry(entry) else 0
        if count and self.tabs.currentWidget() is self.page(RunPage):
            self.timeline.setFocus()  # its keys (W/A/S/D, Ctrl+F) work at once, without a click first
        return count

    def open_model_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open model file", "", MODEL_FILTER)
        if path:
            self.add_model_file(path)

    def add_model_file(
        self, path: str, input_shapes: tuple[str, ...] | None = None, run: bool = True
    ) -> bool:
        """Add a .py model (or a TorchScript archive, asking for its input shapes) and run it."""
        if input_shapes is None:
            input_shapes = ()
            if not path.endswith(".py"):
                text, ok = QInputDialog.getText(
                    self,
                    "TorchScript inputs",
                    "Input shapes, e.g. 8x64x35x35 (several: separated by spaces):",
                )
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

    def _screenshot_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save screenshot", "branchscope.png", "PNG (*.png)")
        if path:
            self.save_screenshot(path)

    def save_screenshot(self, path: str | os.PathLike[str]) -> bool:
        """Draw the window into a PNG; False if it cannot be drawn (the reason in `failures`) or saved."""
        reports = self._reports
        try:
            image = self.grab()  # views report their failures through sys.excepthook
        except Exception as exc:  # a widget that is not a TimePanel raises here
            self._note_failure(f"drawing the window failed: {type(exc).__name__}: {exc}")
            return False
        return self._reports == reports and image.save(str(path), "PNG")

    # ---- errors -----------------------------------------------------------------------------
    def _note_failure(self, message: str) -> bool:
        """Remember a failure; False if it was already reported."""
        if message in self.failures:
            return False
        self.failures.append(message)
        return True

    def report_exception(self, exc_type, exc, tb) -> None:
        """`sys.excepthook` while the window runs (`app.cmd_gui` installs it).

        An error raised in a slot, or by a view while it paints (every repaint would raise it
        again), is shown in a dialog once, with its traceback in the details and on stderr.
        """
        self._reports += 1
        message = f"{exc_type.__name__}: {exc}"
        if not self._note_failure(message):
            return
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        if self.echo_tracebacks:
            sys.stderr.write(details)
        # Not from inside a paint event: the dialog is shown by the event loop.
        QTimer.singleShot(0, self, lambda: self.show_error("Something went wrong", message, details))

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
        box.open()
        self.message_box = box
        return box

    # ---- runs -------------------------------------------------------------------------------
    def current_spec(self) -> RunSpec:
        return self.controls.spec()

    def set_controls(self, **values: Any) -> None:
        """Set the controls without starting a run (the command line uses this): see `RunControls.set_values`."""
        self.controls.set_values(**values)

    def start_run(self) -> bool:
        """Start a run with the controls' settings; False (and a dialog) if it cannot start."""
        return self._start(self.controls.spec())

    def start_first_run(self) -> bool:
        """The window's first run (`branchscope` without a command): what the controls say
        (sequential 1×1 unless the command line said otherwise); if that is sequential 1×1 and it
        succeeds on a model with branches, the same model forked 2×1 follows, once, so that the
        runs list holds the lesson's pair (`lesson_pair`, both selected: one click compares them)."""
        spec = self.controls.spec()
        self._first_run = spec if (spec.mode, spec.interop, spec.intra) == (BASELINE_MODE, 1, 1) else None
        return self._start(spec)

    def _lesson_follow_up(self, result: FinishedRun) -> RunSpec | None:
        """The forked run that follows the first run, or None (not the first run, no branches)."""
        first, self._first_run = self._first_run, None
        entry = self.run_list.current_entry
        if first is None or result.spec != first or entry is None or entry.branch_count < 2:
            return None
        mode, interop, intra = LESSON_FOLLOW_UP
        return RunSpec(mode, interop, intra, first.options)

    def _start(self, spec: RunSpec) -> bool:
        try:
            # The runs folder first: if it cannot be made, the run going on is left alone.
            self.controller.runs_dir()
            self.controller.start(spec)
        except OSError as exc:
            self.controls.show_idle("failed")
            self.statusBar().showMessage(f"run not started: {exc}")
            self.show_error("Cannot start the run", str(exc))
            return False
        return True

    def _on_run_started(self, spec: RunSpec) -> None:
        self._running = spec
        self.controls.show_started(spec)
        self.statusBar().showMessage(
            f"running {spec.model_label} {spec.mode} with inter-op {spec.interop} × intra-op {spec.intra}…"
        )

    def _on_run_finished(self, result: FinishedRun) -> None:
        from branchscope.profiling.trace.rank_job import open_view

        self.controls.show_idle("done")
        spec = result.spec
        try:
            trace = open_view(list(result.paths))  # every rank of a distributed run (of a large one, those in view)
        except (TraceFormatError, OSError) as exc:
            self.show_error("The run's trace cannot be read", str(exc))
            return
        if not self._add_entry(
            Entry(spec.model_label, result.trace_path, spec=spec, run=result.run, trace=trace,
                  more_paths=tuple(result.paths[1:]))
        ):
            return
        median = result.run.unprofiled_median_ms
        self.statusBar().showMessage(
            f"{spec.model_label} {spec.mode} {spec.interop}×{spec.intra}: "
            + (f"median step {median:.2f} ms (unprofiled)" if isinstance(median, (int, float)) else "done")
            + f" — {result.out}"
        )
        self._select_lesson_pair(result)
        follow_up = self._lesson_follow_up(result)
        if follow_up is not None and not self.controller.is_running():
            self._lesson_first = self.run_list.current_entry
            self.statusBar().showMessage(
                f"running {spec.model_label} {follow_up.mode} {follow_up.interop}×{follow_up.intra} too: "
                "the same model with its branches forked, to compare with this run"
            )
            self._start(follow_up)
            return
        baseline = self.run_list.missing_baseline(self.current) if self.auto_baseline else None
        if baseline is not None and not self.controller.is_running():
            # Speedups need the model's sequential 1×1 run: run it too, once.
            self.statusBar().showMessage(f"running {spec.model_label} sequential 1×1 too: the baseline of its speedups")
            self._start(baseline)

    def _on_run_failed(self, message: str, details: str) -> None:
        self._first_run = self._lesson_first = None
        self.controls.show_idle("failed")
        self.statusBar().showMessage(f"run failed: {message}")
        # The views still show what they showed: the controls go back to it, and say what failed.
        failed = self._running
        what = f"{failed.model_label} {failed.mode} {failed.interop}×{failed.intra}" if failed is not None else ""
        self._say_shown(f" (the run of {what} failed)" if what else " (the run failed)", settings=True)
        self.show_error("The run failed", message, details)

    def _on_run_canceled(self, spec: RunSpec) -> None:
        if self._first_run is not None and spec == self._first_run:
            self._first_run = None
        self._lesson_first = None  # a follow-up cancelled: no pair to select
        if not self.controller.is_running():
            self.controls.show_idle("cancelled")
            self.statusBar().showMessage(f"cancelled {spec.model_label} {spec.mode}")

    # ---- entries ----------------------------------------------------------------------------
    def _add_entry(self, entry: Entry) -> bool:
        """List an entry and show it; if it cannot be shown it is not listed (False)."""
        k = self.run_list.append(entry)
        self.runs.select_row(k)
        if not self.show_entry(k):
            with self.runs.quietly():
                self.run_list.remove(k)
            self.runs.select_row(self.current)
            return False
        return True

    def speedup(self, k: int) -> float | None:
        """The baseline's median step ÷ entry k's (see `Runs.speedup`)."""
        return self.run_list.speedup(k)

    def _on_entry_chosen(self, k: int) -> None:
        if 0 <= k < len(self.run_list) and k != self.current and not self.show_entry(k):
            self.runs.select_row(self.current)  # the list shows what the views show

    def show_entry(self, k: int) -> bool:
        """Show entry k in every view. False, with a dialog, if it cannot be shown: then every
        view still shows what it showed before."""
        from branchscope.profiling.trace.rank_job import open_view

        e = self.run_list[k]
        try:
            trace, reloaded = self.run_list.load(k, open_view)
        except (TraceFormatError, OSError) as exc:
            self.show_error("Cannot open trace", str(exc))
            return False
        try:
            self._show_trace(trace, e)
        except Exception as exc:
            if reloaded:
                e.trace = None  # not shown, so not among the traces kept in memory
            self.show_error(
                "Cannot show trace",
                f"{e.trace_path}: cannot be shown: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )
            return False
        self.run_list.mark_shown(k)
        self.runs.select_row(k)
        self.setWindowTitle(f"branchscope — {e.title}")
        self._say_shown(settings=True)
        for page in self.pages:
            page.entry_shown(e)
        self.entryShown.emit(k)
        return True

    def _show_trace(self, trace: Trace, entry: Entry) -> None:
        """Put `trace` in every page and the side panels, all or nothing; then the page that fits it in front."""
        undo: list[Callable[[], None]] = []
        try:
            try:
                for view in [*self.pages, self.side_panel]:
                    back = view.show_trace(trace, entry)  # if it raises, that view is as it was
                    if back is not None:
                        undo.append(back)
            except Exception:
                try:
                    for back in reversed(undo):
                        back()
                except Exception:  # pragma: no cover - what was there before was shown without error
                    pass
                raise
        finally:
            self._enable_tabs()
        self.show_page(next((p for p in self.pages if p.fits(trace)), self.pages[0]))

    # ---- the run controls follow what is shown ----------------------------------------------
    def _say_shown(self, note: str = "", *, settings: bool = False) -> None:
        """The run controls say what is shown (and, with `settings`, are set to its configuration,
        asking for no run): the entry shown, or the sweep opened while the Sweep page is in front."""
        sweep = self.sweep_panel.folder
        in_front = self.tabs.currentWidget() is self.sweep_panel
        if in_front and sweep is not None and str(sweep) == self._opened_sweep and not note:
            self._say_sweep(sweep, settings=settings)
            return
        e = self.run_list.current_entry
        if e is None:
            failed = note.strip(" ()")
            self.controls.follow(f"nothing shown yet: {failed}" if failed else "")
            return
        k = self.run_list.index_of(e)
        self.controls.follow(
            e.shown_text(k + 1) + note, from_disk=e.from_disk or e.spec is None, model=e.picker_item,
            mode=e.mode, threads=e.threads, steps=e.steps, nproc=e.nproc, apply=settings,
        )  # fmt: skip

    def _say_sweep(self, folder: os.PathLike[str] | str, *, settings: bool) -> None:
        from pathlib import Path

        from branchscope.profiling.trace.sources import read_sweep

        folder = Path(folder)
        try:
            sweep = read_sweep(folder)
        except (TraceFormatError, OSError):
            sweep = None
        label = sweep.model_label if sweep is not None else None
        where = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
        model = ("demo", sweep.demo) if sweep is not None and sweep.demo else None
        self.controls.follow(
            f"opened from disk: {where} — a sweep of {label or 'a model it does not name'}",
            from_disk=True,
            model=model,
            apply=settings,
        )

    def _select_lesson_pair(self, result: FinishedRun) -> None:
        """The follow-up of the first run finished: select it with the first (one click on "Compare
        selected runs" puts them side by side) and say so."""
        first = self._lesson_first
        if first is None or result.spec.mode != LESSON_FOLLOW_UP[0]:
            return
        self._lesson_first = None
        second = self.run_list.current_entry
        k = self.run_list.index_of(first)
        if second is None or k < 0:
            return
        self.lesson_pair = (first, second)
        with self.runs.quietly():
            model = self.runs.model()
            flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
            self.runs.selectionModel().select(model.index(k, 0), flags)
        self.statusBar().showMessage(
            f"{first.title} and {second.title}: both selected — Compare selected runs shows them side by side"
        )

    def _on_runs_changed(self, *_args: Any) -> None:
        shown = self.run_list.current_entry
        if shown is not None:
            for page in self.pages:
                page.entry_shown(shown)

    def step_labels(self) -> list[str]:
        """The profiled steps of the trace shown, as their labels say ("step 1", …)."""
        from branchscope.profiling.trace.ranges import step_table

        trace = self.timeline.trace
        return [] if trace is None else list(dict.fromkeys(r.label for r in step_table(trace)))

    def zoom_to_step(self, n: int) -> bool:
        """Show profiled step `n` (labelled "step n"; of several ranks, the first) alone on the time
        axis; False when the trace shown has none."""
        from branchscope.profiling.trace.ranges import step_table
        from branchscope.profiling.trace.run_info import step_label

        trace = self.timeline.trace
        rows = [] if trace is None else [r for r in step_table(trace) if r.label == step_label(n)]
        if not rows:
            return False
        first = min(rows, key=lambda r: r.start_ns)
        self.timeline.set_time_range(first.start_ns, first.start_ns + first.dur_ns)
        return True

    def _on_range_selected(self, start_ns: int, end_ns: int) -> None:
        for view in [self.side_panel, *self.pages]:
            view.select_range(start_ns, end_ns)

    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` on the Compare page (`ComparePage.compare_entries`)."""
        return self.compare_view.compare_entries(ks)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.loader.cancel()
        self.loader.wait(2)
        self.controller.shutdown()
        self.sweep_panel.shutdown()
        self.page(ComparePage).shutdown()  # a paired measurement going
        super().closeEvent(event)
