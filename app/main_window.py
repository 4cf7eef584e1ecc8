"""The workbench window: controls and runs on the left, the three views on one time axis in the
centre, the details panel on the right.

Controls drive the `RunController`: releasing a thread slider, choosing another mode or demo, or
pressing Run starts a fresh worker with the current settings (cancelling one in progress). Each
finished run, and each opened trace file, becomes an entry of the runs list; selecting an entry
shows it. Failures (a model that raises, a broken trace file, a view that cannot show a trace,
a runs folder that cannot be made) are reported in a dialog and the window carries on: a trace that
cannot be shown leaves every view on the trace it showed before.
"""

from __future__ import annotations

import os
import stat
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from branchscope.app.cuda_check import CudaCheck
from branchscope.app.run_controller import FinishedRun, RunController, RunSpec
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.widgets.details_panel import DetailsPanel
from branchscope.widgets.machine import usable_cores
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.pool_usage import PoolUsageView
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.timeline import TimelineView

MODES = [("sequential", "sequential"), ("fork", "fork (inter-op pool)"), ("streams", "multi-stream (CUDA)")]
MAX_RECENT = 10
#: Traces kept in memory; older entries are read again from disk when selected.
TRACE_CACHE = 4
TRACE_FILTER = "Traces (*.json *.json.gz *.gz);;All files (*)"
MODEL_FILTER = "Models (*.py *.pt *.pth *.zip);;All files (*)"


@dataclass
class Entry:
    """A row of the runs list: a finished run, or a trace file that was opened."""

    label: str
    trace_path: Path
    spec: RunSpec | None = None
    run: dict[str, Any] | None = None
    trace: Trace | None = None
    #: Further rank files merged with `trace_path` into one trace.
    more_paths: tuple[Path, ...] = ()

    @property
    def median_ms(self) -> float | None:
        m = (self.run or {}).get("median_ms")
        return float(m) if isinstance(m, (int, float)) else None


def is_model_file(path: str) -> bool:
    """A dropped model: Python source, or a TorchScript archive (a zip file, whatever its name).

    Traces are JSON (plain or gzipped), never zip, so the magic bytes settle .zip/.pt/.pth.
    """
    if path.endswith(".py"):
        return True
    try:
        # Only a regular file is opened: opening a FIFO for reading blocks until a writer comes.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except (OSError, ValueError):
        return False


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
    ):
        super().__init__()
        self.setWindowTitle("branchscope")
        self.setAcceptDrops(True)
        # The CPUs this process may use, as the worker counts them (a container may allow fewer).
        self.cores = int(cores or usable_cores())
        self.settings = settings if settings is not None else QSettings("branchscope", "branchscope")
        self.controller = controller if controller is not None else RunController(self)
        self.controller.setParent(self)
        self.entries: list[Entry] = []
        self.current: int = -1
        #: The last dialog shown (failures, unreadable files); tests look at it.
        self.message_box: QMessageBox | None = None
        #: Unexpected errors reported through `report_exception` (one line each, no repeats).
        self.failures: list[str] = []
        #: Whether `report_exception` also writes tracebacks to stderr (not for --screenshot).
        self.echo_tracebacks = True
        self._reports = 0
        #: Entry indices, least recently shown first (the trace cache evicts from the front).
        self._shown_order: list[int] = []
        self.model_files: list[tuple[str, tuple[str, ...]]] = []
        if demos is None:
            from branchscope.profiling.run.model_source import list_demos

            demos = list_demos()
        self.demos = demos

        self.axis = TimeAxis(self)
        self.timeline = TimelineView(axis=self.axis)
        self.pool = PoolUsageView(axis=self.axis)
        self.memory = MemoryView(axis=self.axis)
        self.details = DetailsPanel()
        self.timeline.eventSelected.connect(self._on_event_selected)

        centre = QSplitter(Qt.Orientation.Vertical)
        centre.setChildrenCollapsible(False)
        centre.addWidget(self.timeline)
        centre.addWidget(self.pool)
        centre.addWidget(self.memory)
        centre.setStretchFactor(0, 6)
        centre.setStretchFactor(1, 2)
        centre.setStretchFactor(2, 1)
        centre.setSizes([560, 230, 150])
        self.centre = centre

        left = self._build_controls()
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(centre)
        split.addWidget(self.details)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([350, 970, 280])
        self.setCentralWidget(split)
        self._build_menus()
        self.statusBar().showMessage(
            "Wheel: zoom at cursor · drag: pan · W/S: zoom · A/D: pan · 0: all · double-click: zoom to event · Ctrl+F: find"
        )

        c = self.controller
        c.started.connect(self._on_run_started)
        c.progress.connect(self._on_run_progress)
        c.finished.connect(self._on_run_finished)
        c.failed.connect(self._on_run_failed)
        c.canceled.connect(self._on_run_canceled)

        self.cuda = CudaCheck(self)
        self.cuda.resolved.connect(self._on_cuda)
        self._set_streams_enabled(False, self.cuda.reason)
        if check_cuda:
            QTimer.singleShot(0, self.cuda.start)
        self.resize(1600, 1000)

    # ---- controls ---------------------------------------------------------------------------
    def _build_controls(self) -> QWidget:
        panel = QWidget()
        panel.setMinimumWidth(300)
        panel.setMaximumWidth(420)
        lay = QVBoxLayout(panel)
        lay.setContentsMargins(8, 8, 4, 8)

        model_box = QGroupBox("Model")
        ml = QVBoxLayout(model_box)
        self.model_combo = QComboBox()
        for d in self.demos:
            self.model_combo.addItem(f"demo: {d.name}", ("demo", d.name))
            self.model_combo.setItemData(
                self.model_combo.count() - 1, d.description, Qt.ItemDataRole.ToolTipRole
            )
        default = next((k for k, d in enumerate(self.demos) if d.name == "inception"), 0)
        self.model_combo.setCurrentIndex(default)
        self.model_combo.activated.connect(self._on_model_activated)
        self.model_combo.currentIndexChanged.connect(self._update_description)
        self.description = QLabel()
        self.description.setWordWrap(True)
        self.description.setStyleSheet("color: #4a5560;")
        open_model = QPushButton("Open model file…")
        open_model.clicked.connect(self.open_model_dialog)
        ml.addWidget(self.model_combo)
        ml.addWidget(self.description)
        ml.addWidget(open_model)
        lay.addWidget(model_box)

        run_box = QGroupBox("Run")
        form = QFormLayout(run_box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.mode_combo = QComboBox()
        for key, title in MODES:
            self.mode_combo.addItem(title, key)
        self.mode_combo.activated.connect(lambda _i: self.start_run())
        form.addRow("Mode", self.mode_combo)
        physical = psutil.cpu_count(logical=False) or self.cores
        self.interop_slider, self.interop_label = self._slider(self.cores)
        self.intra_slider, self.intra_label = self._slider(min(physical, self.cores))
        form.addRow("Inter-op", self._slider_row(self.interop_slider, self.interop_label))
        form.addRow("Intra-op", self._slider_row(self.intra_slider, self.intra_label))
        self.threads_hint = QLabel()
        self.threads_hint.setWordWrap(True)
        form.addRow("", self.threads_hint)
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 500)
        self.steps_spin.setValue(5)
        self.steps_spin.setToolTip("profiled steps (after warm-up)")
        form.addRow("Steps", self.steps_spin)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(lambda: self.start_run())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.controller.cancel)
        buttons.addWidget(self.run_button, 1)
        buttons.addWidget(self.cancel_button)
        form.addRow(buttons)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("idle")
        self.progress.setTextVisible(True)
        form.addRow(self.progress)
        lay.addWidget(run_box)

        runs_box = QGroupBox("Runs and traces")
        rl = QVBoxLayout(runs_box)
        self.runs = QTreeWidget()
        self.runs.setRootIsDecorated(False)
        self.runs.setUniformRowHeights(True)
        self.runs.setHeaderLabels(["#", "run", "threads", "median", "speedup"])
        self.runs.headerItem().setToolTip(2, "inter-op × intra-op threads")
        self.runs.headerItem().setToolTip(3, "median profiled step")
        self.runs.headerItem().setToolTip(4, "median step of the model's first sequential run ÷ this run's")
        header = self.runs.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.runs.setToolTip("speedup: median step of the model's first sequential run ÷ this run's")
        self.runs.currentItemChanged.connect(self._on_entry_chosen)
        rl.addWidget(self.runs)
        lay.addWidget(runs_box, 1)

        self._update_description()
        self._update_thread_labels()
        return panel

    def _slider(self, value: int) -> tuple[QSlider, QLabel]:
        s = QSlider(Qt.Orientation.Horizontal)
        s.setRange(1, 2 * self.cores)
        s.setValue(max(1, min(value, 2 * self.cores)))
        s.setPageStep(1)
        s.setTickPosition(QSlider.TickPosition.TicksBelow)
        s.setTickInterval(1)
        label = QLabel()
        label.setMinimumWidth(24)
        s.valueChanged.connect(self._update_thread_labels)
        s.sliderReleased.connect(self.start_run)
        return s, label

    @staticmethod
    def _slider_row(slider: QSlider, label: QLabel) -> QWidget:
        w = QWidget()
        h = QHBoxLayout(w)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(slider, 1)
        h.addWidget(label)
        return w

    def _update_thread_labels(self) -> None:
        a, b = self.interop_slider.value(), self.intra_slider.value()
        self.interop_label.setText(str(a))
        self.intra_label.setText(str(b))
        self.interop_slider.setToolTip(f"inter-op threads (torch.set_num_interop_threads): {a}")
        self.intra_slider.setToolTip(f"intra-op threads (torch.set_num_threads): {b}")
        over = a * b > self.cores
        self.threads_hint.setText(
            f"{a} × {b} = {a * b} threads on {self.cores} cores"
            + (" — oversubscribed when forked" if over else "")
        )
        self.threads_hint.setStyleSheet("color: #c0392b;" if over else "color: #5b6570;")

    def _update_description(self) -> None:
        data = self.model_combo.currentData()
        text = ""
        if data and data[0] == "demo":
            for d in self.demos:
                if d.name == data[1]:
                    text = d.description
        elif data:
            text = f"Model file {data[1]}" + (
                f", inputs {' '.join(data[2])}" if len(data) > 2 and data[2] else ""
            )
        self.description.setText(text)

    def _set_streams_enabled(self, enabled: bool, reason: str) -> None:
        model = self.mode_combo.model()
        if isinstance(model, QStandardItemModel):
            item = model.item(2)
            item.setEnabled(enabled)
            item.setToolTip("one CUDA stream per branch" if enabled else reason)
        self.mode_combo.setToolTip("" if enabled else f"multi-stream: {reason}")

    def _on_cuda(self, available: bool, reason: str) -> None:
        self._set_streams_enabled(available, reason)

    def _on_model_activated(self, _index: int) -> None:
        self._update_description()
        self.start_run()

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
            act.triggered.connect(lambda _checked=False, p=path: self.open_trace_files([p]))
        self.recent_menu.setEnabled(bool(files))

    def open_trace_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open trace", "", TRACE_FILTER)
        if paths:
            self.open_trace_files(paths)

    def open_trace_files(self, paths: list[str]) -> int:
        """Open each file as an entry and show the last one; returns how many opened.

        Files that are different ranks of one distributed job open as one entry, ranks side by
        side on one clock, since comparing ranks is why one opens them together.
        """
        from branchscope.profiling import load_trace, merge_traces

        loaded: list[tuple[str, object]] = []
        for path in paths:
            try:
                self.setCursor(Qt.CursorShape.WaitCursor)
                loaded.append((str(path), load_trace(path)))
            except (TraceFormatError, OSError) as exc:
                self.show_error("Cannot open trace", str(exc))
                continue
            finally:
                self.unsetCursor()
        for path, _ in loaded:
            self._remember(path)
        ranks = [t.rank for _, t in loaded]
        if len(loaded) > 1 and None not in ranks and len(set(ranks)) == len(ranks):
            merged = merge_traces([t for _, t in loaded])
            label = "ranks " + ", ".join(str(r) for r in sorted(ranks))
            more = tuple(Path(p) for p, _ in loaded[1:])
            shown = self._add_entry(Entry(label, Path(loaded[0][0]), trace=merged, more_paths=more))
            return len(loaded) if shown else 0
        return sum(self._add_entry(Entry(os.path.basename(path), Path(path), trace=trace)) for path, trace in loaded)

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
        self.model_combo.addItem(f"file: {os.path.basename(path)}", ("file", path, tuple(input_shapes)))
        self.model_combo.setItemData(self.model_combo.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        self.model_combo.setCurrentIndex(self.model_combo.count() - 1)
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
            self.open_trace_files(traces)
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

    # ---- unexpected errors ------------------------------------------------------------------
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

    # ---- runs -------------------------------------------------------------------------------
    def current_spec(self) -> RunSpec:
        data = self.model_combo.currentData() or ("demo", "inception")
        mode = self.mode_combo.currentData()
        common = dict(
            mode=mode,
            interop=self.interop_slider.value(),
            intra=self.intra_slider.value(),
            steps=self.steps_spin.value(),
        )
        if data[0] == "demo":
            return RunSpec(demo=data[1], **common)
        return RunSpec(model=data[1], input_shapes=tuple(data[2]) if len(data) > 2 else (), **common)

    def set_controls(
        self,
        *,
        demo: str | None = None,
        mode: str | None = None,
        interop: int | None = None,
        intra: int | None = None,
        steps: int | None = None,
    ) -> None:
        """Set the controls without starting a run (the command line uses this)."""
        if demo is not None:
            k = self._model_index("demo", demo)
            if k < 0:
                raise ValueError(
                    f"no demo named {demo!r}; the demos are: {', '.join(d.name for d in self.demos)}"
                )
            self.model_combo.setCurrentIndex(k)
        if mode is not None:
            k = self.mode_combo.findData("streams" if mode == "multi-stream" else mode)
            if k < 0:
                raise ValueError(f"no mode {mode!r}")
            self.mode_combo.setCurrentIndex(k)
        if interop is not None:
            self.interop_slider.setMaximum(max(self.interop_slider.maximum(), interop))
            self.interop_slider.setValue(interop)
        if intra is not None:
            self.intra_slider.setMaximum(max(self.intra_slider.maximum(), intra))
            self.intra_slider.setValue(intra)
        if steps is not None:
            self.steps_spin.setValue(steps)

    def _model_index(self, kind: str, name: str) -> int:
        for k in range(self.model_combo.count()):
            data = self.model_combo.itemData(k)
            if data and data[0] == kind and data[1] == name:
                return k
        return -1

    def start_run(self) -> bool:
        """Start a run with the controls' settings; False (and a dialog) if it cannot start."""
        try:
            # The runs folder first: if it cannot be made, the run going on is left alone.
            self.controller.runs_dir()
            self.controller.start(self.current_spec())
        except OSError as exc:
            self._run_idle("failed")
            self.statusBar().showMessage(f"run not started: {exc}")
            self.show_error("Cannot start the run", str(exc))
            return False
        return True

    def _on_run_started(self, spec: RunSpec) -> None:
        self.progress.setRange(0, max(1, spec.steps))
        self.progress.setValue(0)
        self.progress.setFormat(f"{spec.model_label} · {spec.mode}: starting worker…")
        self.cancel_button.setEnabled(True)
        self.statusBar().showMessage(
            f"running {spec.model_label} {spec.mode} with inter-op {spec.interop} × intra-op {spec.intra}…"
        )

    def _on_run_progress(self, step: int, of: int) -> None:
        self.progress.setRange(0, max(1, of))
        self.progress.setValue(min(step, of))
        self.progress.setFormat(f"step {step} of {of}")

    def _run_idle(self, text: str) -> None:
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 1)
        self.progress.setValue(1 if text == "done" else 0)
        self.progress.setFormat(text)

    def _on_run_finished(self, result: FinishedRun) -> None:
        from branchscope.profiling import load_trace

        self._run_idle("done")
        spec = result.spec
        try:
            trace = load_trace(result.trace_path)
        except (TraceFormatError, OSError) as exc:
            self.show_error("The run's trace cannot be read", str(exc))
            return
        label = f"{spec.model_label}"
        if not self._add_entry(Entry(label, result.trace_path, spec=spec, run=result.run, trace=trace)):
            return
        median = result.run.get("median_ms")
        self.statusBar().showMessage(
            f"{spec.model_label} {spec.mode} {spec.interop}×{spec.intra}: "
            + (f"median step {median:.2f} ms" if isinstance(median, (int, float)) else "done")
            + f" — {result.out}"
        )

    def _on_run_failed(self, message: str, details: str) -> None:
        self._run_idle("failed")
        self.statusBar().showMessage(f"run failed: {message}")
        self.show_error("The run failed", message, details)

    def _on_run_canceled(self, spec: RunSpec) -> None:
        if not self.controller.is_running():
            self._run_idle("cancelled")
            self.statusBar().showMessage(f"cancelled {spec.model_label} {spec.mode}")

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

    # ---- entries ----------------------------------------------------------------------------
    def _add_entry(self, entry: Entry) -> bool:
        """List an entry and show it; if it cannot be shown it is not listed (False)."""
        self.entries.append(entry)
        n = len(self.entries)
        item = QTreeWidgetItem(["", "", "", "", ""])
        self.runs.addTopLevelItem(item)
        self._fill_row(n - 1)
        self._select_row(n - 1)
        if not self.show_entry(n - 1):
            blocked = self.runs.blockSignals(True)
            try:
                self.runs.takeTopLevelItem(n - 1)
            finally:
                self.runs.blockSignals(blocked)
            self.entries.pop()
            self._select_row(self.current)
            return False
        self._refresh_speedups()
        return True

    def _select_row(self, k: int) -> None:
        """Make row k current without showing it (callers show entries themselves)."""
        blocked = self.runs.blockSignals(True)
        try:
            self.runs.setCurrentItem(self.runs.topLevelItem(k) if k >= 0 else None)
        finally:
            self.runs.blockSignals(blocked)

    def _fill_row(self, k: int) -> None:
        e = self.entries[k]
        item = self.runs.topLevelItem(k)
        item.setText(0, str(k + 1))
        if e.spec is not None:
            item.setText(1, f"{e.label} · {e.spec.mode}")
            item.setText(2, f"{e.spec.interop}×{e.spec.intra}")
            item.setToolTip(1, f"{e.label}, {e.spec.mode}, {e.spec.steps} steps\n{e.trace_path}")
        else:
            item.setText(1, e.label)
            item.setText(2, "file")
            item.setToolTip(1, str(e.trace_path))
        m = e.median_ms
        item.setText(3, f"{m:.1f} ms" if m is not None else "–")
        for col in (0, 3, 4):
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def speedup(self, k: int) -> float | None:
        """Median step of the model's first sequential run ÷ this run's median step."""
        e = self.entries[k]
        if e.spec is None or e.median_ms is None or e.median_ms <= 0:
            return None
        for b in self.entries:
            if b.spec is not None and b.spec.model_key == e.spec.model_key and b.spec.mode == "sequential":
                return b.median_ms / e.median_ms if b.median_ms else None
        return None

    def _refresh_speedups(self) -> None:
        for k in range(len(self.entries)):
            s = self.speedup(k)
            self.runs.topLevelItem(k).setText(4, f"{s:.2f}×" if s is not None else "–")

    def _on_entry_chosen(self, item: QTreeWidgetItem | None, _previous) -> None:
        if item is None:
            return
        k = self.runs.indexOfTopLevelItem(item)
        if 0 <= k < len(self.entries) and k != self.current and not self.show_entry(k):
            self._select_row(self.current)  # the list shows what the views show

    def show_entry(self, k: int) -> bool:
        """Show entry k in every view. False, with a dialog, if it cannot be shown: then every
        view still shows what it showed before."""
        from branchscope.profiling import load_traces

        e = self.entries[k]
        reloaded = e.trace is None
        if reloaded:
            try:
                e.trace = load_traces([e.trace_path, *e.more_paths])
            except (TraceFormatError, OSError) as exc:
                self.show_error("Cannot open trace", str(exc))
                return False
        trace = e.trace
        try:
            self._show_trace(trace, e.run)
        except Exception as exc:
            if reloaded:
                e.trace = None  # not shown, so not among the traces kept in memory
            self.show_error(
                "Cannot show trace",
                f"{e.trace_path}: cannot be shown: {type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )
            return False
        self.current = k
        title = e.label if e.spec is None else f"{e.label} · {e.spec.mode} · {e.spec.interop}×{e.spec.intra}"
        self.setWindowTitle(f"branchscope — {title}")
        # Keep the traces of the few most recently shown entries in memory.
        self._shown_order = [i for i in self._shown_order if i != k] + [k]
        for i in self._shown_order[:-TRACE_CACHE]:
            self.entries[i].trace = None
        self._shown_order = self._shown_order[-TRACE_CACHE:]
        self.entryShown.emit(k)
        return True

    def _show_trace(self, trace: Trace, run: dict[str, Any] | None) -> None:
        """Put `trace` in every view, all or nothing."""
        # What can fail is built first, with nothing on screen changed yet ...
        self.timeline.prepare(trace)
        self.pool.prepare(trace)
        before = self.timeline.trace
        before_run = self.entries[self.current].run if 0 <= self.current < len(self.entries) else None
        before_view = (self.axis.lo, self.axis.hi)
        before_sizes = self.centre.sizes()
        try:
            self.timeline.set_trace(trace)
            self.pool.set_trace(trace)
            self.memory.set_trace(trace)
            self.details.set_trace(trace, run)
            self.centre.setSizes(self._centre_sizes())
        except Exception:
            # ... and should a view fail all the same, every view goes back to the trace before.
            try:
                for view in (self.timeline, self.pool, self.memory):
                    view.set_trace(before)
                self.details.set_trace(before, before_run)
                if before is not None:
                    self.axis.set_view(*before_view)
                self.centre.setSizes(before_sizes)
            except Exception:  # pragma: no cover - the trace before was shown without error
                pass
            raise

    def _centre_sizes(self) -> list[int]:
        """Heights of timeline, thread-pool charts and memory chart.

        A chart with nothing to show (a trace without pool threads or CPU samples, or without
        memory events) keeps only room for its one-line explanation. The timeline gets what its
        lanes need; what is left goes to the charts that have data (60:40), or to the timeline.
        """
        from branchscope.profiling.trace.analyses import cpu_sample_tracks

        total = sum(self.centre.sizes()) or 900
        trace = self.timeline.trace
        has_pool = trace is not None and bool(trace.lanes_of("cpu", "interop") or cpu_sample_tracks(trace))
        has_memory = trace is not None and bool(trace.memory)
        pool_min = max(200, total // 4) if has_pool else 90
        mem_min = max(80, min(72 * max(1, len(self.memory.series)) + 10, total // 4)) if has_memory else 60
        need = self.timeline.content_height + 40
        timeline = max(120, min(need, total - mem_min - pool_min))
        rest = total - timeline
        if has_pool and has_memory:
            pool = max(pool_min, int(rest * 0.6))
            return [timeline, pool, rest - pool]
        if has_pool:
            return [timeline, rest - mem_min, mem_min]
        if has_memory:
            return [timeline, pool_min, rest - pool_min]
        return [total - pool_min - mem_min, pool_min, mem_min]

    def _on_event_selected(self, i: int) -> None:
        if self.timeline.trace is None:
            return
        self.details.show_event(
            self.timeline.trace, i, self.timeline.branch_names, self.timeline.event_branch
        )

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.controller.shutdown()
        super().closeEvent(event)
