"""The window's menus and what they keep between windows (its `QSettings`): File (open a trace, a
folder or a model, the recent files, a screenshot, export the trace, quit) and View (find, show everything, zoom to the selection, the text size, the
presentation size and the dark palette, for a projector or a dim room)."""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QAction, QFont, QKeySequence, QPalette
from PySide6.QtWidgets import QApplication

from branchscope.app.pages.run_page import RunPage
from branchscope.app.trace_export import TraceExport
from branchscope.widgets.theme import dark_palette, presentation_font
from branchscope.widgets.timeline import zoom_to_selection_in

MAX_RECENT = 10
#: Ctrl+plus / Ctrl+minus scale every font by this much a step, within TEXT_STEPS.
TEXT_STEP = 1.15
TEXT_STEPS = (-3, 8)
TRACE_FILTER = "Traces (*.json *.json.gz *.gz);;All files (*)"


class WindowMenus:
    """The menu bar of `window` (see the module docstring)."""

    def __init__(self, window: Any):  # the window (app/main_window.py), which imports this module
        self.window = window
        self.settings = window.settings
        #: The application's font and palette when the window opened (what "normal" goes back to).
        self.base_font = QFont(QApplication.font())
        self.base_palette = QPalette(QApplication.palette())
        self.text_steps = 0
        #: View → Presentation size: text of at least 16 px (`theme.presentation_font`).
        self.presentation = str(self.settings.value("presentationSize", "false")).lower() == "true"
        #: File → Export trace… (`app/trace_export.py`): the shown trace, written on a thread.
        self.exporter = TraceExport(window)
        self._build_file_menu()
        self._build_view_menu()
        steps = self.settings.value("textSteps", 0)
        if str(steps).lstrip("-").isdigit() and int(steps):
            self.scale_text(int(steps))
        elif self.presentation:
            self.scale_text(0)
        if str(self.settings.value("darkPalette", "false")).lower() == "true":
            self.set_dark_palette(True)

    def _action(self, menu, text: str, slot, keys=None) -> QAction:
        act = QAction(text, self.window)
        if keys is not None:
            act.setShortcut(keys)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_file_menu(self) -> None:
        w = self.window
        fm = w.menuBar().addMenu("&File")
        self._action(fm, "&Open trace…", self.open_trace_dialog, QKeySequence.StandardKey.Open)
        self._action(fm, "Open &folder…", self.open_folder_dialog, QKeySequence("Ctrl+Shift+O"))
        self._action(fm, "Open &model file…", w.open_model_dialog)
        self.recent_menu = fm.addMenu("Open &recent")
        self._rebuild_recent_menu()
        fm.addSeparator()
        self._action(fm, "Save &screenshot…", self._screenshot_dialog)
        self._action(fm, "&Export trace…", self.exporter.ask, QKeySequence("Ctrl+E"))
        fm.addSeparator()
        self._action(fm, "&Quit", w.close, QKeySequence.StandardKey.Quit)

    def _build_view_menu(self) -> None:
        run = self.window.page(RunPage)
        vm = self.window.menuBar().addMenu("&View")
        self._action(vm, "&Find events…", run.timeline.open_find, QKeySequence.StandardKey.Find)
        act = self._action(vm, "Show &everything", run.workspace.axis.reset, QKeySequence("0"))
        act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        act = self._action(vm, "&Zoom to selection", self.zoom_to_selection)
        act.setShortcuts([QKeySequence("F"), QKeySequence("Z")])  # Perfetto's F
        # Keys of the pages, not of the window: F typed in the Mode list picks fork there.
        act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.window.tabs.addAction(act)
        vm.addSeparator()
        for text, keys, steps in (
            ("&Larger text", [QKeySequence.StandardKey.ZoomIn, QKeySequence("Ctrl+=")], 1),
            ("S&maller text", [QKeySequence.StandardKey.ZoomOut], -1),
            ("&Normal text size", [QKeySequence("Ctrl+0")], 0),
        ):
            act = QAction(text, self.window)
            act.setShortcuts(keys)
            act.triggered.connect(lambda _checked=False, k=steps: self.scale_text(k))
            vm.addAction(act)
        self.presentation_action = QAction("&Presentation size", self.window, checkable=True)
        self.presentation_action.setChecked(self.presentation)
        self.presentation_action.setToolTip("text of at least 16 px, for a class or a projector (1280×720 too)")
        self.presentation_action.toggled.connect(self.set_presentation)
        vm.addAction(self.presentation_action)
        self.dark_action = QAction("&Dark palette", self.window, checkable=True)
        self.dark_action.toggled.connect(self.set_dark_palette)
        vm.addAction(self.dark_action)

    def zoom_to_selection(self) -> None:
        """View → Zoom to selection: the shown page's timeline to its selected range or event; the
        status bar says what happened (how to select, when nothing is)."""
        w = self.window
        w.statusBar().showMessage(zoom_to_selection_in(w.tabs.currentWidget()), 8000)

    # ---- text size and palette --------------------------------------------------------------
    def scale_text(self, steps: int) -> None:
        """Scale every font of the application `steps` steps up (down if negative); 0 goes back to normal."""
        lo, hi = TEXT_STEPS
        self.text_steps = 0 if steps == 0 else max(lo, min(hi, self.text_steps + steps))
        normal = self.normal_font()
        font, scale = QFont(normal), TEXT_STEP**self.text_steps
        if normal.pointSizeF() > 0:
            font.setPointSizeF(normal.pointSizeF() * scale)
        else:  # a font sized in pixels
            font.setPixelSize(max(1, round(normal.pixelSize() * scale)))
        # Every view gets a FontChange and re-lays its text out; the window's columns follow
        # (app/window_layout.py), so larger text widens the left panel instead of squeezing the runs list.
        QApplication.setFont(font)
        self.settings.setValue("textSteps", self.text_steps)

    def normal_font(self) -> QFont:
        """The font of the normal text size: the application's, at least 16 px in presentation size."""
        if not self.presentation:
            return QFont(self.base_font)
        screen = self.window.screen() or QApplication.primaryScreen()
        return presentation_font(self.base_font, screen.logicalDotsPerInchY())

    def set_presentation(self, on: bool, remember: bool = True) -> None:
        """View → Presentation size (kept for the next window unless not `remember`, as for the
        command line's --presentation): text of at least 16 px, from the normal size (the
        Larger/Smaller steps start again from it); off goes back to normal."""
        self.presentation = bool(on)
        if remember:
            self.settings.setValue("presentationSize", self.presentation)
        self.scale_text(0)
        with QSignalBlocker(self.presentation_action):
            self.presentation_action.setChecked(self.presentation)

    def set_dark_palette(self, dark: bool) -> None:
        """The dark palette for the whole application, or back to the one it started with."""
        QApplication.setPalette(dark_palette() if dark else self.base_palette)
        self.settings.setValue("darkPalette", bool(dark))
        if self.dark_action.isChecked() != dark:
            self.dark_action.setChecked(dark)

    # ---- files ------------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value = self.settings.value("recentFiles", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def remember(self, path: str) -> None:
        """`path` was opened: first among the recent files."""
        path = os.path.abspath(path)
        files = [p for p in self.recent_files() if p != path]
        self.settings.setValue("recentFiles", [path, *files][:MAX_RECENT])
        self._rebuild_recent_menu()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.recent_files()
        for path in files:
            act = self.recent_menu.addAction(path)
            act.triggered.connect(lambda _checked=False, p=path: self.window.open_in_background([p]))
        self.recent_menu.setEnabled(bool(files))

    def open_trace_dialog(self) -> None:
        paths = self.window.dialogs.open_files("trace", "Open trace", TRACE_FILTER)
        if paths:
            self.window.open_in_background(paths)

    def open_folder_dialog(self) -> None:
        """File → Open folder…: a run folder, a job's folder of rank traces or a sweep folder, opened
        by the window's loader as `branchscope open FOLDER` opens it (a job's ranks as one run)."""
        folder = self.window.dialogs.folder("folder", "Open folder: a run, a job's rank traces or a sweep")
        if folder:
            self.window.open_in_background([folder])

    def _screenshot_dialog(self) -> None:
        path = self.window.dialogs.save_file("screenshot", "Save screenshot", "branchscope.png", "PNG (*.png)")
        if path:
            self.window.failures.save_screenshot(path)
