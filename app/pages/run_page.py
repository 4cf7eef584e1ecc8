"""The Run page: the shown run in two lines at most, each cut to the page's width (`summary_line`,
an `ElidedLines`: the whole in its tooltip): first what ran on what and how it compares with its
baseline ("machine busy" said once), then why it has no branches when fx could not find them,
that its timings may not be steady when run.json has warnings (each in the tooltip), its
prediction, in threads mode the branch threads' wait for the GIL or that the Python had none
(`profiling/trace/gil.py`), and the tracer that found its branches; over the trace workspace
(`widgets/workspace.py`: its timeline, charts and memory on one time axis). Of a large job, a
rank's overview clicked loads that rank's events (`load_rank`), through the window's loader."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from branchscope.app.elided_lines import ElidedLines, Segment
from branchscope.app.pages.page import PageHost
from branchscope.app.runs import Entry
from branchscope.app.shown import Undo
from branchscope.app.trace_loader import rank_loader
from branchscope.profiling.trace.gil import gil_line_of
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.prediction import prediction_text
from branchscope.profiling.trace.records import RunRecord
from branchscope.widgets.timeline import TimelineView
from branchscope.widgets.workspace import TraceWorkspace

#: The colours of a note that says the run has no branches, and of one that its timings may not be steady.
RED, AMBER = "#c0392b", "#b9770e"


class RunPage(QWidget):
    """The Run tab (see the module docstring)."""

    side_panels = True

    def __init__(self, host: PageHost, parent: QWidget | None = None):
        super().__init__(parent)
        self.host = host
        self.workspace = TraceWorkspace()
        self.summary_line = ElidedLines(2)
        self.summary_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.summary_line)
        lay.addWidget(self.workspace, 1)
        host.shown.trace_changing.connect(self.show_trace)
        host.shown.entry_changed.connect(self.entry_shown)
        self.workspace.rankWanted.connect(self.load_rank)

    @property
    def timeline(self) -> TimelineView:
        """The (first) shown trace's timeline."""
        return self.workspace.panel("timeline")

    # ---- following what is shown ------------------------------------------------------------
    def show_trace(self, trace: Trace, entry: Entry) -> Undo:
        before = self.workspace.snapshot()
        self.workspace.show_traces([trace])  # on failure it is back as it was
        return lambda: self.workspace.restore(before)

    def entry_shown(self, entry: Entry) -> None:
        """The shown run in two lines (see the module docstring)."""
        runs = self.host.run_list
        k = runs.index_of(entry)
        run = entry.run or RunRecord()
        info = entry.info or (entry.trace.run_info if entry.trace is not None else None)
        notes: list[Segment] = []
        if run.fx_error:
            notes.append((f"No branches: {run.fx_error}", RED))
        warnings = run.warnings or []
        if warnings:  # unsteady timings, an untested torch…: said short, each warning in the tooltip
            notes.append((f"⚠ {len(warnings)} warning{'s' if len(warnings) > 1 else ''} (hover to read)", AMBER))
        pred = run.prediction or (info.prediction if info is not None else None)
        if pred is not None:  # what the branches could give (profiling/trace/prediction.py)
            notes.append((f"Prediction: {prediction_text(pred)}", ""))
        gil = gil_line_of(entry.run if entry.run is not None and entry.run.mode is not None else info)
        if gil is not None:  # threads mode: the branch threads' time waiting for the GIL, or no GIL
            notes.append((gil, ""))
        if not run.fx_error and run.tracer and run.tracer != "torch.fx":
            why = "".join(f"; {reason}" for reason in (run.tracer_errors or {}).values())  # "<tracer> could not …"
            notes.append((f"Branches found through {run.tracer}{why}", ""))
        second: list[Segment] = []
        for note in notes:
            second += ([(" · ", "")] if second else []) + [note]
        more = [*runs.busy_details(k), *(f"⚠ {w}" for w in warnings)]
        first: list[Segment] = [(entry.title, "bold"), (": " + runs.summary_line(k), "")]
        self.summary_line.set_lines([first, second], more="\n".join(more))

    # ---- Page -------------------------------------------------------------------------------
    def tab_enabled(self) -> bool:
        return True

    def fits(self, trace: Trace) -> bool:
        """Every trace but a memory-only one (an allocator snapshot: the Memory page says more)."""
        return len(trace) > 0 or not trace.memory

    # ---- for the other pages ----------------------------------------------------------------
    def select_event(self, i: int) -> None:
        """Bring this page to the front with event i of the shown trace selected in its timeline."""
        if i < 0:
            return
        self.host.show_page(self)
        self.timeline.select_event(i)

    def step_labels(self) -> list[str]:
        """The profiled steps of the trace shown, as their labels say ("step 1", …)."""
        from branchscope.profiling.trace.ranges import step_table

        trace = self.timeline.trace
        return [] if trace is None else list(dict.fromkeys(r.label for r in step_table(trace)))

    def zoom_to_step(self, n: int) -> bool:
        """Show profiled step `n` (labelled "step n", or torch.profiler's "ProfilerStep#n"; of
        several ranks, the first) alone on the time axis; False when the trace shown has none."""
        from branchscope.profiling.trace.ranges import step_number, step_table

        trace = self.timeline.trace
        rows = [] if trace is None else [r for r in step_table(trace) if step_number(r.label) == n]
        if not rows:
            return False
        first = min(rows, key=lambda r: r.start_ns)
        self.timeline.set_time_range(first.start_ns, first.start_ns + first.dur_ns)
        return True

    # ---- a large job's ranks ----------------------------------------------------------------
    def load_rank(self, rank: int) -> None:
        """Load the events of rank `rank` of the large job shown (its overview was clicked) off the
        GUI thread (`trace_loader.rank_loader`); the job is shown again once they are read, the
        rank's lanes in sight."""
        entry = self.host.run_list.current_entry
        found = rank_loader(entry.trace if entry is not None else None, rank)
        if entry is None or found is None:
            return
        path, load = found
        self.host.statusBar().showMessage(f"loading the events of rank {rank}…")
        self.host.loader.start(
            [path], load=load, done=lambda trace: self._show_rank(entry, trace, rank),
            failed=lambda message: self.host.show_error("Cannot open trace", message),
        )  # fmt: skip

    def _show_rank(self, entry: Entry, trace: Trace, rank: int) -> None:
        runs = self.host.run_list
        k = runs.index_of(entry)
        if k < 0:
            return  # the entry was removed while its rank was read
        entry.trace = trace
        if runs.current_entry is entry and self.host.show_entry(k):
            self.workspace.reveal_rank(rank)
            self.host.statusBar().showMessage(f"rank {rank}'s events loaded")
