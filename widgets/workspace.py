"""The trace workspace: the time panels of one or more traces, one above the other, on one time axis.

Each shown trace gets a row: one panel of every kind in `PANELS` (timeline, thread-pool and CPU
charts, memory), all drawing through the workspace's one `TimeAxis`, so zooming or panning any
panel moves every row, and a given instant sits at the same x from top to bottom. A trace is
shown with its own origin (`ShownTrace.origin_ns`, on its own clock; None: its first event) at
the axis' 0, so two runs, or the ranks of a job, line up on one scale. The axis spans the union of
the traces so counted, and shows all of it after each `show_traces`.

Panels follow `widgets/panel.py`'s protocol. Showing is all or nothing: every panel of every row
prepares its trace first (what can fail, with nothing on screen changed), then the traces are
swapped in; should a panel fail all the same, every panel, the axis and the layout go back to what
they showed before (`snapshot`/`restore`, which the window also uses when its other views fail).

Within a row the timeline gets the height its lanes need, the charts squeezed to a compact height
first where the row is short (two runs compared); a chart with nothing to show keeps only room for
its one line of explanation, and what is left goes to the charts that have data.

The rows sit in a scroll area (`TraceWorkspace.scroll`): where the rows' needs (every lane of every
run, each chart's labels) pass the height there is, each row gets its need and the rows scroll,
rather than their minimum heights stacking up into the window's and growing it past the screen.

A new panel is one file in `widgets/` plus one line in `PANELS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from branchscope.profiling.trace.merge import RankSummary, rank_summaries
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.rank_job import job_of
from branchscope.profiling.trace.ranks import with_lanes
from branchscope.widgets.memory_view import MemoryView
from branchscope.widgets.pool_usage import PoolUsageView
from branchscope.widgets.rank_overview import RankOverview
from branchscope.widgets.splitter import MarkedSplitter
from branchscope.widgets.theme import theme
from branchscope.widgets.time_axis import TimeAxis
from branchscope.widgets.timeline import TimelineView
from branchscope.widgets.units import format_bytes, format_duration

#: The height the workspace plans for a row that has not been laid out yet.
DEFAULT_ROW_HEIGHT = 900
#: The main panel (the timeline) never gets less than this.
MIN_MAIN_HEIGHT = 120
#: A panel with nothing to show: one line of explanation (`TimePanel.draw_message_line`).
EMPTY_HEIGHT = 28


@dataclass(frozen=True)
class PanelKind:
    """One kind of panel in every row, and the room it takes there."""

    name: str
    #: Makes the panel (a `TracePanel` widget) drawing through the given axis.
    make: Callable[[TimeAxis], QWidget]
    #: Height wanted when the panel has data: `wanted(panel, row_height)`. For the main panel,
    #: what its content needs (it gets at most what the charts leave).
    wanted: Callable[[QWidget, int], int]
    #: Height kept when it has nothing to show: one line of explanation.
    empty: int = EMPTY_HEIGHT
    #: Share of what the main panel leaves, among the charts that have data.
    share: float = 1.0
    #: Splitter stretch factor and height before the first trace.
    stretch: int = 1
    initial: int = 150
    #: The main panel: first in the row, it takes what the charts do not need.
    main: bool = False
    #: The least a chart with data is squeezed to when the main panel's lanes need the room (rows
    #: of a comparison share the height: each run's pool lanes come before its charts' full height).
    compact: int = 80
    #: For the main panel: the least that shows all it holds (a comparison's rows share the height
    #: by it; None: `wanted`), and whether to fold it to that when rows are several.
    least: Callable[[QWidget], int] | None = None
    fold: Callable[[QWidget, bool], None] | None = None


PANELS: list[PanelKind] = [
    PanelKind("timeline", lambda axis: TimelineView(axis=axis), lambda p, _h: p.full_height + 40,
              stretch=6, initial=560, main=True, least=lambda p: p.folded_height + 40,
              fold=lambda p, on: p.set_fold_to_fit(on)),
    PanelKind("pool", lambda axis: PoolUsageView(axis=axis), lambda p, h: p.wanted_height(h),
              share=0.6, stretch=2, initial=230, compact=110),
    PanelKind("memory", lambda axis: MemoryView(axis=axis),
              lambda p, h: max(80, min(p.wanted_height(), h // 3)),
              share=0.4, stretch=1, initial=150, compact=60),
]  # fmt: skip


#: A rank stands out when its step time or memory peak exceeds the ranks' median by this factor.
STANDOUT = 1.1


class RankSummaryBar(QLabel):
    """One line per trace of several ranks: each rank's busy share, memory peak and median step,
    the slow or heavy ranks in red (more than `STANDOUT` times the ranks' median)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setContentsMargins(6, 2, 6, 2)  # not a style sheet: one pins the font, which then never scales
        #: What the bar shows: each rank's summary, and the (rank, "step" | "memory") that stand out.
        self.ranks: list[RankSummary] = []
        self.standouts: set[tuple[int | None, str]] = set()
        self.hide()

    def set_traces(self, traces: Sequence[Trace], show: bool = True) -> None:
        """The line of each trace of several ranks; `show`: False keeps it hidden (the rank overview
        stands in its place), which spares relaying out the window twice."""
        lines = []
        self.ranks, self.standouts = [], set()
        for trace in traces:
            if len({ln.rank for ln in trace.lanes}) < 2:
                continue
            ranks = rank_summaries(trace)
            self.ranks += ranks
            out = _standouts(ranks)
            self.standouts |= out
            lines.append(" &nbsp;│&nbsp; ".join(_rank_html(r, out) for r in ranks))
        self.setText("<br>".join(lines))
        self.setVisible(bool(lines) and show)


def _standouts(ranks: list[RankSummary]) -> set[tuple[int | None, str]]:
    import statistics

    out = set()
    for metric, value in (("step", lambda r: r.step_ns), ("memory", lambda r: r.memory_peak_bytes)):
        values = [(r.rank, value(r)) for r in ranks if value(r) is not None]
        if len(values) < 2:
            continue
        median = statistics.median(v for _, v in values)
        out |= {(rank, metric) for rank, v in values if v > STANDOUT * median and v > min(x for _, x in values)}
    return out


def _rank_html(r: RankSummary, standouts: set) -> str:
    def mark(text: str, metric: str) -> str:
        return f"<b style='color:#c0392b'>{text}</b>" if (r.rank, metric) in standouts else text

    host = f" ({r.host})" if r.host else ""
    parts = [f"<b>rank {r.rank}</b>{host}: busy {r.busy * 100:.0f}% {r.busy_of}"]
    if r.memory_peak_bytes is not None:
        parts.append(mark(f"peak {format_bytes(r.memory_peak_bytes)}", "memory"))
    if r.step_ns is not None:
        parts.append(mark(f"step {format_duration(r.step_ns)}", "step"))
    return f"<span style='color:{theme().text.name()}'>" + ", ".join(parts) + "</span>"


@dataclass(frozen=True)
class ShownTrace:
    """A trace to show, the instant of it (its own clock) at the axis' 0, and a title for its row."""

    trace: Trace
    origin_ns: int | None = None
    title: str = ""

    def extent(self) -> tuple[int, int]:
        """The trace's span relative to its origin."""
        start, end = self.trace.span()
        return start - self.origin, end - self.origin

    @property
    def origin(self) -> int:
        """The origin, the trace's first event when not given."""
        return int(self.trace.span()[0]) if self.origin_ns is None else int(self.origin_ns)


def _has_data(panel: QWidget) -> bool:
    return panel.trace is not None and bool(panel.has_data())


def _least(panel: QWidget) -> int:
    """The height below which the panel cannot go (its bands' labels need it)."""
    least = getattr(panel, "minimumHeight", None)
    return int(least()) if callable(least) else 0


def row_need(kinds: Sequence[PanelKind], panels: Sequence[QWidget], total: int) -> int:
    """The height a row wants to show every lane of its main panel (folded to its least, where it
    folds) beside its charts' least."""
    main = next(k for k, kind in enumerate(kinds) if kind.main)
    least = kinds[main].least
    need = max(MIN_MAIN_HEIGHT, _least(panels[main]), least(panels[main]) if least else kinds[main].wanted(panels[main], total))
    for k, kind in enumerate(kinds):
        if k != main:
            has = _has_data(panels[k])
            need += max(kind.compact, _least(panels[k])) if has else kind.empty
    return need


def row_shares(needs: Sequence[int], total: int) -> list[int]:
    """Heights of rows wanting `needs` in `total` pixels: each its need and an even part of what is
    left, or, where the needs pass the total, a share in proportion to its need."""
    if not needs:
        return []
    if sum(needs) <= total:
        extra = (total - sum(needs)) // len(needs)
        return [n + extra for n in needs]
    return [max(1, total * n // sum(needs)) for n in needs]


def row_sizes(kinds: Sequence[PanelKind], panels: Sequence[QWidget], total: int) -> list[int]:
    """Heights of a row's panels in `total` pixels (see the module docstring).

    The main panel gets what its content needs, at least `MIN_MAIN_HEIGHT`, at most what the
    charts' minimums leave: their `wanted` heights, or, where its lanes need more, their `compact`
    ones (a chart is squeezed before a lane is scrolled out of sight); the charts with data share
    the rest by `share`, each at least that minimum; the charts without keep `empty`. With no chart
    holding data, the main panel takes everything the charts keep.
    """
    main = next(k for k, kind in enumerate(kinds) if kind.main)
    charts = [k for k in range(len(kinds)) if k != main]
    has = {k: _has_data(panels[k]) for k in charts}
    mins = {k: max(kinds[k].wanted(panels[k], total), _least(panels[k])) if has[k] else kinds[k].empty for k in charts}
    sizes = [0] * len(kinds)
    for k in charts:
        sizes[k] = mins[k]
    with_data = [k for k in charts if has[k]]
    if not with_data:
        sizes[main] = total - sum(mins.values())
        return sizes
    need = kinds[main].wanted(panels[main], total)
    if need > total - sum(mins.values()):  # the lanes before the charts' full height
        mins = {k: min(mins[k], max(kinds[k].compact, _least(panels[k]))) if has[k] else mins[k] for k in charts}
    sizes[main] = max(MIN_MAIN_HEIGHT, min(need, total - sum(mins.values())))
    free = total - sizes[main] - sum(mins[k] for k in charts if not has[k])
    weights = sum(kinds[k].share for k in with_data)
    for k in with_data[:-1]:
        sizes[k] = max(mins[k], int(free * kinds[k].share / weights))
    sizes[with_data[-1]] = free - sum(sizes[k] for k in with_data[:-1])
    return sizes


class TraceRow(QWidget):
    """One trace's panels, one of each kind, in a vertical splitter; a title when rows are several."""

    def __init__(self, axis: TimeAxis, kinds: Sequence[PanelKind], parent: QWidget | None = None):
        super().__init__(parent)
        self.kinds = list(kinds)
        self.shown: ShownTrace | None = None
        self.title = QLabel(self)
        bold = QFont()
        bold.setBold(True)  # only the weight: its size follows the application's (View › Larger text)
        self.title.setFont(bold)
        self.title.setContentsMargins(6, 2, 6, 2)
        self.title.hide()
        self.splitter = MarkedSplitter(
            Qt.Orientation.Vertical,
            self,
            "drag to give the lanes or a chart more room; double-click to fit them again",
        )
        self.splitter.fitRequested.connect(lambda: self.fit(sum(self.splitter.sizes())))
        self.panels: list[QWidget] = []
        for k, kind in enumerate(self.kinds):
            panel = kind.make(axis)
            self.panels.append(panel)
            self.splitter.addWidget(panel)
            self.splitter.setStretchFactor(k, kind.stretch)
        self.splitter.setSizes([kind.initial for kind in self.kinds])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.title)
        lay.addWidget(self.splitter, 1)

    def panel(self, name: str) -> QWidget:
        for kind, panel in zip(self.kinds, self.panels):
            if kind.name == name:
                return panel
        raise KeyError(name)

    @property
    def trace(self) -> Trace | None:
        return self.shown.trace if self.shown is not None else None

    def prepare(self, shown: ShownTrace) -> None:
        for panel in self.panels:
            panel.prepare(shown.trace)

    def show_trace(self, shown: ShownTrace | None) -> None:
        """Every panel shows `shown` (None: nothing)."""
        self.shown = shown
        if shown is None:
            for panel in self.panels:
                panel.set_trace(None)
        elif shown.origin_ns is None:  # shown alone: the panels fit the axis to it
            for panel in self.panels:
                panel.set_trace(shown.trace)
        else:
            for panel in self.panels:
                panel.set_trace(shown.trace, origin_ns=shown.origin_ns)
        self.title.setText(shown.title if shown is not None else "")

    def fit(self, total: int) -> None:
        self.splitter.setSizes(row_sizes(self.kinds, self.panels, total))

    def title_height(self) -> int:
        return self.title.sizeHint().height() if self.title.isVisibleTo(self) else 0

    def chrome_height(self) -> int:
        """What the row takes besides its panels: its title and its splitter's handles."""
        return self.title_height() + self.splitter.handleWidth() * (len(self.panels) - 1)

    def need(self, total: int) -> int:
        """The height the row wants among rows of about `total` pixels (`row_need`), with its title
        and its splitter's handles."""
        return row_need(self.kinds, self.panels, total) + self.chrome_height()

    def fold(self, on: bool) -> None:
        """Panels that can fold what they show to fit (the timeline's deep rows) do so, or not."""
        for kind, panel in zip(self.kinds, self.panels):
            if kind.fold is not None:
                kind.fold(panel, on)


@dataclass(frozen=True)
class WorkspaceState:
    """What the workspace shows, to go back to (`TraceWorkspace.snapshot`)."""

    shown: tuple[ShownTrace | None, ...]
    view: tuple[float, float]
    stack_sizes: tuple[int, ...]
    row_sizes: tuple[tuple[int, ...], ...]


class TraceWorkspace(QWidget):
    """The rows of shown traces on one time axis (see the module docstring).

    `eventSelected(row, event)`: an event was clicked in row `row`'s timeline (-1: none).
    """

    eventSelected = Signal(int, int)
    #: A rank of the large job shown whose events are not loaded was clicked (`reveal_rank`).
    rankWanted = Signal(int)

    def __init__(self, parent: QWidget | None = None, kinds: Sequence[PanelKind] | None = None):
        super().__init__(parent)
        self.kinds = list(kinds if kinds is not None else PANELS)
        self.axis = TimeAxis(self)
        self.stack = MarkedSplitter(
            Qt.Orientation.Vertical,
            self,
            "drag to share the height between the runs; double-click to share it by what their lanes need",
        )
        self.stack.fitRequested.connect(self._refit)
        #: The rows scroll here where they need more height than the workspace has (runs compared).
        self.scroll = QScrollArea(self)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.stack)
        #: With several ranks: a line saying how each does, so a slow or heavy rank stands out.
        self.rank_bar = RankSummaryBar(self)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.rank_bar)
        #: One trace of several ranks: the rank overview takes the line's place; a click on a rank
        #: shows its lanes (`reveal_rank`).
        self.rank_overview = RankOverview(self)
        self.rank_overview.rankActivated.connect(self.reveal_rank)
        lay.addWidget(self.rank_overview)
        lay.addWidget(self.scroll, 1)
        #: The rows, the first always there (it shows nothing before the first trace).
        self.rows: list[TraceRow] = []
        #: The rows were fitted while the workspace was hidden: fit them again when it is shown.
        self._fit_when_shown = False
        self._add_row(self._make_row())

    # ---- rows -------------------------------------------------------------------------------
    def _make_row(self) -> TraceRow:
        row = TraceRow(self.axis, self.kinds)
        if any(kind.name == "timeline" for kind in self.kinds):
            timeline = row.panel("timeline")
            timeline.eventSelected.connect(lambda i, r=row: self._on_event_selected(r, i))
        return row

    def _add_row(self, row: TraceRow) -> None:
        self.stack.addWidget(row)
        self.rows.append(row)

    def _drop_rows(self, keep: int) -> None:
        while len(self.rows) > max(1, keep):
            row = self.rows.pop()
            row.hide()
            row.setParent(None)
            row.deleteLater()

    def _on_event_selected(self, row: TraceRow, i: int) -> None:
        if row in self.rows:
            self.eventSelected.emit(self.rows.index(row), i)

    def panel(self, name: str, row: int = 0) -> QWidget:
        """Row `row`'s panel of kind `name`."""
        return self.rows[row].panel(name)

    @property
    def shown(self) -> list[ShownTrace]:
        return [row.shown for row in self.rows if row.shown is not None]

    @property
    def traces(self) -> list[Trace]:
        return [s.trace for s in self.shown]

    # ---- showing ----------------------------------------------------------------------------
    def show_traces(self, traces: Sequence[Trace | ShownTrace]) -> None:
        """Show `traces`, one row each, top to bottom: all of them, or (raising) none.

        A trace a panel cannot prepare changes nothing; a panel that fails to show one puts every
        panel, the axis and the layout back as they were, and the error is raised.
        """
        items = [t if isinstance(t, ShownTrace) else ShownTrace(t) for t in traces]
        if len(items) > 1:  # several on one axis: each from an explicit origin, the axis the union
            items = [replace(item, origin_ns=item.origin) for item in items]
        before = self.snapshot()
        new_rows = [self._make_row() for _ in range(len(items) - len(self.rows))]
        try:
            for row, item in zip([*self.rows, *new_rows], items):
                row.prepare(item)
        except Exception:
            for row in new_rows:
                row.deleteLater()
            raise
        try:
            for row in new_rows:
                self._add_row(row)
            # The rank views first: shown after the rows, they would lay out every row's panels again.
            self._set_rank_views([item.trace for item in items])
            for k, row in enumerate(self.rows):
                row.show_trace(items[k] if k < len(items) else None)
            self.layout().activate()
            self._fit_axis(items)
            self._fit_rows(len(items))
        except Exception:
            try:
                self.restore(before)
            except Exception:  # pragma: no cover - what was there before was shown without error
                pass
            raise
        self._drop_rows(len(items))

    def _set_rank_views(self, traces: Sequence[Trace]) -> None:
        """The rank line for traces of several ranks; the rank overview in its place for one such
        trace (every rank of its job, for a large job's ranks in view: `rank_job.job_of`)."""
        job = job_of(traces[0]) if len(traces) == 1 else None
        if job is not None:
            self.rank_overview.set_figures(with_lanes(job.figures, traces[0]), loaded=job.loaded(traces[0]))
        else:
            self.rank_overview.set_trace(traces[0] if len(traces) == 1 else None)
        self.rank_bar.set_traces(traces, show=self.rank_overview.figures is None)

    def reveal_rank(self, rank: int) -> None:
        """Scroll the (first row's) timeline to the lanes of rank `rank` of the trace shown; a rank
        of a large job whose events are not loaded is asked for (`rankWanted`)."""
        figures = self.rank_overview.figures
        if figures is None or rank not in figures.ranks:
            return
        lane = int(figures.first_lane[figures.row(rank)])
        loaded = self.rank_overview.loaded  # None: every rank is
        if lane < 0:
            if loaded is not None and rank not in loaded:
                self.rankWanted.emit(rank)
        elif any(k.name == "timeline" for k in self.kinds):
            self.panel("timeline").reveal_lane(lane)

    def _fit_axis(self, items: Sequence[ShownTrace]) -> None:
        """The axis spans every trace, each counted from its origin, and shows all of it."""
        if not items:
            return
        extents = [item.extent() for item in items]
        lo, hi = min(e[0] for e in extents), max(e[1] for e in extents)
        axis = self.axis
        if not axis.covers(lo, hi):
            axis.set_bounds(lo, hi)
        axis.reset()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self._fit_when_shown:  # laid out while hidden (a page not in front): its lanes' heights are known now
            self._fit_when_shown = False
            self.layout().activate()
            self._fit_rows(sum(1 for row in self.rows if row.shown is not None) or 1)

    def _refit(self) -> None:
        """Every row shown gets its fitted height again (a double-click on a handle)."""
        self._fit_rows(sum(1 for row in self.rows if row.shown is not None) or 1)

    def _fit_rows(self, n: int) -> None:
        self._fit_when_shown = not self.isVisible()
        several = n > 1
        for row in self.rows[:n]:
            row.title.setVisible(several)
            row.fold(several)  # compared: every lane in sight before every row of it
        for row in self.rows[n:]:
            row.hide()
        if not several:
            self.stack.setMinimumHeight(0)
            row = self.rows[0]
            row.show()
            self.stack.refresh()  # the other rows hidden: the row's height first
            row.layout().activate()
            row.fit(sum(row.splitter.sizes()) or DEFAULT_ROW_HEIGHT)
            return
        total = self.scroll.viewport().height() or self.height() or DEFAULT_ROW_HEIGHT
        for row in self.rows[:n]:
            row.show()
        # A row whose lanes need more (a fork run's pool threads) gets more of the height; where
        # the rows need more than there is, each gets its need and the rows scroll.
        needs = [row.need(total // n) for row in self.rows[:n]]
        stacked = sum(needs) + self.stack.handleWidth() * (n - 1)
        self.stack.setMinimumHeight(stacked if stacked > total else 0)
        shares = needs if stacked > total else row_shares(needs, total)
        self.stack.setSizes(shares + [0] * (len(self.rows) - n))
        for row, share in zip(self.rows[:n], shares):
            row.fit(max(1, share - row.chrome_height()))

    # ---- going back -------------------------------------------------------------------------
    def snapshot(self) -> WorkspaceState:
        return WorkspaceState(
            shown=tuple(row.shown for row in self.rows),
            view=(self.axis.lo, self.axis.hi),
            stack_sizes=tuple(self.stack.sizes()),
            row_sizes=tuple(tuple(row.splitter.sizes()) for row in self.rows),
        )

    def restore(self, state: WorkspaceState) -> None:
        """Show again what `state` showed (rows added since are dropped)."""
        self._drop_rows(len(state.shown))
        for row, shown in zip(self.rows, state.shown):
            row.show_trace(shown)
        shown = [s for s in state.shown if s is not None]
        self._set_rank_views([s.trace for s in shown])
        for k, row in enumerate(self.rows):
            row.title.setVisible(len(shown) > 1 and k < len(shown))
            row.setVisible(k == 0 or k < len(shown))
        if shown:
            self._fit_axis(shown)
            self.axis.set_view(*state.view)
        self.stack.setSizes(list(state.stack_sizes))
        self.stack.refresh()  # rows dropped and titles hidden: geometry first, then the sizes
        for row, sizes in zip(self.rows, state.row_sizes):
            row.layout().activate()
            row.splitter.setSizes(list(sizes))
