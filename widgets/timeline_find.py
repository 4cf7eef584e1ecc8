"""The timeline's find bar (Ctrl+F): a name to look for, the number of matches, Enter for the next one.

What it finds and how the view shows a match are `TimelineView.find` and `find_next`
(`TimelineState.search` keeps the matches); the bar is their text field.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from branchscope.widgets.time_axis import GUTTER, RIGHT_MARGIN
from branchscope.widgets.timeline_painter import RULER_H


class Finder(Protocol):
    """What the bar asks of its view (`TimelineView`), named here so that the two do not import
    each other."""

    state: Any

    def width(self) -> int: ...
    def find(self, text: str) -> None: ...
    def find_next(self) -> None: ...
    def close_find(self) -> None: ...

#: Pause in typing after which Find highlights the matches.
FIND_DEBOUNCE_MS = 150


class FindBar(QFrame):
    """Ctrl+F: a name to look for, the number of matches, Enter for the next one."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.view = cast(Finder, parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.edit = QLineEdit(self)
        self.edit.setPlaceholderText("Find events by name (Enter: next match)")
        self.edit.setClearButtonEnabled(True)
        self.count = QLabel("", self)
        close = QToolButton(self)
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.view.close_find)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 3, 3, 3)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.count)
        lay.addWidget(close)
        self.edit.returnPressed.connect(self._next)
        # Highlight while typing, once the typing pauses: a search builds an index of the matches.
        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(FIND_DEBOUNCE_MS)
        self.debounce.timeout.connect(lambda: self.view.find(self.edit.text()))
        self.edit.textEdited.connect(lambda _text: self.debounce.start())
        self.setFixedWidth(360)
        self.hide()

    def place(self) -> None:
        """At the view's top right, over the lanes."""
        view = self.view
        self.adjustSize()
        self.move(max(GUTTER, view.width() - RIGHT_MARGIN - self.width() - 8), RULER_H + 6)

    def _next(self) -> None:
        """Enter: search for the text if it changed, and show the next match."""
        self.debounce.stop()
        text = self.edit.text()
        if text != self.view.state.find.query:
            self.view.find(text)
        self.view.find_next()

    def keyPressEvent(self, event):  # noqa: N802 (Qt API)
        if event.key() == Qt.Key.Key_Escape:
            self.view.close_find()
            return
        super().keyPressEvent(event)

