"""Painting the timeline: the lanes, event names, marks and arrows, the lane labels, the scroll bar.

`TimelineView` (`widgets.timeline`) is a pyqtgraph scene: a time ruler (`TimeAxisItem`) over a
`ViewBox` linked to the shared `TimeAxis`, lane labels in the gutter, a scroll bar in the right
margin. The lanes are one graphics item, `TimelineItem`: like pyqtgraph's BarGraphItem, one item
draws all shapes. Its painter (`TimelinePainter`) asks the level-of-detail index (`widgets.lod`) for
what is visible in the visible rows (`TimelineLayout.visible`), paints it into one RGB32 buffer with
numpy (`lod.rasterize`: a few array passes the size of the visible pixels), and hands that to Qt as a
single image; only then are the few things that need Qt's text engine drawn on top (names inside
events wide enough to hold them, each as much of its name as tells it apart in its room:
`timeline_labels.block_label`, measured once per name and width bucket), then the marks: the hovered and selected events, the selected
event's flows, the selected time range (`TimelineState`). So a frame costs what the pixels cost
whether the trace holds ten thousand events or ten million.

Events are coloured by branch, and by kind on GPU lanes (`widgets.colors`); neutral colours follow
the palette (`Look`, from `widgets.theme`), text the widget's font. The scene's items that paint
through it are `timeline_items`'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen, QPolygonF

from branchscope.profiling.trace.model import Trace
from branchscope.widgets import colors
from branchscope.widgets.charts import TimeAxisItem
from branchscope.widgets.lod import Scratch, TimelineLod, pixel_spans, rasterize
from branchscope.widgets.theme import Theme
from branchscope.widgets.time_axis import GUTTER, TimePanel
from branchscope.widgets.timeline_labels import block_label, gutter_text, label_forms, sibling_prefix
from branchscope.widgets.timeline_layout import NO_LABEL, TimelineLayout
from branchscope.widgets.timeline_state import TimelineState
from branchscope.widgets.units import time_ticks

#: Height of the time ruler over the lanes.
RULER_H = 24
#: An event needs this many pixels before its name is drawn inside it.
LABEL_MIN_PX = 30
MAX_LABELS = 3000
#: A selected time range: its shade and edges (they read on light and dark lanes).
RANGE_FILL = QColor(61, 123, 217, 60)
RANGE_EDGE = QColor(61, 123, 217, 220)
#: Arrows from a launch to its kernel; the same collective on the other ranks.
FLOW_COLOR = QColor(214, 39, 40)
PEER_COLOR = QColor(148, 103, 189)


def lane_area_height(view: TimePanel) -> int:
    """Height of a timeline's lane area (below the ruler), in widget pixels."""
    return max(1, view.height() - RULER_H)


def _arrow_head(p: QPainter, start: QPointF, end: QPointF, color: QColor, size: float = 7.0) -> None:
    dx, dy = end.x() - start.x(), end.y() - start.y()
    length = float(np.hypot(dx, dy))
    if length < 1:
        return
    ux, uy = dx / length, dy / length
    left = QPointF(end.x() - size * ux + size * 0.5 * uy, end.y() - size * uy - size * 0.5 * ux)
    right = QPointF(end.x() - size * ux - size * 0.5 * uy, end.y() - size * uy + size * 0.5 * ux)
    p.setBrush(color)
    p.setPen(Qt.PenStyle.NoPen)
    p.drawPolygon(QPolygonF([end, left, right]))
    p.setBrush(Qt.BrushStyle.NoBrush)


def _rgb32(c: QColor) -> int:
    return 0xFF000000 | (c.red() << 16) | (c.green() << 8) | c.blue()


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor(*(round(x + (y - x) * t) for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True)))


@dataclass(frozen=True)
class Look:
    """The timeline's neutral colours for one `Theme` (event colours are `widgets.colors`')."""

    lane_bg: tuple[int, int]  # RGB32, alternating lanes
    separator: int  # RGB32, the line under a lane
    header: int  # RGB32, a group header's band across the lanes
    grid: int  # RGB32, grid lines on the lane background
    ruler_bg: QColor
    gutter: QColor
    gutter_line: QColor
    group_bg: QColor
    group_text: QColor
    lane_line: QColor
    text: QColor
    muted: QColor
    scroll_handle: QColor
    hover: QColor
    selected: QColor
    #: The event palette faded toward the lanes (what a search does not match), and where a label
    #: on it is dark.
    dimmed: np.ndarray
    dimmed_dark_text: np.ndarray

    @classmethod
    def of(cls, t: Theme) -> Look:
        if not t.dark:  # the house colours
            return cls(
                colors.LANE_BG, colors.SEPARATOR, 0xFFE8ECF0, 0xFFE6EAEE, QColor("#f7f8fa"), t.gutter,
                QColor("#cfd5dc"), QColor("#dde3e9"), QColor("#2c3640"), QColor("#d5dae0"), t.text,
                QColor("#77828d"), QColor("#b4bdc7"), QColor("#39424c"), QColor("#111111"),
                colors.DIMMED_PALETTE, np.ones(colors.PALETTE.size, dtype=bool),
            )  # fmt: skip
        bg, fg = t.background, t.text
        dimmed = colors.blend(colors.PALETTE, _rgb32(bg), 0.72)
        return cls(
            (_rgb32(bg), _rgb32(_mix(bg, fg, 0.04))), _rgb32(_mix(bg, fg, 0.16)), _rgb32(_mix(bg, fg, 0.10)),
            _rgb32(_mix(bg, fg, 0.09)), _mix(bg, fg, 0.03), t.gutter, _mix(t.gutter, fg, 0.2),
            _mix(t.gutter, fg, 0.12), fg, _mix(t.gutter, fg, 0.15), fg, t.muted, _mix(t.gutter, fg, 0.3),
            _mix(fg, bg, 0.2), fg, dimmed, colors.luminance(dimmed) > 0.55,
        )  # fmt: skip


class TimelinePainter:
    """Draws a `TimelineView`: what its layout puts on screen, marked as its state says.

    It reads the view's geometry (size, time axis, scroll offset, `event_rect`, `range_rect`), its
    `lane_layout` and its `state`; it owns the look (colours, the event-name font) and what it keeps
    from frame to frame (buffers, measured names, the lane labels' image). `painted_lanes` and
    `drawn_arrows` say what the last frame drew.
    """

    def __init__(self, view: TimePanel, layout: TimelineLayout, state: TimelineState, theme: Theme):
        self.view = view
        self.layout = layout
        self.state = state
        self.look = Look.of(theme)
        self.label_font = QFont(view.font())
        self.label_fm = QFontMetrics(self.label_font)
        #: What is drawn: the trace, its LOD index and colour keys (`widgets.colors`), and where
        #: its first event sits on the axis (the LOD index counts from there).
        self.trace: Trace | None = None
        self.lod: TimelineLod | None = None
        self.keys = np.zeros(0, dtype=np.uint8)
        self.shift = 0.0
        #: The word the trace's branches share, which a narrow block's label drops (`sibling_prefix`).
        self.shared = ""
        #: Lane indices that had at least one pixel row on screen in the last paint; the arrows
        #: drawn in the last paint.
        self.painted_lanes: list[int] = []
        self.drawn_arrows: list[tuple[int, int]] = []
        #: The names drawn on events in the last paint: (x, baseline y, text) in widget pixels.
        self.drawn_labels: list[tuple[int, int, str]] = []
        #: Each name's label when it fits whole and its width; the label in a room (name, bucket).
        self._name_width: dict[int, tuple[str, int]] = {}
        self._elided: dict[tuple[int, int], str] = {}
        self._gutter_cache: tuple[tuple, QImage] | None = None
        self._scratch = Scratch()
        self._match_scratch = Scratch()

    def apply_theme(self, theme: Theme, font: QFont) -> None:
        """Take the palette's colours and the widget's font (event names a little smaller)."""
        self.look = Look.of(theme)
        self.label_font = QFont(font)
        if font.pointSizeF() > 0:
            self.label_font.setPointSizeF(max(6.5, font.pointSizeF() * 0.82))
        else:
            self.label_font.setPixelSize(max(8, round(font.pixelSize() * 0.82)))
        self.label_fm = QFontMetrics(self.label_font)
        self.forget_text()

    def set_trace(self, trace: Trace | None, lod: TimelineLod | None, keys: np.ndarray, shift: float) -> None:
        self.trace, self.lod, self.keys, self.shift = trace, lod, keys, shift
        self.shared = "" if trace is None else sibling_prefix(trace.names)
        self._name_width.clear()
        self._elided.clear()
        if trace is None:
            self._gutter_cache = None

    def forget_text(self) -> None:
        """Measured and elided names and the lane labels are drawn anew (font or palette changed)."""
        self._name_width.clear()
        self._elided.clear()
        self._gutter_cache = None

    def forget_gutter(self) -> None:
        """The lane labels are drawn anew (the layout or the size changed)."""
        self._gutter_cache = None

    # ---- the lanes --------------------------------------------------------------------------
    def paint_lanes(self, p: QPainter) -> None:
        """The lanes, in widget pixels (the plot area right of the gutter, below the ruler)."""
        view = self.view
        w_px = view.plot_width()
        img_h = lane_area_height(view)
        if self.trace is None or self.lod is None:
            self.painted_lanes = []
            self.drawn_labels = []
            p.setPen(self.look.muted)
            p.drawText(
                QRect(GUTTER, RULER_H, w_px, img_h),
                Qt.AlignmentFlag.AlignCenter,
                "Open a trace (File → Open trace…, or drop a file here) or run a model.",
            )
            return
        # The LOD index counts from the trace's first event, the axis from the panel's origin.
        axis = view.axis
        lo, hi = axis.lo - self.shift, axis.hi - self.shift
        nspp = (hi - lo) / w_px
        shown = self.layout.visible(view.scroll_y, img_h)
        rows, row_y, y_map, summaries = shown.rows, shown.row_y, shown.y_map, shown.summaries
        self.painted_lanes = shown.painted
        n_rows = len(rows)
        n_lines = n_rows + len(summaries)
        rows_arr = np.asarray(rows, dtype=np.int64)
        find = self.state.find
        find_on = find.active
        vis = None
        # The painted rows, then one line of each colour the y map's negative codes stand for
        # (BG_A, BG_B, SEP, HEADER), in arrays kept from frame to frame.
        look = self.look
        extra = np.array([*look.lane_bg, look.separator, look.header], dtype=np.uint32)
        ext = self._scratch.get("ext", (n_lines + extra.size) * w_px, np.uint32).reshape(-1, w_px)
        ext[n_lines:] = extra[:, None]
        if n_rows:
            vis = self.lod.visible(rows_arr, lo, hi, nspp)
            x0, x1 = pixel_spans(vis.start_rel, vis.end_rel, lo, nspp, w_px)
            rep = vis.level.rep[vis.index]
            keys = self.keys[rep]
            palette = look.dimmed if find_on else colors.PALETTE
            # Each row's background: its lane's (SHADE_A, SHADE_B) or a title band's (SHADE_HEADER).
            shades = np.array([*look.lane_bg, look.header], dtype=np.uint32)
            lines, covered = rasterize(
                vis.row_pos, x0, x1, palette[keys], n_rows, w_px, shades[np.asarray(shown.row_shade)],
                scratch=self._scratch, out=ext[:n_rows],
            )  # fmt: skip
            if find.lod is not None:
                mv = find.lod.visible(rows_arr, lo, hi, nspp)
                mx0, mx1 = pixel_spans(mv.start_rel, mv.end_rel, lo, nspp, w_px)
                hl = np.full(mx0.size, colors.PALETTE[colors.HIGHLIGHT_KEY], dtype=np.uint32)
                _, mcov = rasterize(mv.row_pos, mx0, mx1, hl, n_rows, w_px, 0, scratch=self._match_scratch)
                lines[mcov] = colors.PALETTE[colors.HIGHLIGHT_KEY]
            # A summary lane (or a lane's folded rows): at each pixel, the first of its rows that
            # has an event there, else its background.
            cols_all = np.arange(w_px)
            for s, members in enumerate(summaries):
                cov = covered[members]
                first = np.argmax(cov, axis=0)
                bg = shades[shown.summary_shade[s]]
                ext[n_rows + s] = np.where(cov.any(axis=0), lines[members][first, cols_all], bg)
        idx = np.where(y_map >= 0, y_map, n_lines - 1 - y_map)
        img = np.take(
            ext,
            idx,
            axis=0,
            out=self._scratch.get("img", img_h * w_px, np.uint32).reshape(img_h, w_px),
            mode="clip",
        )
        # Grid lines where the ruler has its ticks.
        ticks, *_ = time_ticks(axis.lo, axis.hi, max(2, w_px // TimeAxisItem.TICK_PX))
        cols = np.array([int(round((t - axis.lo) / nspp)) for t in ticks], dtype=np.int64)
        cols = cols[(cols >= 0) & (cols < w_px)]
        if cols.size:
            sub = img[:, cols]
            sub[(sub == look.lane_bg[0]) | (sub == look.lane_bg[1])] = look.grid
            img[:, cols] = sub
        qimg = QImage(img.data, w_px, img_h, w_px * 4, QImage.Format.Format_RGB32)
        p.drawImage(GUTTER, RULER_H, qimg)
        del qimg
        self.drawn_labels = []
        if vis is not None and vis.index.size:
            self._draw_labels(p, vis, x0, x1, keys, row_y, find_on)
        self._draw_marks(p)

    def _draw_labels(self, p: QPainter, vis, x0, x1, keys, row_y, find_on: bool) -> None:
        # Room for a name ends where the next item of the same row begins (rows can overlap when
        # a trace's events overlap without nesting).
        room = x1.copy()
        if x0.size > 1:
            same_row = vis.row_pos[1:] == vis.row_pos[:-1]
            room[:-1] = np.where(same_row, np.minimum(x1[:-1], x0[1:]), x1[:-1])
        width = room - x0
        cand = np.flatnonzero(width >= LABEL_MIN_PX)
        cand = cand[np.asarray(row_y, dtype=np.int64)[vis.row_pos[cand]] != NO_LABEL]
        if cand.size == 0:
            return
        if not vis.raw:
            rep = vis.level.rep[vis.index[cand]]
            own = self.trace.dur_ns[rep]
            run = vis.end_rel[cand] - vis.start_rel[cand]
            cand = cand[own >= 0.8 * run]
        if cand.size > MAX_LABELS:
            cand = cand[:MAX_LABELS]
        p.setFont(self.label_font)
        fm = self.label_fm
        ascent = fm.ascent()
        rh = self.layout.row_height
        if rh - 1 < fm.height() - 3:
            return
        dark, light = QColor("#1d2329"), QColor("#ffffff")
        reps = vis.level.rep[vis.index[cand]]
        name_ids = self.trace.name_id[reps]
        names = self.trace.names
        dark_text = (self.look.dimmed_dark_text if find_on else colors.DARK_TEXT)[keys[cand]]
        for c, nid, dk in zip(cand.tolist(), name_ids.tolist(), dark_text.tolist(), strict=True):
            avail = int(room[c] - x0[c]) - 6
            whole = self._name_width.get(nid)
            if whole is None:
                full = label_forms(names[nid])[0]
                whole = self._name_width[nid] = (full, fm.horizontalAdvance(full))
            if whole[1] <= avail:
                text = whole[0]
            else:
                bucket = (avail // 8) * 8
                if bucket < 18:
                    continue
                text = self._elided.get((nid, bucket))
                if text is None:
                    text = block_label(names[nid], bucket, fm, self.shared)
                    self._elided[(nid, bucket)] = text
                if not text:
                    continue
            p.setPen(dark if dk else light)
            y = RULER_H + row_y[int(vis.row_pos[c])] + (rh - 1 + ascent - fm.descent()) // 2
            x = GUTTER + int(x0[c]) + 3
            p.drawText(x, y, text)
            self.drawn_labels.append((x, y, text))

    def _draw_marks(self, p: QPainter) -> None:
        view, state = self.view, self.state
        p.setClipRect(QRect(GUTTER, RULER_H, view.plot_width(), lane_area_height(view)))
        p.setBrush(Qt.BrushStyle.NoBrush)
        self.drawn_arrows = []
        if state.hovered >= 0 and state.hovered != state.selected:
            r = view.event_rect(state.hovered)
            if r is not None:
                p.setPen(QPen(self.look.hover, 1))
                p.drawRect(r.adjusted(0, 0, -1, -1))
        if state.selected >= 0:
            r = view.event_rect(state.selected)
            self._draw_links(p, r)
            if r is not None:
                p.setPen(QPen(self.look.selected, 2))
                p.drawRect(r.adjusted(0, 0, -1, -1))
        r = view.range_rect()
        if r is not None:
            p.fillRect(r, RANGE_FILL)
            p.setPen(QPen(RANGE_EDGE, 1))
            p.drawLine(r.topLeft(), r.bottomLeft())
            p.drawLine(r.topRight(), r.bottomRight())
        p.setClipping(False)

    def _draw_links(self, p: QPainter, selected: QRect | None) -> None:
        """Arrows from launches to their kernels, and the same collective on other ranks outlined
        and joined to the selected one by a dashed line (where their start times differ)."""
        event_rect = self.view.event_rect
        pen = QPen(FLOW_COLOR, 1.5)
        for src, dst in self.state.flow_arrows:
            a, b = event_rect(src), event_rect(dst)
            if a is None or b is None:
                continue
            start = QPointF(a.left(), a.bottom() if b.top() > a.top() else a.top())
            end = QPointF(b.left(), b.top() if b.top() > a.top() else b.bottom())
            p.setPen(pen)
            p.drawLine(start, end)
            _arrow_head(p, start, end, FLOW_COLOR)
            self.drawn_arrows.append((src, dst))
        if selected is None:
            return
        for e in self.state.peer_events:
            r = event_rect(e)
            if r is None:
                continue
            p.setPen(QPen(PEER_COLOR, 2))
            p.drawRect(r.adjusted(0, 0, -1, -1))
            p.setPen(QPen(PEER_COLOR, 1, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(selected.left(), selected.center().y()), QPointF(r.left(), r.center().y()))

    # ---- the gutter and the scroll bar --------------------------------------------------------
    def paint_gutter(self, p: QPainter) -> None:
        """Lane labels change only with scrolling or layout, so they are drawn once into an image."""
        view, layout = self.view, self.layout
        img_h = lane_area_height(view)
        dpr = view.devicePixelRatioF()
        key = (
            view.scroll_y,
            img_h,
            layout.content_height,
            id(self.trace),
            layout.row_height,
            dpr,
            len(layout.lane_rows),
            tuple((gh.top, gh.collapsed) for gh in layout.group_headers),
        )
        if self._gutter_cache is None or self._gutter_cache[0] != key:
            image = QImage(int(GUTTER * dpr), int(img_h * dpr), QImage.Format.Format_ARGB32_Premultiplied)
            image.setDevicePixelRatio(dpr)
            gp = QPainter(image)
            gp.translate(0, -RULER_H)
            self._draw_lane_labels(gp, img_h)
            gp.end()
            self._gutter_cache = (key, image)
        p.drawImage(0, RULER_H, self._gutter_cache[1])

    def _draw_lane_labels(self, p: QPainter, img_h: int) -> None:
        view, layout, look = self.view, self.layout, self.look
        height = view.height()
        p.fillRect(0, RULER_H, GUTTER, img_h, look.gutter)
        p.fillRect(GUTTER - 1, RULER_H, 1, img_h, look.gutter_line)
        font = view.font()
        fm = QFontMetrics(font)
        bold = QFont(font)
        bold.setBold(True)
        fmb = QFontMetrics(bold)
        scroll = view.scroll_y
        p.setFont(bold)
        p.setPen(look.group_text)
        for gh in layout.group_headers:
            y = RULER_H + gh.top - scroll
            if y + gh.height < RULER_H or y > height:
                continue
            p.fillRect(0, y, GUTTER - 1, gh.height, look.group_bg)
            # A collapsible group says so: ▸ collapsed (click to open), ▾ open.
            mark = ("▸ " if gh.collapsed else "▾ ") if gh.collapsible else ""
            title = gutter_text(mark + gh.title, fmb, GUTTER - 12)
            p.drawText(QRect(6, y, GUTTER - 12, gh.height), Qt.AlignmentFlag.AlignVCenter, title)
        p.setFont(font)
        for lr in layout.lane_rows:
            y = RULER_H + lr.top - scroll
            if y + lr.height < RULER_H:
                continue
            if y > height:
                break
            p.fillRect(0, y + lr.height - 1, GUTTER - 1, 1, look.lane_line)
            p.setPen(look.text)
            text = gutter_text(lr.label, fm, GUTTER - 20)
            line_h = min(lr.height, fm.height() + 6)
            second = lr.height >= 2 * fm.height() + 6
            # The name stays in sight while any of its lane is (scrolled through a tall lane).
            y = RULER_H + layout.label_top(lr, scroll, line_h + (fm.height() if second else 0))
            p.drawText(QRect(14, y + 1, GUTTER - 20, line_h), Qt.AlignmentFlag.AlignVCenter, text)
            if second:
                p.setPen(look.muted)
                n = self.trace.lane_event_count(lr.lane)
                # A lane folded to fit says which of its rows its last row holds (1-based).
                folded = f" · rows {lr.drawn}–{len(lr.rows)} in one" if lr.folded else ""
                p.drawText(
                    QRect(14, y + line_h - 2, GUTTER - 20, fm.height() + 2),
                    Qt.AlignmentFlag.AlignVCenter,
                    fm.elidedText(f"{n:,} events{folded}", Qt.TextElideMode.ElideRight, GUTTER - 20),
                )

    def paint_scroll_bar(self, p: QPainter, rect: QRectF) -> None:
        """The scroll bar's track (`rect`, the item's) and handle, in the item's coordinates."""
        view = self.view
        p.fillRect(rect, self.look.gutter)
        handle = view.scroll_handle()
        if handle is not None:
            p.fillRect(handle.translated(-(GUTTER + view.plot_width()), -RULER_H), self.look.scroll_handle)
