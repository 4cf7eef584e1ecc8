"""The Memory page: the memory of the shown run. Peaks per device side by side and what is live at
the heaviest device's peak (`widgets/memory_summary.py`), over the allocations of one device
(`widgets/memory_table.py`) in the time range selected in the timeline. An allocation's op is shown
in the Run page's timeline. Its tab is enabled only for a trace with memory events."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QWidget

from branchscope.app.pages.page import PageHost, all_or_nothing
from branchscope.app.pages.run_page import RunPage
from branchscope.app.runs import Entry
from branchscope.app.shown import Undo
from branchscope.profiling.trace.model import Trace
from branchscope.widgets.memory_summary import MemorySummary
from branchscope.widgets.memory_table import MemoryTable


class MemoryPage(QSplitter):
    """The Memory tab (see the module docstring)."""

    side_panels = False

    def __init__(self, host: PageHost, parent: QWidget | None = None):
        super().__init__(Qt.Orientation.Vertical, parent)
        self.host = host
        self.memory_summary = MemorySummary()
        self.memory_table = MemoryTable()
        self.memory_summary.deviceChosen.connect(self.choose_device)
        self.memory_summary.eventsActivated.connect(lambda events: self._select_event(events[0]) if events else None)
        self.memory_table.eventActivated.connect(self._select_event)
        #: The shown trace's memory analysis (`profiling.trace.memory`), None without memory events.
        self.analysis: Any = None
        self.trace: Trace | None = None
        #: The device whose allocations are listed, and the time range they are alive in.
        self.device: str | None = None
        self.time_range: tuple[int, int] | None = None
        #: A device whose rank a click on its bar is loading: chosen once the job is shown again.
        self.pending_device: str | None = None
        self.addWidget(self.memory_summary)
        self.addWidget(self.memory_table)
        self.setSizes([520, 400])
        host.shown.trace_changing.connect(self.show_trace)
        host.shown.range_selected.connect(self.select_range)

    # ---- following what is shown ------------------------------------------------------------
    def show_trace(self, trace: Trace, entry: Entry) -> Undo:
        before = self.trace
        self.set_trace(trace)
        return lambda: self.set_trace(before)

    def select_range(self, start_ns: int, end_ns: int) -> None:
        self.time_range = (start_ns, end_ns)
        self.show_events()

    # ---- Page -------------------------------------------------------------------------------
    def tab_enabled(self) -> bool:
        return self.analysis is not None

    def fits(self, trace: Trace) -> bool:
        """A memory-only trace (an allocator snapshot): this says more than an empty timeline."""
        return len(trace) == 0 and bool(trace.memory)

    # ---- the analysis -----------------------------------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        """Show `trace`'s analysis (allocations paired, peaks, imbalance); None: nothing. All or
        nothing: if it cannot be shown, what was shown before is shown again and the error raised."""
        from branchscope.profiling.trace.memory import analyze_memory

        analysis = analyze_memory(trace) if trace is not None and trace.memory else None
        all_or_nothing(self._show, (self.trace, self.analysis), (trace, analysis))

    def _show(self, trace: Trace | None, analysis: Any) -> None:
        self.trace, self.analysis = trace, analysis
        self.time_range = None
        self.memory_summary.set_analysis(analysis)
        chosen, self.pending_device = self.pending_device, None
        if analysis is not None and chosen in analysis.series:  # a rank loaded by a click on its bar
            self.memory_summary.set_device(chosen)
        self.show_events(device=self.memory_summary.device)

    def choose_device(self, device: str) -> None:
        """A bar was clicked: list its device's allocations; a large job's rank not loaded yet is
        loaded first (as a click in the Run page's rank overview does), then shown chosen."""
        if self.analysis is not None and device not in self.analysis.series:
            rank = next((d.rank for d in self.memory_summary.devices if d.device == device), None)
            if rank is not None:
                self.pending_device = device
                self.host.page(RunPage).load_rank(rank)
                return
        self.show_events(device=device)

    def show_events(self, device: str | None = None) -> None:
        """The events table: `device` (default: the one shown) in the timeline's selected range."""
        if self.analysis is None:
            self.memory_table.set_analysis(None, None)
            return
        self.device = device or self.device or self.memory_summary.default_device()
        t0, t1 = self.time_range or (None, None)
        shown = self.host.page(RunPage).workspace.shown
        origin = shown[0].origin if shown else None
        self.memory_table.set_analysis(self.analysis, self.device, t0, t1, origin)

    def _select_event(self, i: int) -> None:
        """Show event i of the shown trace in the Run page's timeline, selected."""
        self.host.page(RunPage).select_event(i)
