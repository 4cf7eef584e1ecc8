"""The window's status bar: a message says what just happened and goes after a while; under it, a
steady line says what is true now (how to move about the timeline, while the Run page shows a
trace; nothing otherwise).

A message left for ever went stale: "running …" stayed after the run, the timeline's keys were
offered on the Compare page. So every message times out (`MESSAGE_MS` unless its caller says
otherwise), and the steady line is set from what is shown, not from what happened.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QStatusBar

#: How long a message stays, unless its caller gives a time of its own.
MESSAGE_MS = 12_000


class StatusBar(QStatusBar):
    """A status bar whose messages time out over a steady line (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        #: What is true now; a message hides it while it shows (QStatusBar's normal widgets).
        self.steady = QLabel()
        self.addWidget(self.steady, 1)

    def showMessage(self, message: str, timeout: int = 0) -> None:  # noqa: N802 (Qt API)
        """Show `message` for `timeout` ms, MESSAGE_MS if none is given (never for ever)."""
        super().showMessage(message, timeout if timeout > 0 else MESSAGE_MS)

    def set_steady(self, text: str) -> None:
        """What the status bar says when no message shows."""
        self.steady.setText(text)

    def text_shown(self) -> str:
        """What the status bar says now: the message, else the steady line."""
        return self.currentMessage() or self.steady.text()
