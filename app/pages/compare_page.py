"""The Compare page: runs of the runs list one above the other from their first step on one time
scale, their summary and their op diff (`widgets/compare_view.py`), against the baseline of the
first one's model (else the sequential 1×1 run among them).

Two runs of one model compared can be measured again *paired* ("Measure these two paired"):
`branchscope speedup` as a job of the window (`app/speedup_controller.py`), their two
configurations in alternation, the baseline's first; the line beside the button then says each
one's median and the speedup with its 95% interval (or that it is not distinguishable from 1.0×)."""

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
        row = QWidget(self)
        lay = QHBoxLayout(row)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(self.paired_button, 0, Qt.AlignmentFlag.AlignTop)
        lay.addWidget(self.paired_label, 1)
        layout: Any = self.layout()
        layout.insertWidget(layout.indexOf(self.parts_label) + 1, row)  # under the advice and the parts, over the runs
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
    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` here, and this page in front. False (and a dialog) if one cannot be
        read; False if fewer than two are listed."""
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
        self._offer_paired([runs[k].run for k in ks], baseline)
        self.host.show_page(self)
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
