"""What the mouse and keys do on the timeline: `TimelineInput`, mixed into `TimelineView`.

A click on a CPU group's title (or on its summary lane) folds or opens it; a click on the scroll
bar's track jumps there and a drag of its handle scrolls; Shift+drag selects a time range, Esc
clears it (then the selected event), F or Z zooms to it (else to the selected event); double-click
zooms to an event; Shift+wheel, or the wheel over the lane labels, scrolls the lanes; hover shows
an event's details, or a lane label's whole name, as a tooltip.
Everything else goes on to `TimePanel` (the wheel zooms, a drag pans, W/S/A/D/0).

The mixin turns events into calls of the view's own methods and its `TimelineState`; it holds no
state of its own beyond what the view has.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QToolTip

from branchscope.widgets.event_info import describe_event, event_tip, rows_to_text, tip_of_rows
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline_painter import RULER_H, lane_area_height

#: The keys that zoom to the selection: Perfetto's F, and Z.
ZOOM_KEYS = (Qt.Key.Key_F, Qt.Key.Key_Z)
#: What they say when nothing is selected (also the window's status line).
NOTHING_SELECTED = "Nothing selected to zoom to: Shift+drag over the lanes selects a time range, a click an event"


class TimelineInput:
    """The mouse and key handlers of `TimelineView` (see the module docstring)."""

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        x = event.position().x()
        if event.button() == Qt.MouseButton.LeftButton and x < GUTTER:
            gh = self.group_at(int(event.position().y()))
            if gh is not None and gh.collapsible:  # a click on a group's title opens or folds it
                self.set_group_collapsed(gh.key, not gh.collapsed)
                event.accept()
                return
        if x >= GUTTER + self.plot_width() and self.max_scroll() > 0:
            y = int(event.position().y())
            handle = self.scroll_handle()
            if handle is not None and not (handle.top() <= y <= handle.bottom()):
                # Click on the track: jump so that the handle centres there.
                frac = (y - RULER_H - handle.height() / 2) / max(1, lane_area_height(self) - handle.height())
                self._set_scroll(round(frac * self.max_scroll()))
            self._scroll_drag = (y, self.scroll_y)
            return
        if (
            event.button() == Qt.MouseButton.LeftButton
            and event.modifiers() & Qt.KeyboardModifier.ShiftModifier
            and GUTTER <= x < GUTTER + self.plot_width()
            and event.position().y() >= RULER_H
            and self.trace is not None
        ):
            # Shift+drag: a time range instead of a pan.
            self.state.begin_range(self.t_of(x))
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.button() == Qt.MouseButton.LeftButton and event.position().x() < GUTTER + self.plot_width():
            i = self.event_at(event.position().toPoint())  # zoom to it
            if i >= 0:
                self.select_event(i)
                self.zoom_to_event(i)
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt API)
        dy = event.angleDelta().y()
        shift = event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        if dy and (shift or event.position().x() < GUTTER) and self.scroll_vertical(-dy // 2):
            event.accept()
            return
        super().wheelEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self._scroll_drag is not None:
            y0, s0 = self._scroll_drag
            handle = self.scroll_handle()
            track = max(1, lane_area_height(self) - (handle.height() if handle else 0))
            self._set_scroll(s0 + (int(event.position().y()) - y0) * self.max_scroll() / track)
            return
        if self.state.range_anchor is not None:
            self._drag_range_to(event.position().x())
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self._scroll_drag is not None:
            self._scroll_drag = None
            return
        if self.state.range_anchor is not None:
            self._drag_range_to(event.position().x())
            if self.state.end_range() is not None:
                self.rangeSelected.emit(*self.selected_range())
            return
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if event.matches(QKeySequence.StandardKey.Find):
            self.open_find()
            event.accept()
            return
        if event.key() in ZOOM_KEYS and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            if not self.zoom_to_selection():
                QToolTip.showText(self.mapToGlobal(self.rect().center()), NOTHING_SELECTED, self)
            event.accept()
            return
        if event.key() == Qt.Key.Key_Escape and (self.state.range is not None or self.selected >= 0):
            # One thing at a time: the range first, then the selected event.
            if self.state.range is not None:
                self.clear_range()
            else:
                self.select_event(-1)
            event.accept()
            return
        super().keyPressEvent(event)

    def _drag_range_to(self, x: float) -> None:
        x = min(max(x, GUTTER), GUTTER + self.plot_width())
        # Less than a pixel wide is a shift+click: no range.
        self.state.drag_range(self.t_of(x), self.ns_per_px())

    def gutter_tip(self, pos: QPoint) -> str:
        """What the gutter at a widget position names, whole (its label may be cut): a lane's label,
        event count and folded rows, or a group's title; "" elsewhere."""
        if self.trace is None or pos.x() >= GUTTER or pos.y() < RULER_H:
            return ""
        y = pos.y() - RULER_H + self.scroll_y
        gh = self.lane_layout.group_at(y)
        if gh is not None:
            return gh.title
        lr = self.lane_layout.lane_at(y)
        if lr is None:
            return ""
        tip = f"{lr.label}\n{self.trace.lane_event_count(lr.lane):,} events"
        if lr.folded:
            tip += f"; rows {lr.drawn}–{len(lr.rows)} drawn in one (folded to keep every lane in view)"
        return tip

    def tip_at(self, pos: QPoint) -> str:
        """The tooltip at a widget position: a lane label's whole name over the gutter, the facts
        of the event under it (`event_info.event_tip`), else ""."""
        return self.gutter_tip(pos) or self._event_tip(self.event_at(pos))

    def _event_tip(self, i: int) -> str:
        return event_tip(self.trace, i, self.branch_names, self.event_branch) if i >= 0 else ""

    def on_hover(self, pos: QPoint) -> None:
        """Outline the event under the mouse and show its tooltip (over the gutter: the lane's name)."""
        gutter = self.gutter_tip(pos)
        i = -1 if gutter else self.event_at(pos)
        if not gutter and i == self.state.hovered:
            return
        rows = describe_event(self.trace, i, self.branch_names, self.event_branch) if i >= 0 else []
        tip = gutter or (tip_of_rows(self.trace, i, rows) if rows else "")
        self.hover_text = rows_to_text(rows)
        if tip:
            QToolTip.showText(self.mapToGlobal(pos), tip, self)
        else:
            QToolTip.hideText()
        self.state.hover(i)

    def leaveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        if self.state.hovered >= 0:
            self.hover_text = ""
            self.state.hover(-1)
        super().leaveEvent(event)

    def on_click(self, pos: QPoint) -> None:
        gh = self.group_at(pos.y())
        if gh is not None and gh.collapsed:  # a summary lane: a click opens its group
            self.set_group_collapsed(gh.key, False)
            return
        self.select_event(self.event_at(pos))
