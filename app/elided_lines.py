"""A label of at most N rows, its text cut with "…" where it would need more: a header or a note
that must not grow taller (and push what is under it away, or over it) however long its text, at
any window size or text size. Each line given starts a row while rows are left (a line too long
for its row goes on in the next, broken between words); past the last row, the lines go on after
" · " and the last row is cut. The whole text is in its tooltip, with whatever more the caller adds
(`set_lines(..., more=...)`), and in `whole_text()`.

A line is a list of segments, (text, style): style "" plain, "bold", or a colour ("#c0392b").
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

Segment = tuple[str, str]
#: Between lines that share a row (past the label's last row).
JOIN = " · "


class ElidedLines(QLabel):
    """At most `max_lines` lines, each cut to the width (see the module docstring)."""

    def __init__(self, max_lines: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.max_lines = max_lines
        self._lines: list[list[Segment]] = []
        self._more = ""
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(False)
        # As wide as its parent gives it (its text never widens the window), as tall as its lines.
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def set_lines(self, lines: list[list[Segment]], more: str = "") -> None:
        """Show `lines` (see the module docstring); `more`: said in the tooltip under the whole text."""
        lines = [line for line in lines if any(text for text, _ in line)]
        self._lines, self._more = lines, more
        self.setToolTip("\n".join(x for x in (self.whole_text(), more) if x))
        self.setVisible(bool(lines))
        self._render()

    def set_plain(self, text: str, style: str = "") -> None:
        """One line of `text` (in `style`)."""
        self.set_lines([[(text, style)]] if text else [])

    def whole_text(self) -> str:
        """Every line whole, one a line, without styles."""
        return "\n".join("".join(text for text, _ in line) for line in self._lines)

    # ---- drawing ----------------------------------------------------------------------------
    def rows(self) -> list[list[Segment]]:
        """The rows drawn at the label's width now: at most `max_lines`, the last cut with "…"."""
        room = max(1, self.contentsRect().width() - 2)
        plain = QFontMetrics(self.font())
        bold_font = QFont(self.font())
        bold_font.setBold(True)
        bold = QFontMetrics(bold_font)
        rows: list[list[Segment]] = []
        left = 0
        for line in self._lines:
            if len(rows) < self.max_lines:
                rows.append([])
                left = room
            else:
                line = [(JOIN, ""), *line]
            for text, style in line:
                fm = bold if style == "bold" else plain
                for word in re.split(r"(?<=\s)(?=\S)", text):  # each word with the spaces after it
                    width = fm.horizontalAdvance(word)
                    if width > left and rows[-1] and len(rows) < self.max_lines and not word.isspace():
                        rows.append([])
                        left = room
                    if width > left:  # the last row is full: cut it here, saying so
                        cut = fm.elidedText(word + "…", Qt.TextElideMode.ElideRight, left)
                        rows[-1].append((cut if cut.strip("…") else "…", style))
                        return rows
                    rows[-1].append((word, style))
                    left -= width
        return rows

    def _render(self) -> None:
        self.setText("<br>".join("".join(_styled(text, style) for text, style in row) for row in self.rows()))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self._render()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._render()


def _styled(text: str, style: str) -> str:
    if not text:
        return ""
    escaped = html.escape(text)
    if style == "bold":
        return f"<b>{escaped}</b>"
    if style.startswith("#"):
        return f"<span style='color:{style}'>{escaped}</span>"
    return escaped
