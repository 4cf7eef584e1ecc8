"""File → Export trace…: the shown trace (a run, a file, a job's ranks merged) written as Perfetto
protobuf or Chrome JSON (`profiling.trace.export`), on a thread of its own: a large trace takes
seconds, and the window keeps drawing meanwhile. The status bar says when it is written, or why not.

The save dialog asks before replacing a file, so a file the user chose to replace is replaced (the
CLI's --force); the export is written under a temporary name and renamed, so a failed one leaves
nothing behind.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from branchscope.app.cli_text import bytes_text
from branchscope.profiling.trace.export import SUFFIXES, export_trace
from branchscope.profiling.trace.sources import trace_label

#: The save dialog's choices, the first the default: Perfetto's UI is where users look now.
EXPORT_FILTERS = ("Perfetto trace (*.pftrace)", "Chrome JSON, gzipped (*.json.gz)", "Chrome JSON (*.json)")


def with_suffix(path: str) -> str:
    """`path`, with ".pftrace" added when it has none of the endings export writes."""
    return path if any(path.lower().endswith(s) for s in SUFFIXES) else path + ".pftrace"


class TraceExport(QObject):
    """Exports the window's shown trace on a thread; `finished(path, error)` on the GUI thread
    (error "" when written). One export at a time."""

    finished = Signal(str, str)

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.running = False
        self.finished.connect(self._report)

    def ask(self) -> None:
        """The dialog, then the export (nothing shown: a line in the status bar saying so)."""
        trace = self.window.shown.trace
        status = self.window.statusBar()
        if trace is None:
            status.showMessage("nothing to export: open a trace or a run first")
            return
        if self.running:
            status.showMessage("an export is still being written")
            return
        name = trace_label(Path(trace.path.split(" + ")[0])) + ".pftrace"  # a job's: its first rank's
        path = self.window.dialogs.save_file("export", "Export trace", name, ";;".join(EXPORT_FILTERS))
        if path:
            self.start(trace, with_suffix(path))

    def start(self, trace: Any, path: str) -> None:
        self.running = True
        self.window.statusBar().showMessage(f"exporting to {path}…")
        threading.Thread(target=self._export, args=(trace, path), daemon=True, name="branchscope-export").start()

    def _export(self, trace: Any, path: str) -> None:
        try:
            export_trace(trace, path, force=True)  # the dialog asked before replacing a file
            error = ""
        except (ValueError, OSError) as exc:  # TraceFormatError is a ValueError
            error = str(exc)
        try:
            self.finished.emit(path, error)
        except RuntimeError:  # the window closed while writing
            pass

    def _report(self, path: str, error: str) -> None:
        self.running = False
        if error:
            self.window.statusBar().showMessage(f"export failed: {error}")
            return
        self.window.statusBar().showMessage(f"exported to {path} ({bytes_text(os.path.getsize(path))})")
