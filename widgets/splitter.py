"""A splitter whose handles can be seen: a grip across the middle, a tooltip, a double-click to fit.

Qt's handles between a row's panels are a line of a few pixels and dots that most styles draw faint
or not at all, so a pool lane scrolled out of sight came back only by dragging something the user
could not see (issue 22). `MarkedSplitter` draws each handle as a band in the theme's gutter colour
with a grip of three short bars in its middle, darker under the mouse, says what it does in a
tooltip, and emits `fitRequested` on a double-click so its owner can give every panel its fitted
size again (`TraceRow` and `TraceWorkspace` do).
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QSplitter, QSplitterHandle, QWidget

from branchscope.widgets.theme import theme

#: A marked handle's thickness (pixels): room for the grip, still little of the panels'.
HANDLE_WIDTH = 7
GRIP_LENGTH = 28


class MarkedHandle(QSplitterHandle):
    """A handle drawn as a band with a grip; a double-click asks the splitter to fit its panels."""

    def __init__(self, orientation: Qt.Orientation, parent: MarkedSplitter):
        super().__init__(orientation, parent)
        self.setAttribute(Qt.WidgetAttribute.WA_Hover, True)
        self.setToolTip(parent.handle_tip)

    def grip_rect(self) -> QRect:
        """Where the grip is drawn (the handle's middle)."""
        r = self.rect()
        if self.orientation() == Qt.Orientation.Vertical:  # panels one above the other: a horizontal band
            return QRect(r.center().x() - GRIP_LENGTH // 2, r.center().y() - 2, GRIP_LENGTH, 5)
        return QRect(r.center().x() - 2, r.center().y() - GRIP_LENGTH // 2, 5, GRIP_LENGTH)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt API)
        t = theme()
        p = QPainter(self)
        p.fillRect(self.rect(), t.gutter)
        grip = t.text if self.underMouse() else t.muted
        g = self.grip_rect()
        for k in (0, 2, 4):  # three bars along the grip
            if self.orientation() == Qt.Orientation.Vertical:
                p.fillRect(g.left(), g.top() + k, g.width(), 1, grip)
            else:
                p.fillRect(g.left() + k, g.top(), 1, g.height(), grip)
        p.end()

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 (Qt API)
        splitter = self.splitter()
        if isinstance(splitter, MarkedSplitter):
            splitter.fitRequested.emit()
        event.accept()


class MarkedSplitter(QSplitter):
    """A `QSplitter` of `MarkedHandle`s (see the module docstring)."""

    #: A handle was double-clicked: give the panels their fitted sizes again.
    fitRequested = Signal()

    def __init__(self, orientation: Qt.Orientation, parent: QWidget | None = None, tip: str = ""):
        self.handle_tip = tip or "drag to share the room; double-click to fit"
        super().__init__(orientation, parent)
        self.setHandleWidth(HANDLE_WIDTH)
        self.setChildrenCollapsible(False)

    def createHandle(self) -> QSplitterHandle:  # noqa: N802 (Qt API)
        return MarkedHandle(self.orientation(), self)
