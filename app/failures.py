"""What went wrong in the window that no one caught: an error raised in a slot, or by a view while
it paints (every repaint would raise it again), is reported once, in a dialog with its traceback in
the details (and on stderr); a screenshot is refused while a view fails to draw."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from PySide6.QtCore import QTimer


class Failures:
    """The failures of `window` (see the module docstring)."""

    def __init__(self, window: Any):  # the window (app/main_window.py), which imports this module
        self.window = window
        #: What was reported (one line each, no repeats).
        self.messages: list[str] = []
        #: Whether `report_exception` also writes tracebacks to stderr (not for --screenshot).
        self.echo_tracebacks = True
        self._reports = 0

    def note(self, message: str) -> bool:
        """Remember a failure; False if it was already reported."""
        if message in self.messages:
            return False
        self.messages.append(message)
        return True

    def report_exception(self, exc_type, exc, tb) -> None:
        """`sys.excepthook` while the window runs (`app.cmd_gui` installs it)."""
        self._reports += 1
        message = f"{exc_type.__name__}: {exc}"
        if not self.note(message):
            return
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        if self.echo_tracebacks:
            sys.stderr.write(details)
        # Not from inside a paint event: the dialog is shown by the event loop.
        QTimer.singleShot(0, self.window, lambda: self.window.show_error("Something went wrong", message, details))

    def save_screenshot(self, path: str | os.PathLike[str]) -> bool:
        """Draw the window into a PNG; False if it cannot be drawn (the reason in `messages`) or saved."""
        reports = self._reports
        try:
            image = self.window.grab()  # views report their failures through sys.excepthook
        except Exception as exc:  # a widget that is not a TimePanel raises here
            self.note(f"drawing the window failed: {type(exc).__name__}: {exc}")
            return False
        return self._reports == reports and image.save(str(path), "PNG")
