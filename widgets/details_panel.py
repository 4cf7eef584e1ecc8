"""The details panel: the selected event (the same fields as the tooltip), else the trace's summary
and, under it, the run's branches one per row with their colour, grouped by region as the legend
groups them and named as it names them (a name too long for the panel is cut in its middle and
shown in full on hover), the first `DetailsPanel.BRANCHES_SHOWN`, then how many more."""

from __future__ import annotations

import os

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from branchscope.profiling.trace.analyses import (
    cores_used,
    memory_imbalance,
    parallelism,
    pool_busy_share,
    steps_window,
)
from branchscope.profiling.trace.gil import gil_line_of
from branchscope.profiling.trace.mode_traits import run_traits, threads_words
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.natural import natural_key
from branchscope.profiling.trace.records import RunRecord
from branchscope.widgets.branch_legend import (
    LegendRow,
    branch_tooltip,
    fill_branch_tree,
    legend_rows,
    new_branch_tree,
    tree_items,
)
from branchscope.widgets.event_info import arg_rows, describe_event, event_html, link_rows, rows_to_html
from branchscope.widgets.theme import theme
from branchscope.widgets.units import format_bytes, format_duration


def files_text(names: list[str], most: int = 3) -> str:
    """File names joined with " + ", or for a job of many files its first and last and how many
    ("rank-0.json.gz + … + rank-255.json.gz (256 files)")."""
    if len(names) <= most:
        return " + ".join(names)
    return f"{names[0]} + … + {names[-1]} ({len(names)} files)"


def trace_summary_rows(trace: Trace, run: RunRecord | None = None) -> list[tuple[str, str]]:
    start, end = trace.span()
    cpu = trace.lanes_of("cpu")
    gpu = trace.lanes_of("gpu")
    rows = [
        ("File", files_text([os.path.basename(p) or p for p in trace.path.split(" + ")])),
        ("Events", f"{len(trace):,}"),
        ("Span", format_duration(end - start)),
        ("Lanes", f"{len(cpu)} CPU threads, {len(gpu)} GPU streams"),
    ]
    ranks = sorted({ln.rank for ln in trace.lanes if ln.rank is not None})
    if len(ranks) > 1:
        rows.append(("Ranks", ", ".join(str(r) for r in ranks)))
    where = "in the profiled steps" if steps_window(trace) is not None else "over the trace"
    rows.append(("Parallelism", f"{parallelism(trace):.2f} threads computing on average {where}"))
    cores = cores_used(trace)
    if cores is not None:
        rows.append(("Cores used", f"{cores:.2f} on average {where} (CPU samples)"))
    share = pool_busy_share(trace)
    pool = trace.lanes_of("cpu", "interop")
    info = trace.run_info
    if pool and share is not None:
        name = run_traits(info).pool_title
        title = name[:1].upper() + name[1:]
        rows.append((title, f"{len(pool)} threads, busy {share * 100:.0f}% of their time {where}"))
    for m in sorted(trace.memory, key=lambda m: natural_key(m.device)):  # rank2 before rank10
        rows.append((f"Memory {m.device}", f"peak {format_bytes(m.peak_bytes)}"))
    imb = memory_imbalance(trace)
    if imb is not None and len([m for m in trace.memory if "cuda" in m.device]) > 1:
        of = "max peak ÷ min peak" if len([m for m in trace.memory if "cuda" in m.device]) == 2 else "max peak ÷ median peak"
        rows.append(("GPU memory imbalance", f"{imb:.2f}× ({of})"))
    if info is not None:
        if info.mode:
            rows.append(("Mode", info.mode))
        if info.python:
            rows.append(("Python", info.python))
        gil = gil_line_of(run if run is not None and run.mode is not None else info)
        if gil is not None:
            rows.append(("GIL", gil))
        if info.interop is not None and info.intra is not None:
            rows.append(("Threads", threads_words(run_traits(info), info.interop, info.intra, info.cores)[0]))
        if info.branches:
            # the branches themselves: the panel's branch list, under the summary
            regions = {b.region for b in info.branches}
            rows.append(("Branches", f"{len(info.branches)} in {len(regions)} region{'s' * (len(regions) != 1)}"))
    if run is not None:
        if run.median_ms is not None:
            rows.append(("Median step", f"{run.median_ms:.2f} ms (profiled)"))
        if run.unprofiled_median_ms is not None:
            rows.append(("Without profiler", f"{run.unprofiled_median_ms:.2f} ms"))
        if run.max_abs_diff is not None:
            rows.append(("Max |Δ| vs model", f"{run.max_abs_diff:.2e}"))
    return rows


class DetailsPanel(QWidget):
    """Shows `describe_event` rows for the selected event, or the trace summary."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel("Details", self)
        f = self.title.font()
        f.setBold(True)
        self.title.setFont(f)
        self.body = QLabel(self)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setWordWrap(True)
        self.body.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        scroll = QScrollArea(self)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        #: The run's branches, one per row under their region (shown with the summary).
        self.branches = new_branch_tree(("Branch", "Ops"))
        self.branches.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.branches.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.branches.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.branches.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addWidget(self.body)
        content_layout.addWidget(self.branches)
        content_layout.addStretch(1)
        scroll.setWidget(content)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.addWidget(self.title)
        lay.addWidget(scroll, 1)
        self.setMinimumWidth(220)
        self.rows: list[tuple[str, str]] = []
        self._trace: Trace | None = None
        self._run: RunRecord | None = None
        #: What `show_event` was last given (None: the summary is shown), to redraw it in a new palette.
        self._event: tuple | None = None
        self.show_summary(None)

    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and hasattr(
            self, "_event"
        ):
            if self._event is not None:
                self.show_event(*self._event)
            else:
                self.show_summary(self._trace, self._run)

    def set_trace(self, trace: Trace | None, run: RunRecord | None = None) -> None:
        self._trace, self._run, self._event = trace, run, None
        self.show_summary(trace, run)

    def show_summary(self, trace: Trace | None, run: RunRecord | None = None) -> None:
        muted = theme().muted.name()
        self._show_branches(legend_rows(trace) if trace is not None else [])
        if trace is None:
            self.title.setText("Details")
            self.rows = []
            self.body.setText(
                f"<p style='color:{muted}'>Pick a demo and press Run, or open a trace.</p>"
                f"<p style='color:{muted}'><b>Navigate</b>: wheel zooms at the cursor, drag pans, "
                "W/S zoom, A/D pan, 0 shows all, double-click zooms to an event, Ctrl+F finds events, "
                "Shift+drag selects a time range (Esc clears it), F zooms to it.</p>"
            )
            return
        self.title.setText("Trace")
        self.rows = trace_summary_rows(trace, run)
        self.body.setText(
            rows_to_html(self.rows)
            + f"<p style='color:{muted}'>Click an event for its details; hover for a quick look.</p>"
        )

    def show_event(self, trace: Trace, i: int, branch_names=None, event_branch=None) -> None:
        self._event = (trace, i, branch_names, event_branch) if i >= 0 else None
        if i < 0:
            self.show_summary(self._trace, self._run)
            return
        self.title.setText("Event")
        self._show_branches([])
        self.rows = describe_event(trace, i, branch_names, event_branch) + link_rows(trace, i)
        self.body.setText(event_html(self.rows, arg_rows(trace, i), theme().muted.name()))


    #: The most branches the list shows; the rest are counted in its last line (the legend has them all).
    BRANCHES_SHOWN = 24

    def _show_branches(self, rows: list[LegendRow]) -> None:
        """The branch list: `rows` grouped by region, one per line with its swatch, up to
        BRANCHES_SHOWN of them then "… and N more", as tall as its rows (the panel scrolls)."""
        shown = rows[: self.BRANCHES_SHOWN]  # depth first: a nested branch's parent comes before it
        fill_branch_tree(self.branches, shown, lambda r: "" if r.ops is None else str(r.ops), branch_tooltip)
        if len(rows) > len(shown):
            more = QTreeWidgetItem([f"… and {len(rows) - len(shown)} more (the legend lists every branch)", ""])
            more.setFlags(Qt.ItemFlag.ItemIsEnabled)
            more.setToolTip(0, f"The branch legend lists all {len(rows)} branches, with a filter over them")
            self.branches.addTopLevelItem(more)
            more.setFirstColumnSpanned(True)
        self.branches.setVisible(bool(rows))
        if rows:
            count = len(tree_items(self.branches))
            row_h = self.branches.sizeHintForRow(0)
            header = self.branches.header().sizeHint().height()
            self.branches.setFixedHeight(header + count * row_h + 2 * self.branches.frameWidth() + 2)

    def branch_names(self) -> list[str]:
        """The branches the list shows, in its order."""
        names = (item.data(0, Qt.ItemDataRole.UserRole) for item in tree_items(self.branches))
        return [n for n in names if isinstance(n, str)]

