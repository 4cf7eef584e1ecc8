"""The compare view (pytest-qt, offscreen): runs one above the other on one time scale from their first
step, the summary table (one column per run) and the sortable op diff."""

from __future__ import annotations

import json

import msgspec
import pytest
from PySide6.QtCore import Qt

from branchscope.profiling import load_trace
from branchscope.profiling.trace.analyses import first_step_start
from branchscope.profiling.trace.compare import OpDiff, summarize
from branchscope.profiling.trace.prediction import predict, prediction_text
from branchscope.profiling.trace.records import BranchRecord, LoadRecord, RunRecord
from branchscope.widgets.compare_view import CompareView
from tests.builders.predicted import predicted_trace
from tests.builders.runs import write_small_trace
from tests.gui_helpers import show


def _small_run(path, mode):
    """The small trace of a run in `mode`, with some work before its first step (as a warm-up)."""
    doc = json.loads(write_small_trace(path, mode).read_text())
    doc["traceEvents"].append(
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": 1, "ts": 200.0, "dur": 50.0}
    )
    path.write_text(json.dumps(doc))
    return load_trace(path)


@pytest.fixture
def traces(tmp_path):
    """A forked run and a longer sequential one of the same small model."""
    return _small_run(tmp_path / "fork.json", "fork"), _small_run(tmp_path / "sequential.json", "sequential")


def _run(mode, interop, intra, steps) -> RunRecord:
    return RunRecord(mode=mode, interop=interop, intra=intra, model="m", unprofiled_steps_ms=steps)


@pytest.fixture
def view(qtbot):
    return show(qtbot, CompareView(), 1600, 1000)


def test_runs_are_rows_on_one_scale_each_from_its_first_step(view, traces):
    fork, seq = traces
    summaries = [summarize(fork, None, "fork.json"), summarize(seq, None, "sequential.json")]
    view.set_runs([fork, seq], summaries, 0)
    rows = view.workspace.rows
    assert [r.trace for r in rows] == [fork, seq]
    assert [r.title.text() for r in rows] == ["fork.json · fork · 2×1", "sequential.json · sequential · 2×1"]
    for row, trace in zip(rows, (fork, seq)):
        timeline = row.panel("timeline")
        first = first_step_start(trace)
        assert first is not None and first > trace.span()[0]  # work before the first step
        assert timeline.origin_ns == first and timeline.axis_time(first) == 0.0
        assert all(panel.axis is view.workspace.axis for panel in row.panels)
    # A shorter run is shorter on screen: its extent on the shared axis ends earlier.
    (_, fork_end), (_, seq_end) = (r.shown.extent() for r in rows)
    assert fork_end < seq_end
    assert view.workspace.axis.end_ns == seq_end


def _summary(view) -> dict[str, list[str]]:
    t = view.summary_table
    return {
        t.verticalHeaderItem(r).text(): [t.item(r, k).text() for k in range(t.columnCount())]
        for r in range(t.rowCount())
    }


def test_the_summary_has_a_column_per_run_and_names_parallelism_apart_from_cores(view, traces):
    fork, seq = traces
    summaries = [
        summarize(fork, _run("fork", 2, 1, [5.0, 5.1, 4.9]), "a"),
        summarize(seq, _run("sequential", 1, 1, [10.0, 10.2, 9.8]), "b"),
        summarize(fork, _run("fork", 2, 2, [10.1, 9.9, 10.0]), "c"),
    ]
    view.set_runs([fork, seq, fork], summaries, 1)
    t = view.summary_table
    assert [t.horizontalHeaderItem(k).text() for k in range(3)] == ["run 0", "run 1 (baseline)", "run 2"]
    rows = _summary(view)
    assert rows["run"] == ["m · fork · 2×1", "m · sequential · 1×1", "m · fork · 2×2"]
    assert rows["threads (inter-op × intra-op)"] == ["2×1", "1×1", "2×2"]
    assert rows["unprofiled median"] == ["5.00 ms", "10.00 ms", "10.00 ms"]
    assert rows["speedup vs baseline"] == ["2.00×", "baseline", "1.00×"]
    assert rows["within noise?"] == ["no", "–", "yes"]
    assert rows["parallelism (busy threads)"] == [f"{s.parallelism:.2f}" for s in summaries]
    assert rows["cores used (CPU samples)"] == [f"{s.cores_used:.2f}" for s in summaries]
    assert rows["peak memory cpu"] == ["20 KiB"] * 3
    # Shown again with two runs: two columns, two rows of traces.
    view.set_runs([seq, fork], summaries[1:], 0)
    assert view.summary_table.columnCount() == 2 and len(view.workspace.shown) == 2
    # A run timed beside other work says so beside its speedup, and so does every run compared with it.
    busy = _run("fork", 2, 1, [5.0, 5.1, 4.9])
    busy.load = LoadRecord(cores=2, others_cores=0.9, busy=True)
    summaries[0] = summarize(fork, busy, "a")
    view.set_runs([fork, seq, fork], summaries, 1)
    assert _summary(view)["speedup vs baseline"] == ["2.00× (machine busy)", "baseline", "1.00×"]
    view.set_runs([fork, seq, fork], summaries, 0)
    assert _summary(view)["speedup vs baseline"] == ["baseline (machine busy)", "0.50× (machine busy)", "0.50× (machine busy)"]


def _column(view, name: str) -> list[str]:
    model = view.ops_model
    headers = [model.horizontalHeaderItem(c).text() for c in range(model.columnCount())]
    c = headers.index(name)
    return [view.ops_view.model().index(r, c).data() for r in range(model.rowCount())]


def test_the_op_diff_sorts_by_number_when_a_header_is_clicked(view, traces):
    fork, seq = traces
    ops = [
        OpDiff("aten::mm", [3, 3], [100_000.0, 9_000.0], [90_000.0, 9_000.0]),
        OpDiff("aten::add", [1, 1], [9_000.0, 10_000.0], [9_000.0, 10_000.0]),
        OpDiff("aten::t", [2, 0], [20_000.0, 0.0], [20_000.0, 0.0]),
    ]
    view.set_runs([fork, seq], [summarize(fork), summarize(seq)], 0, ops=ops)
    assert _column(view, "op") == ["aten::mm", "aten::add", "aten::t"]  # as given: largest difference first
    assert _column(view, "Δ total ms") == ["91.000", "1.000", "20.000"]
    header = view.ops_view.horizontalHeader()
    total0 = [
        view.ops_model.horizontalHeaderItem(c).text() for c in range(view.ops_model.columnCount())
    ].index("total ms 0")
    header.setSortIndicator(total0, Qt.SortOrder.AscendingOrder)
    assert _column(view, "total ms 0") == ["9.000", "20.000", "100.000"]  # by number, not as text
    header.setSortIndicator(total0, Qt.SortOrder.DescendingOrder)
    assert _column(view, "op") == ["aten::mm", "aten::t", "aten::add"]


def test_without_ops_given_the_view_computes_the_diff(view, traces):
    fork, seq = traces
    view.set_runs([fork, seq], [summarize(fork), summarize(seq)], 0)
    names = _column(view, "op")
    assert "aten::mm" in names and not [n for n in names if n.startswith(("step ", "branch: "))]


def test_mismatched_runs_and_summaries_are_refused_and_change_nothing(view, traces):
    fork, seq = traces
    view.set_runs([fork, seq], [summarize(fork), summarize(seq)], 0)
    with pytest.raises(ValueError):
        view.set_runs([fork], [summarize(fork), summarize(seq)], 0)
    with pytest.raises(IndexError):
        view.set_runs([fork, seq], [summarize(fork), summarize(seq)], 2)
    assert view.workspace.traces == [fork, seq] and view.summary_table.columnCount() == 2


def test_the_summary_says_what_the_branches_could_give_and_how_far_a_fork_run_got(view, traces):
    fork, seq = traces
    branches = [BranchRecord(name="a", region="1"), BranchRecord(name="b", region="1")]
    pred = predict(branches, {"a": 6.0, "b": 4.0}, 12.0, source="test")  # 12 / (2 + 6): 1.5× on 2 and 4
    assert pred is not None
    summaries = [
        summarize(fork, msgspec.structs.replace(_run("fork", 2, 1, [8.0, 8.1, 7.9]), prediction=pred), "a"),
        summarize(seq, msgspec.structs.replace(_run("sequential", 1, 1, [12.0, 12.2, 11.8]), prediction=pred), "b"),
        summarize(fork, _run("fork", 2, 2, [10.1, 9.9, 10.0]), "c"),  # no prediction; other intra-op threads
    ]
    view.set_runs([fork, seq, fork], summaries, 1)
    rows = _summary(view)
    assert rows["branches could give"] == ["≤ 1.50× on 2 threads", "≤ 1.50× on 2, 1.50× on 4", "–"]
    assert rows["measured ÷ could give"] == ["100 % of 1.50×", "–", "–"]
    t = view.summary_table
    r = [t.verticalHeaderItem(i).text() for i in range(t.rowCount())].index("branches could give")
    assert t.item(r, 0).toolTip() == prediction_text(pred)


def test_the_gap_explained_names_the_region_that_lost_most(view, traces):
    fork, seq = traces
    measured = predicted_trace()  # region 1: 6 ms measured against 4 predicted, a 0.5 ms start, ×1.25, 1 ms idle
    summaries = [summarize(measured, None, "gap"), summarize(seq, _run("sequential", 1, 1, [12.0]), "b")]
    view.set_runs([measured, seq], summaries, 1)
    rows = _summary(view)
    assert rows["the gap explained"] == ["6.00 / 4.00 ms, +0.50 ms, ×1.25, idle 1.00 ms", "–"]
    t = view.summary_table
    r = [t.verticalHeaderItem(i).text() for i in range(t.rowCount())].index("the gap explained")
    assert t.item(r, 0).toolTip() == summaries[0].gap.text()


def test_what_the_branches_could_give_carries_the_bounds_interval(view, traces):
    fork, seq = traces
    branches = [BranchRecord(name="a", region="1"), BranchRecord(name="b", region="1")]
    pred = predict(branches, {"a": 6.0, "b": 4.0}, 12.0, source="test")
    assert pred is not None
    pred = msgspec.structs.replace(pred, by_threads_ci95={"2": [1.41, 1.58], "4": [1.41, 1.58]})
    summaries = [
        summarize(fork, msgspec.structs.replace(_run("fork", 2, 1, [8.0, 8.1, 7.9]), prediction=pred), "a"),
        summarize(seq, msgspec.structs.replace(_run("sequential", 1, 1, [12.0, 12.2, 11.8]), prediction=pred), "b"),
    ]
    view.set_runs([fork, seq], summaries, 1)
    assert _summary(view)["branches could give"] == [
        "≤ 1.50× [1.41–1.58] on 2 threads", "≤ 1.50× [1.41–1.58] on 2, 1.50× [1.41–1.58] on 4",
    ]  # fmt: skip
