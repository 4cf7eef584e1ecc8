"""The side panels: what the window shows beside the pages that want them (the Run page), about the
run shown. On top the branch legend (the shown run's branches in their colours: activating one finds
its events in the timeline), under it two tabs: the details (the trace, then a clicked event) and
the range panel (Shift+drag on the timeline: the ops per name and lane in the range; the per-step
table: a step activated zooms the timeline to it). They follow the window's model of what is shown
(`app/shown.py`), as the pages do."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QTabWidget, QWidget

from branchscope.app.pages.page import all_or_nothing
from branchscope.app.runs import Entry
from branchscope.app.shown import Shown, Undo
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.run_info import branch_label
from branchscope.widgets.branch_legend import BranchLegend
from branchscope.widgets.details_panel import DetailsPanel
from branchscope.widgets.range_panel import RangePanel
from branchscope.widgets.workspace import TraceWorkspace


class SidePanels(QSplitter):
    """The legend over the details and range tabs, following `shown` and `workspace`'s (first) timeline."""

    def __init__(self, shown: Shown, workspace: TraceWorkspace, parent: QWidget | None = None):
        super().__init__(Qt.Orientation.Vertical, parent)
        self.workspace = workspace
        self.details = DetailsPanel()
        self.legend = BranchLegend()
        self.ranges = RangePanel()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.details, "Details")
        self.tabs.addTab(self.ranges, "Range && steps")
        self.addWidget(self.legend)
        self.addWidget(self.tabs)
        self.setStretchFactor(0, 0)
        self.setStretchFactor(1, 1)
        self.setSizes([260, 700])
        #: What they show: the trace and its run.json.
        self.trace: Trace | None = None
        self.run: RunRecord | None = None

        timeline = workspace.panel("timeline")  # the first row's, there for the workspace's life
        self.legend.branchActivated.connect(lambda name: timeline.find(branch_label(name)))
        timeline.rangeCleared.connect(self.ranges.clear_range)
        self.ranges.stepActivated.connect(timeline.set_time_range)
        self.ranges.opActivated.connect(timeline.find)
        workspace.eventSelected.connect(self._on_event_selected)
        shown.trace_changing.connect(self.show_trace)
        shown.range_selected.connect(self.select_range)

    def show_trace(self, trace: Trace, entry: Entry) -> Undo:
        """Show `trace` (of `entry`), all or nothing as a page does (`app/pages/page.py`)."""
        return all_or_nothing(self._set, (self.trace, self.run), (trace, entry.run))

    def _set(self, trace: Trace | None, run: RunRecord | None) -> None:
        self.trace, self.run = trace, run
        self.details.set_trace(trace, run)
        self.legend.set_trace(trace)
        self.ranges.set_trace(trace)

    def select_range(self, start_ns: int, end_ns: int) -> None:
        """The range panel lists what happens in it, in front."""
        self.ranges.set_range(start_ns, end_ns)
        self.tabs.setCurrentWidget(self.ranges)

    def _on_event_selected(self, row: int, i: int) -> None:
        timeline = self.workspace.panel("timeline", row)
        if timeline.trace is None:
            return
        self.details.show_event(timeline.trace, i, timeline.branch_names, timeline.event_branch)
        if i >= 0:
            self.tabs.setCurrentWidget(self.details)  # an event clicked is shown, whatever tab was in front
