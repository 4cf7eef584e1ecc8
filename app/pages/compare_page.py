"""The Compare page: runs of the runs list one above the other from their first step on one time
scale, their summary and their op diff (`widgets/compare_view.py`), against the baseline of the
first one's model (else the sequential 1×1 run among them).

Two runs of one model compared can be measured again *paired* ("Measure these two paired"):
`branchscope speedup` as a job of the window (`app/speedup_controller.py`), their two
configurations in alternation, the baseline's first; the line beside the button then says each
one's median and the speedup with its 95% interval (or that it is not distinguishable from 1.0×).

The page follows the runs list's selection (`follow_selection`): two or more rows selected are
compared here as soon as the page is in front, without pressing "Compare selected runs" (which
stays, and brings the page to the front); before any comparison the page says how to pick runs.
Traces not in memory are read by the window's one loader off the GUI thread (progress and Cancel
in the status bar); a newer selection drops a reading still going. At most `MAX_COMPARED` runs are
compared at once (the first of those selected; the page says so), and the traces of runs that
leave the comparison are let go unless shown or cached (`Runs.mark_compared`). `compare_entries`
(the button, `open --tab compare`, a sweep's cells) reads at once: its callers wait for it."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from branchscope.app.pages.page import OwnContentPage, PageHost
from branchscope.app.speedup_controller import SpeedupController
from branchscope.profiling.run.modes import MODES
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.paired import PairedConfig, PairedRequest, speedup_lines
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sweep_records import SpeedupRecord
from branchscope.widgets.compare_view import CompareView

if TYPE_CHECKING:
    from branchscope.app.run_entry import Entry
    from branchscope.profiling.trace.model import Trace

#: Runs compared at once at most (the page's layout is sized for four): of more selected, the first.
MAX_COMPARED = 4

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
        #: Over the runs: how many of those selected are compared, or how reading them goes.
        self.count_label = QLabel("", self)
        self.count_label.setWordWrap(True)
        self.count_label.hide()
        layout.insertWidget(layout.indexOf(row), self.count_label)
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
        #: The rows whose traces the window's loader is reading to compare them (None: none), and
        #: that reading's number (the result of an older one is dropped).
        self._reading: list[int] | None = None
        self._reading_id = 0
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
        nothing compared yet, the page says how to pick runs. A reading of other runs still going
        is dropped: its runs are never shown."""
        self.selected = list(rows)
        if self._reading is not None and rows[:MAX_COMPARED] != self._reading:
            self._drop_reading()
        if not self.compared and self._reading is None:
            self.pick_label.setText(PICK_ONE if len(rows) == 1 else PICK_NONE)
        if self.isVisible():
            self._compare_selected()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        self._compare_selected()

    def _compare_selected(self) -> None:
        """Compare the rows selected (the first `MAX_COMPARED`), unless they are compared or read
        already or were tried (a run that cannot be read says so once, not each time the page is
        shown): those in memory at once, the others read by the window's loader first."""
        rows = self.selected
        if len(rows) < 2 or rows == self._tried:
            return
        if rows[:MAX_COMPARED] == self.compared:
            self._say_count(len(rows))
        elif rows[:MAX_COMPARED] != self._reading or not self.host.loader.is_loading():
            self._read_then_show(rows)

    def compare_in_background(self, ks: list[int]) -> None:
        """The user asked to compare rows `ks` (Compare selected runs, the runs list's menu): this
        page in front, comparing them at once where their traces are in memory, else once the
        window's loader read them off the GUI thread (a reading of the same rows already going is
        kept, not begun again)."""
        self._tried = []  # asked again: a run that could not be read is tried again
        self.follow_selection(ks)
        self.host.show_page(self)

    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` here, and this page in front. False (and a dialog) if one cannot be
        read; False if fewer than two are listed."""
        if not self.show_entries(ks):
            return False
        self.host.show_page(self)
        return True

    def show_entries(self, ks: list[int]) -> bool:
        """Compare entries `ks` here (the first `MAX_COMPARED`; the page stays where it is), their
        traces read at once on this thread where not in memory (the command line and tests wait
        for the comparison). False (and a dialog) if one cannot be read; False if fewer than two
        are listed. A reading still going for the selection is dropped."""
        from branchscope.app.trace_loader import entries_loader

        ks = self._listed(ks)
        if len(ks) < 2:
            return False
        self._drop_reading()
        missing = self._missing(ks)
        if missing:
            paths, load = entries_loader([e.paths for e in missing])
            traces = self.host.loader.load_now(paths, load=load, done=lambda traces: traces, failed=self._cannot_compare)
            if traces is None:
                return False
            self._keep(missing, traces)
        self._show(ks)
        return True

    def _listed(self, ks: list[int]) -> list[int]:
        """`ks` without repeats or rows not listed."""
        return [k for k in dict.fromkeys(ks) if 0 <= k < len(self.host.run_list)]

    def _missing(self, ks: list[int]) -> list[Entry]:
        """The entries among the first `MAX_COMPARED` of `ks` whose traces are not in memory."""
        runs = self.host.run_list
        return [runs[k] for k in ks[:MAX_COMPARED] if runs[k].trace is None]

    def _read_then_show(self, rows: list[int]) -> None:
        """Compare `rows`: at once if their traces are in memory, else once the window's loader read
        those missing off the GUI thread (progress and Cancel in the status bar)."""
        from branchscope.app.trace_loader import entries_loader

        ks = self._listed(rows)
        if len(ks) < 2:
            return
        missing = self._missing(ks)
        if not missing:
            self._drop_reading()
            self._show(ks)
            return
        runs = self.host.run_list
        self._reading, self._reading_id = ks[:MAX_COMPARED], self._reading_id + 1
        then = partial(self._read, self._reading_id, [runs[k] for k in ks], missing)
        failed, cancelled = partial(self._read_failed, self._reading_id, rows), partial(self._read_cancelled, self._reading_id, rows)
        paths, load = entries_loader([e.paths for e in missing])
        self._say(f"reading {len(missing)} {'trace' if len(missing) == 1 else 'traces'} to compare…")
        self.host.loader.start(paths, load=load, done=then, failed=failed, cancelled=cancelled)

    def _read(self, reading_id: int, entries: list[Entry], missing: list[Entry], traces: list[Trace]) -> None:
        """The traces of `missing` were read: compare `entries` (those still listed; any whose trace
        was let go meanwhile read again), unless a newer selection dropped this reading."""
        if reading_id != self._reading_id or self._reading is None:
            return
        self._reading = None
        self._say("")
        self._keep(missing, traces)
        runs = self.host.run_list
        self._read_then_show([k for k in map(runs.index_of, entries) if k >= 0])

    def _keep(self, entries: list[Entry], traces: list[Trace]) -> None:
        """Give each of `entries` still listed (and still without one) its trace read."""
        runs = self.host.run_list
        for entry, trace in zip(entries, traces):
            k = runs.index_of(entry)
            if k >= 0:
                runs.load(k, lambda _paths, trace=trace: trace)

    def _read_failed(self, reading_id: int, rows: list[int], message: str) -> None:
        """Reading `rows` failed: say why once (not again each time the page is shown)."""
        if reading_id == self._reading_id and self._reading is not None:
            self._reading, self._tried = None, list(rows)
            self._say("")
            self._cannot_compare(message)

    def _read_cancelled(self, reading_id: int, rows: list[int]) -> None:
        """The user cancelled reading `rows`: not read again until the selection changes."""
        if reading_id == self._reading_id and self._reading is not None:
            self._reading, self._tried = None, list(rows)
            self._say("reading the runs to compare was cancelled: select other runs to compare them")

    def _drop_reading(self) -> None:
        """Forget a reading still going (its result is never shown) and what it said."""
        if self._reading is not None:
            self._reading = None
            self._say("")

    def _cannot_compare(self, message: str) -> None:
        self.host.show_error("Cannot compare", message)

    def _say(self, text: str) -> None:
        """Say `text` (how the reading goes) over the runs compared, or in their place when none is;
        "" goes back to what the page says otherwise."""
        if self.compared:
            self.count_label.setText(text)
            self.count_label.setVisible(bool(text))
        else:
            self.pick_label.setText(text or (PICK_ONE if len(self.selected) == 1 else PICK_NONE))

    def _say_count(self, asked: int) -> None:
        """Say that only the first `MAX_COMPARED` of `asked` runs are compared, if so."""
        shown = len(self.compared)
        self._say(f"{shown} of {asked} runs compared: at most {MAX_COMPARED} at once, the first in the list" if asked > shown else "")

    def _show(self, ks: list[int]) -> None:
        """Compare the first `MAX_COMPARED` of entries `ks`, whose traces are in memory; the traces of
        the entries compared before are let go unless kept otherwise (`Runs.mark_compared`)."""
        from branchscope.profiling.trace.compare import default_baseline, summarize, unique_labels

        runs = self.host.run_list
        asked, ks = len(ks), ks[:MAX_COMPARED]
        traces = [runs[k].trace for k in ks]
        labels = unique_labels([runs[k].title for k in ks])
        summaries = [  # the plan's words from the registry where an earlier run.json lacks them
            dataclasses.replace(summarize(t, runs[k].run, str(runs[k].trace_path), label), plan_by=runs[k].plan_by)
            for k, t, label in zip(ks, traces, labels)
        ]
        base = [runs.baseline_of(k) for k in ks]
        baseline = ks.index(base[0]) if base[0] in ks else default_baseline(summaries)
        self.set_runs(traces, summaries, baseline)
        self.compared = list(ks)
        runs.mark_compared(ks)
        self.pick_label.hide()
        self.splitter.show()
        self.paired_row.show()
        self._say_count(asked)
        self._offer_paired([runs[k].run for k in ks], baseline)

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
