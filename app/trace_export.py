"""File → Export trace…: the shown trace (a run, a file, a job's ranks merged) written as Perfetto
protobuf or Chrome JSON (`profiling.trace.export`), on a thread of its own: a large trace takes
seconds, and the window keeps drawing meanwhile. The status bar says when it is written, or why not.

What is written is the whole of what is shown: a job of more ranks than the window holds at once
(`rank_job.open_view` loads a few of a large job) is read again from its files on the thread, every
rank, as `branchscope export FOLDER` writes it.

Files: the dialog's chosen filter gives a name typed without an ending its ending before the dialog
asks whether to replace a file (`FileDialogs.save_as`), so a file the user chose to replace is
replaced (the CLI's --force); a name the ending was added to after the dialog (one with a dot of its
own, "my.trace") never replaces a file. The export is written under a temporary name and renamed,
so a failed one leaves nothing behind.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from branchscope.app.cli_text import bytes_text
from branchscope.profiling.trace.export import SUFFIXES, export_trace, job_ranks
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.sources import trace_label

#: The save dialog's choices and the ending each writes, the first the default: Perfetto's UI is
#: where users look now.
EXPORT_FILTERS = {
    "Perfetto trace (*.pftrace)": ".pftrace",
    "Chrome JSON, gzipped (*.json.gz)": ".json.gz",
    "Chrome JSON (*.json)": ".json",
}


def chosen_file(path: str, suffix: str) -> tuple[str, bool]:
    """The file to write for `path`, chosen in the dialog under a filter of ending `suffix`, and
    whether it may replace a file there: `path` itself when it has an ending export writes (the
    dialog asked about it), else `path` with `suffix` added, never replacing (the dialog asked about
    another name)."""
    if any(path.lower().endswith(s) for s in SUFFIXES):
        return path, True
    return path + suffix, False


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
        chosen, suffix = self.window.dialogs.save_as("export", "Export trace", name, EXPORT_FILTERS)
        if not chosen:
            return
        path, replace = chosen_file(chosen, suffix)
        if not replace and os.path.lexists(path):
            status.showMessage(f"not exported: {path} exists and was not chosen: choose it by its full name to replace it")
            return
        self.start(trace, path, replace)

    def start(self, trace: Trace, path: str, replace: bool = False) -> None:
        """Writes `trace` (all of it: `export.whole_trace`) to `path` on a thread; `replace` lets it
        replace a file there (one the user chose to replace)."""
        self.running = True
        ranks = job_ranks(trace)
        what = f"{ranks} ranks " if ranks is not None else ""
        self.window.statusBar().showMessage(f"exporting {what}to {path}…")
        args = (trace, path, replace)
        threading.Thread(target=self._export, args=args, daemon=True, name="branchscope-export").start()

    def _export(self, trace: Trace, path: str, replace: bool) -> None:
        error = "stopped"
        try:
            export_trace(trace, path, force=replace)
            error = ""
        except (ValueError, OSError) as exc:  # TraceFormatError is a ValueError: its one line
            error = str(exc)
        except Exception as exc:  # anything else is said too, and the next export may start
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
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
