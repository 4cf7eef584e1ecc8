"""The Compare page: runs of the runs list one above the other from their first step on one time
scale, their summary and their op diff (`widgets/compare_view.py`), against the baseline of the
first one's model (else the sequential 1×1 run among them).

Two runs of one model compared can be measured again *paired* ("Measure these two paired"):
`branchscope speedup` as a job of the window (`app/speedup_controller.py`), their two
configurations in alternation, the baseline's first; the line beside the button then says each
one's median and the speedup with its 95% interval (or that it is not distinguishable from 1.0×).

The page follows the runs list's selection (`follow_selection`): two or more rows selected are
compared here as soon as the page is in front, without pressing "Compare selected runs" (which
stays, and brings the page to the front); before any comparison the page says how to pick runs."""

from __future__ import annotations

import dataclasses
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from branchscope.app.pages.page import OwnContentPage, PageHost
from branchscope.app.speedup_controller import SpeedupController
from branchscope.profiling.run.modes import MODES
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.paired import PairedConfig, PairedRequest, speedup_lines
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sweep_records import SpeedupRecord
from branchscope.widgets.compare_view import CompareView

#: What the page says before any runs are compared: how to pick them.
PICK_NONE = (
    "Select two or more runs in the runs list (Ctrl+click, or Shift+click for a range) "
    "to compare them here, one above the other on one time scale."
)
PICK_ONE = "One run selected: Ctrl+click another run in the runs list (or Shift+click a range) to compare them here."

PAIRED_TIP = (
    "Run the two configurations again, alternating (one step of each in turn, or a fresh worker of each "
    "in turn), and give the speedup as the median of per-pair ratios with a 95% interval"
)


def paired_request(base: RunRecord | None, other: RunRecord | None, rounds: int | None = None) -> PairedRequest | str:
    """The paired measurement of two runs (the baseline's configuration first), or why there is none."""
    if base is None or other is None:
        return "needs two runs with their run.json"
    options = [RunOptions.from_record(run) for run in (base, other)]
    if options[0] is None or options[1] is None:
        return "needs runs whose run.json says how to run the model again"
    if options[0].model_key != options[1].model_key:
        return "needs two runs of one model"
    if any((run.nproc or 1) > 1 for run in (base, other)):
        return "measures one process: not for distributed runs"
    configs = []
    for run in (base, other):
        if run.mode not in MODES or not run.interop or not run.intra or run.interop < 1 or run.intra < 1:
            return "needs runs whose mode and threads are known"
        configs.append(PairedConfig(run.mode, run.interop, run.intra))
    if configs[0] == configs[1]:
        return "the two runs have one configuration: nothing to pair"
    return PairedRequest(configs=configs, options=options[0].replace(nproc=1), rounds=rounds)


class ComparePage(OwnContentPage, CompareView):
    """The Compare tab: a `CompareView` that compares entries of the runs list (a page of its own
    content: it shows the runs it was asked to compare, whatever run is shown), and measures two of
    them paired."""

    #: Rounds of a paired measurement started here (None: `branchscope speedup`'s default).
    paired_rounds: int | None = None

    def __init__(self, host: PageHost, parent: QWidget | None = None):
        CompareView.__init__(self, parent)
        self.host = host
        self.paired_button = QPushButton("Measure these two paired", self)
        self.paired_button.setEnabled(False)
        self.paired_button.setToolTip(PAIRED_TIP)
        self.paired_label = QLabel("", self)
        self.paired_label.setWordWrap(True)
        self.paired_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = self.paired_row = QWidget(self)
        lay = QHBoxLayout(row)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(self.paired_button, 0, Qt.AlignmentFlag.AlignTop)
        lay.addWidget(self.paired_label, 1)
        layout: Any = self.layout()
        layout.insertWidget(layout.indexOf(self.parts_label) + 1, row)  # under the advice and the parts, over the runs
        #: Before any runs are compared: how to pick them (in the runs' place).
        self.pick_label = QLabel(PICK_NONE, self)
        self.pick_label.setWordWrap(True)
        self.pick_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.pick_label, 1)
        self.splitter.hide()
        row.hide()
        #: The entries compared now, and those selected in the runs list (`follow_selection`).
        self.compared: list[int] = []
        self.selected: list[int] = []
        self._tried: list[int] = []
        self.speedup_controller = SpeedupController(self)
        self.speedup_controller.started.connect(self._paired_started)
        self.speedup_controller.progress.connect(self._paired_progress)
        self.speedup_controller.finished.connect(self._paired_finished)
        self.speedup_controller.failed.connect(self._paired_failed)
        self.speedup_controller.canceled.connect(lambda _request: self.paired_label.setText("paired measurement cancelled"))
        self.paired_button.clicked.connect(self.measure_paired)
        self.paired: PairedRequest | None = None
        #: The last paired measurement's result.
        self.paired_result: SpeedupRecord | None = None

    # ---- comparing --------------------------------------------------------------------------
    def follow_selection(self, rows: list[int]) -> None:
        """The runs list's selection changed to `rows`: two or more are compared here (now if the
        page is in front, else when it comes to the front); fewer leave what is compared, or, with
        nothing compared yet, the page says how to pick runs."""
        self.selected = list(rows)
        if not self.compared:
            self.pick_label.setText(PICK_ONE if len(rows) == 1 else PICK_NONE)
        if self.isVisible():
            self._compare_selected()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        self._compare_selected()

    def _compare_selected(self) -> None:
        """Compare the rows selected, unless they are compared already or were tried (a run that
        cannot be read says so once, not each time the page is shown)."""
        rows = self.selected
        if len(rows) >= 2 and rows not in (self.compared, self._tried):
            self._tried = list(rows)
            self.show_entries(rows)

    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` here, and this page in front. False (and a dialog) if one cannot be
        read; False if fewer than two are listed."""
        if not self.show_entries(ks):
            return False
        self.host.show_page(self)
        return True

    def show_entries(self, ks: list[int]) -> bool:
        """Compare entries `ks` here (the page stays where it is). False (and a dialog) if one
        cannot be read; False if fewer than two are listed."""
        from branchscope.app.trace_loader import read_whole
        from branchscope.profiling.trace.compare import default_baseline, summarize, unique_labels

        runs = self.host.run_list
        ks = [k for k in dict.fromkeys(ks) if 0 <= k < len(runs)]
        if len(ks) < 2:
            return False
        traces = []
        for k in ks:
            try:
                traces.append(runs.load(k, read_whole)[0])
            except (TraceFormatError, OSError) as exc:
                self.host.show_error("Cannot compare", str(exc))
                return False
        labels = unique_labels([runs[k].title for k in ks])
        summaries = [  # the plan's words from the registry where an earlier run.json lacks them
            dataclasses.replace(summarize(t, runs[k].run, str(runs[k].trace_path), label), plan_by=runs[k].plan_by)
            for k, t, label in zip(ks, traces, labels)
        ]
        base = [runs.baseline_of(k) for k in ks]
        baseline = ks.index(base[0]) if base[0] in ks else default_baseline(summaries)
        self.set_runs(traces, summaries, baseline)
        self.compared = list(ks)
        self.pick_label.hide()
        self.splitter.show()
        self.paired_row.show()
        self._offer_paired([runs[k].run for k in ks], baseline)
        return True

    # ---- measuring two runs paired -----------------------------------------------------------
    def _offer_paired(self, records: list[RunRecord | None], baseline: int) -> None:
        """The button for the runs now compared: enabled for two runs of one model (the baseline's
        configuration first); a measurement of other runs still going is cancelled."""
        self.speedup_controller.cancel()
        self.paired_result = None
        self.paired_label.setText("")
        request: PairedRequest | str = "compares exactly two runs"
        if len(records) == 2:
            request = paired_request(records[baseline], records[1 - baseline], self.paired_rounds)
        self.paired = request if isinstance(request, PairedRequest) else None
        self.paired_button.setEnabled(self.paired is not None)
        self.paired_button.setToolTip(PAIRED_TIP if self.paired is not None else f"{PAIRED_TIP}: {request}")

    def measure_paired(self) -> None:
        """Start measuring the two runs compared, paired (see the module docstring)."""
        if self.paired is None:
            return
        self.paired.rounds = self.paired_rounds
        self.speedup_controller.start(self.paired)

    def _paired_started(self, request: PairedRequest) -> None:
        labels = " and ".join(c.label for c in request.configs)
        self.paired_label.setText(f"measuring {labels} in alternation…")

    def _paired_progress(self, step: int, of: int) -> None:
        self.paired_label.setText(f"measuring in alternation… {step}/{of}")

    def _paired_finished(self, record: SpeedupRecord) -> None:
        self.paired_result = record
        self.paired_label.setText("\n".join(speedup_lines(record)))

    def _paired_failed(self, message: str) -> None:
        self.paired_label.setText(f"paired measurement failed: {message}")

    def shutdown(self) -> None:
        """Stop a paired measurement going (the window is closing)."""
        self.speedup_controller.shutdown()
