"""A trace's load under way: what it is doing, a bar, and Cancel.

The widget stays hidden for the first `show_after_ms` of a load (300 ms), so that a small trace
opens without a flash; a large one shows its phase ("Reading the file", "Building lanes",
"Building the index"…) and its progress, and Cancel asks for the load to stop
(`cancelRequested`). Knows nothing of how traces load: `app.trace_loader.connect_progress` ties it
to a `TraceLoader`. Place it anywhere (the window's status bar, an overlay); without a parent it is
a small window of its own.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

#: What each phase of a load is called on screen (others are shown as they come).
PHASE_TEXT = {
    "reading": "Reading the file",
    "files": "Reading the files",
    "parsing": "Parsing",
    "events": "Reading events",
    "memory": "Reading memory events",
    "lanes": "Building lanes",
    "index": "Building the index",
}
SHOW_AFTER_MS = 300
_STEPS = 1000


class LoadProgress(QFrame):
    """Phase, bar and Cancel of one load at a time (see the module docstring)."""

    #: The user asked to stop the load (Cancel).
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None, *, show_after_ms: int = SHOW_AFTER_MS):
        super().__init__(parent)
        self.label = QLabel()
        self.bar = QProgressBar()
        self.bar.setRange(0, _STEPS)
        self.bar.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._cancel)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.bar, 1)
        lay.addWidget(self.cancel_button)
        self._title = ""
        self._loading = False
        self._delay = QTimer(self)
        self._delay.setSingleShot(True)
        self._delay.setInterval(max(int(show_after_ms), 0))
        self._delay.timeout.connect(self._appear)
        self.hide()

    def is_loading(self) -> bool:
        """Whether a load began and has not finished."""
        return self._loading

    def is_pending(self) -> bool:
        """Whether the widget is waiting to appear (a load began less than `show_after_ms` ago)."""
        return self._delay.isActive()

    def begin(self, title: str = "") -> None:
        """A load of `title` (a file name) began: appear if it is still under way in a moment."""
        self._title = title
        self._loading = True
        self.bar.setValue(0)
        self.cancel_button.setEnabled(True)
        self._set_text("Opening")
        self.hide()
        self._delay.start()

    def set_progress(self, phase: str, fraction: float) -> None:
        """The load is in `phase`, `fraction` (0..1) of the whole done."""
        if not self._loading:
            return
        self.bar.setValue(round(min(max(fraction, 0.0), 1.0) * _STEPS))
        if self.cancel_button.isEnabled():
            self._set_text(PHASE_TEXT.get(phase, phase))

    def finish(self, *_args: object) -> None:
        """The load ended (loaded, failed or cancelled): go away."""
        self._loading = False
        self._delay.stop()
        self.hide()

    def _set_text(self, what: str) -> None:
        self.label.setText(f"{what}: {self._title}…" if self._title else f"{what}…")

    def _appear(self) -> None:
        if self._loading:
            self.show()
            self.raise_()

    def _cancel(self) -> None:
        self.cancel_button.setEnabled(False)
        self._set_text("Cancelling")
        self.cancelRequested.emit()
