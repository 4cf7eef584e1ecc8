"""The Compare page: runs of the runs list one above the other from their first step on one time
scale, their summary and their op diff (`widgets/compare_view.py`), against the baseline of the
first one's model (else the sequential 1×1 run among them)."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from branchscope.app.pages.page import OwnContentPage, PageHost
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.widgets.compare_view import CompareView


class ComparePage(OwnContentPage, CompareView):
    """The Compare tab: a `CompareView` that compares entries of the runs list (a page of its own
    content: it shows the runs it was asked to compare, whatever run is shown)."""

    def __init__(self, host: PageHost, parent: QWidget | None = None):
        CompareView.__init__(self, parent)
        self.host = host

    # ---- comparing --------------------------------------------------------------------------
    def compare_entries(self, ks: list[int]) -> bool:
        """Show entries `ks` here, and this page in front. False (and a dialog) if one cannot be
        read; False if fewer than two are listed."""
        from branchscope.profiling import load_traces
        from branchscope.profiling.trace.compare import default_baseline, summarize, unique_labels

        runs = self.host.run_list
        ks = [k for k in dict.fromkeys(ks) if 0 <= k < len(runs)]
        if len(ks) < 2:
            return False
        traces = []
        for k in ks:
            try:
                traces.append(runs.load(k, load_traces)[0])
            except (TraceFormatError, OSError) as exc:
                self.host.show_error("Cannot compare", str(exc))
                return False
        labels = unique_labels([runs[k].title for k in ks])
        summaries = [
            summarize(t, runs[k].run, str(runs[k].trace_path), label) for k, t, label in zip(ks, traces, labels)
        ]
        base = [runs.baseline_of(k) for k in ks]
        baseline = ks.index(base[0]) if base[0] in ks else default_baseline(summaries)
        self.set_runs(traces, summaries, baseline)
        self.host.show_page(self)
        return True
